"""Docs pages generated from the code (``scripts/gen_settings.py``, ``scripts/gen_layout.py``): write one, or
check that the copy on disk is the one the code renders.

"""
from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Callable, List, Optional


def check_or_write(out: Path, page: str, check: bool, script: str) -> int:
    """``check``: 0 when ``out`` holds ``page``, else 1 with a unified diff on stdout and a line naming ``script``
    on stderr. Otherwise writes ``page`` to ``out`` when it differs (saying so) and returns 0."""
    old = out.read_text(encoding="utf-8") if out.exists() else ""
    if check:
        if old == page:
            return 0
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(keepends=True), page.splitlines(keepends=True),
                                                   f"{out} (on disk)", f"{out} (from the code)"))
        print(f"{out} is stale: run python scripts/{script}", file=sys.stderr)
        return 1
    if old != page:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page, encoding="utf-8")
        print(f"wrote {out}")
    return 0


def page_main(argv: Optional[List[str]], doc: Optional[str], default_out: Path, render: Callable[[], str],
              problems: Callable[[], List[str]], script: str) -> int:
    """The command line of a page script: ``[--check] [--out PAGE]``; 1 with one line per problem on stderr when
    ``problems()`` finds any (or ``render()`` raises a ``PyGDistError``), else :func:`check_or_write`."""
    from pyg_dist.errors import PyGDistError
    parser = argparse.ArgumentParser(description=doc.split("\n")[0] if doc else None)
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 when stale")
    parser.add_argument("--out", type=Path, default=default_out, help=f"the page (default: {default_out.name})")
    args = parser.parse_args(argv)
    found = problems()
    if found:
        print("\n".join(found), file=sys.stderr)
        return 1
    try:
        page = render()
    except PyGDistError as exc:
        print(exc, file=sys.stderr)
        return 1
    return check_or_write(args.out, page, args.check, script)


__all__ = ["check_or_write", "page_main"]
