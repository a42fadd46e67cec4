#!/usr/bin/env python
"""Build the docs site and save screenshots of its pages in headless Chromium, so a person can look at them.

    python scripts/docs_screenshots.py                       # start page, a guide, an API page -> docs-shots/
    python scripts/docs_screenshots.py --out shots --page reference/cli/ --page operations/slurm/

Needs ``mkdocs`` (``pip install -e ".[docs]"``) and Debian's ``chromium`` (``apt-get install chromium``;
``--install`` runs that when it is missing, as root). The site is built strictly into a temporary folder and
served on 127.0.0.1 at a free port for the time of the screenshots. Prints one line per page: its URL, the PNG
and its size; exits 1 when a page did not render (no PNG, or an empty one).
"""
from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import List, Optional

REPO = Path(__file__).resolve().parent.parent
PAGES = ["", "guides/partitioning/", "reference/api/loader/"]


def find_chromium(install: bool) -> str:
    """The Chromium binary; installs Debian's package first when asked and missing."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return str(shutil.which(name))
    if install:
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], check=True)
        return find_chromium(False)
    sys.exit("docs_screenshots: no chromium on PATH (apt-get install chromium, or pass --install)")


def build_site(out: Path) -> None:
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)], cwd=REPO,
                   check=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # no line per request
        pass


def serve(root: Path) -> http.server.ThreadingHTTPServer:
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def shoot(chromium: str, url: str, png: Path, width: int, height: int) -> None:
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--window-size={width},{height}", f"--screenshot={png}", "--virtual-time-budget=3000", url]
    subprocess.run(cmd, check=False, capture_output=True, timeout=120)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "docs-shots", help="folder for the PNGs")
    p.add_argument("--page", action="append", default=None, help=f"a page's path in the site (default {PAGES})")
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=1600, help="window height (a tall one shows a whole page)")
    p.add_argument("--install", action="store_true", help="apt-get install chromium when it is missing")
    args = p.parse_args(argv)
    chromium = find_chromium(args.install)
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    with tempfile.TemporaryDirectory() as site:
        build_site(Path(site))
        server = serve(Path(site))
        try:
            host, port = server.server_address[:2]
            for page in args.page or PAGES:
                url = f"http://{host}:{port}/{page}"
                name = re.sub(r"[^\w.-]+", "_", page.strip("/")).strip("_") or "index"
                png = args.out / f"{name}.png"
                shoot(chromium, url, png, args.width, args.height)
                size = png.stat().st_size if png.exists() else 0
                failed += size == 0
                print(f"{url} -> {png} ({size:,} bytes)" if size else f"{url}: NO SCREENSHOT")
        finally:
            server.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
