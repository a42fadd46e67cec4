"""The docs site covers the code: every public name on an API page, every console script on the command-line
page, every page in the nav, and no page naming a path of one particular machine."""
import re
from pathlib import Path

import pytest
import tomllib

import pyg_dist

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _rendered():
    text = "".join(p.read_text(encoding="utf-8") for p in (DOCS / "reference").rglob("*.md"))
    return set(re.findall(r"^::: (\S+)", text, re.M))


def test_every_public_name_has_an_api_entry():
    rendered = _rendered()
    missing = [f"{mod}.{name}" for name, mod in pyg_dist._LAZY.items()
               if f"{mod}.{name}" not in rendered and mod not in rendered]
    assert not missing, f"public names without a '::: name' line under docs/reference/: {missing}"


def test_every_api_entry_names_a_real_object():
    import importlib
    for target in _rendered():
        parts = target.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable module prefix, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
            break
        else:
            pytest.fail(f"{target}: no such module")


def test_every_console_script_is_on_the_command_line_page():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    for name, entry in scripts.items():
        module = entry.split(":")[0]
        assert f"## {name}" in page and f"<!-- argparse: {module}:build_parser -->" in page, name


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    nav = set(re.findall(r":\s*(\S+\.md)\s*$", (REPO / "mkdocs.yml").read_text(), re.M))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert nav == pages, f"only in the nav: {sorted(nav - pages)}; not in the nav: {sorted(pages - nav)}"


MACHINE_PATH = re.compile(r"(?<![\w.])(/work/|/root/|/home/\w|/Users/)")


@pytest.mark.parametrize("path", ["README.md", "CHANGELOG.md", "docs", "examples", "scripts", "src"])
def test_no_page_names_a_path_of_one_machine(path):
    root = REPO / path
    files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file() and p.suffix in
                                           (".md", ".sh", ".sbatch", ".py", ".yml")]
    found = [f"{f.relative_to(REPO)}:{n}: {line.strip()}" for f in files
             for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1) if MACHINE_PATH.search(line)]
    assert not found, "\n".join(found)
