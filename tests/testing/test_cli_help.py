"""Every option of every console command has a help text, and the command-line page renders it as written:
``ogbn-<name>`` stays visible (not an HTML tag), a group title's ``*`` is no emphasis."""
import argparse
import importlib
import importlib.util
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def _parser(entry: str) -> argparse.ArgumentParser:
    module = importlib.import_module(entry.split(":")[0])
    return module.build_parser()  # the function the docs page renders (tests/testing/test_docs_site.py)


def _hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", REPO / "scripts" / "mkdocs_hooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("command", sorted(SCRIPTS))
def test_every_option_has_help(command):
    parser = _parser(SCRIPTS[command])
    assert parser.prog == command
    bare = [a.option_strings[0] if a.option_strings else a.dest for a in parser._actions
            if a.help != argparse.SUPPRESS and not (a.help or "").strip()]
    assert not bare, f"{command}: options without a help text (an empty row on docs/reference/cli.md): {bare}"


@pytest.mark.parametrize("command", sorted(SCRIPTS))
def test_every_option_has_a_filled_row_on_the_page(command):
    page = _hooks().render_parser(_parser(SCRIPTS[command]))
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert rows, page
    empty = [r for r in rows if r.rstrip().endswith("|  |")]
    assert not empty, empty


def test_page_escapes_angle_brackets_and_asterisks():
    hooks = _hooks()
    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--dataset", help="cora | ogbn-<name> (see `a<b>`)")
    parser.add_argument("--seed", type=int, default=0, help="seed, %(default)s unless given; 50%% of it")
    parser.add_argument_group("ogbn-* / edgelist").add_argument("--split", help="x")
    page = hooks.render_parser(parser)
    assert "ogbn-&lt;name&gt; (see `a<b>`)" in page  # escaped as text, kept inside a code span
    assert "**ogbn-\\* / edgelist**" in page
    assert "| `--seed` | `SEED` | `0` | seed, 0 unless given; 50% of it |" in page  # 0 is a default, not "unset"
    import markdown  # a test dependency (.[test]), also installed with mkdocs
    html = markdown.markdown(page, extensions=["tables"])
    assert "ogbn-&lt;name&gt;" in html and "<name>" not in html
    assert "<strong>ogbn-* / edgelist</strong>" in html
