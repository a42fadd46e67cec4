#!/usr/bin/env python
"""Write ``docs/reference/settings.md``, from the code (:mod:`pyg_dist.testing.settings_table`).

    python scripts/gen_settings.py            # (re)writes docs/reference/settings.md
    python scripts/gen_settings.py --check    # exit 1 with a diff when docs/reference/settings.md is stale

Exit status 1 also when a setting has no documented meaning (one line per problem on stderr).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

from pyg_dist.testing.pages import page_main
from pyg_dist.testing.settings_table import all_problems, render_page

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "docs" / "reference" / "settings.md"


def main(argv: Optional[List[str]] = None) -> int:
    return page_main(argv, __doc__, DEFAULT_OUT, render_page, all_problems, "gen_settings.py")


if __name__ == "__main__":
    sys.exit(main())
