#!/usr/bin/env python
"""Write ``docs/reference/modules.md``, every module under its stage, from the code
(:mod:`pyg_dist.testing.module_map`).

    python scripts/gen_layout.py            # (re)writes docs/reference/modules.md
    python scripts/gen_layout.py --check    # exit 1 with a diff when the page is stale

Exit status 1 also when a module has no docstring (one line each on stderr).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

from pyg_dist.testing.module_map import missing_docstrings, render_page
from pyg_dist.testing.pages import page_main

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "docs" / "reference" / "modules.md"


def _problems() -> List[str]:
    return [f"{m}: no module docstring" for m in missing_docstrings()]


def main(argv: Optional[List[str]] = None) -> int:
    return page_main(argv, __doc__, DEFAULT_OUT, render_page, _problems, "gen_layout.py")


if __name__ == "__main__":
    sys.exit(main())
