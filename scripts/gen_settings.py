#!/usr/bin/env python
"""Write ``docs/reference/settings.md``, from the code (:mod:`pyg_dist.testing.settings_table`).

    python scripts/gen_settings.py            # (re)writes docs/reference/settings.md
    python scripts/gen_settings.py --check    # exit 1 with a diff when docs/reference/settings.md is stale

Exit status 1 also when a setting has no documented meaning (one line per problem on stderr).
"""
from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import List, Optional

from pyg_dist.errors import PyGDistError
from pyg_dist.testing.settings_table import all_problems, render_page

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "docs" / "reference" / "settings.md"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 when stale")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the page (default: docs/reference/settings.md)")
    args = parser.parse_args(argv)
    problems = all_problems()
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    try:
        page = render_page()
    except PyGDistError as exc:
        print(exc, file=sys.stderr)
        return 1
    old = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
    if args.check:
        if old == page:
            return 0
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(keepends=True), page.splitlines(keepends=True),
                                                   f"{args.out} (on disk)", f"{args.out} (from the code)"))
        print(f"{args.out} is stale: run python scripts/gen_settings.py", file=sys.stderr)
        return 1
    if old != page:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(page, encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
