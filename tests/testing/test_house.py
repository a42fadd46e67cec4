"""The house rules hold for the code: no circles, no import from a lower stage to a higher one, package name
tables that agree, tests that mirror the source folders, and trainers that load no partitioner module."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pyg_dist.testing import house

REPO = Path(__file__).resolve().parents[2]


def test_no_stage_imports_a_stage_it_may_not():
    assert house.stage_violations() == []


def test_no_circles():
    assert house.circles() == []


def _tree(tmp_path, files):
    root = tmp_path / "pyg_dist"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checks_catch_a_circle_and_an_arrow_up(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "store/__init__.py": "",
        "store/a.py": "from pyg_dist.store import b\n",
        "store/b.py": "def f():\n    from pyg_dist.store.a import x\n",       # a circle, through a function
        "format/__init__.py": "",
        "format/c.py": "from pyg_dist.store.a import y\n",                      # format may not import store
        "partition/__init__.py": "",
        "store/d.py": "from pyg_dist.partition import Partitioner\n",           # the runtime never imports it
        "ops/__init__.py": "_LAZY = {'k': 'pyg_dist.ops.k'}\n",
        "ops/k.py": "from ..format.c import z\n",                               # relative, ops is the ground
    })
    assert house.circles(root) == [["pyg_dist.store.a", "pyg_dist.store.b"]]
    assert sorted(house.stage_violations(root)) == [("pyg_dist.format.c", "pyg_dist.store.a"),
                                                    ("pyg_dist.ops.k", "pyg_dist.format.c"),
                                                    ("pyg_dist.store.d", "pyg_dist.partition")]


def _inits():
    return sorted(p for p in house.PACKAGE_DIR.rglob("__init__.py") if house.lazy_table(p))


@pytest.mark.parametrize("init", _inits(), ids=lambda p: house.module_name(p))
def test_name_tables_agree(init):
    """``_LAZY``, the ``TYPE_CHECKING`` imports and ``__all__`` name the same things, each from the module
    that defines it, and every name resolves."""
    import importlib

    table, typed = house.lazy_table(init), house.type_checking_names(init)
    assert typed == table
    package = importlib.import_module(house.module_name(init))
    eager = {n for n in package.__all__ if n not in table}
    assert eager <= {"__version__"}
    assert sorted(package.__all__) == sorted(set(table) | eager)
    for name, module in table.items():
        value = getattr(package, name)
        assert getattr(importlib.import_module(module), name) is value


def test_the_checks_catch_a_drifted_table(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from m.a import A\n"
                    "_LAZY = {'A': 'm.a', 'B': 'm.b'}\n")
    assert house.type_checking_names(init) != house.lazy_table(init)


_IMPORT = re.compile(r"^\s*(?:>>> )?from (pyg_dist(?:\.[\w.]+)?) import \(?([\w, ]+)\)?\s*(?:#.*)?$", re.M)


def _documented_imports():
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md")), *sorted((REPO / "examples").rglob("*.py"))]
    found = set()
    for path in files:
        for module, names in _IMPORT.findall(path.read_text()):
            found.update((module, n.split(" as ")[0].strip()) for n in names.split(",") if n.strip())
    return sorted(found)


def test_every_name_the_docs_and_examples_import_exists():
    import importlib

    missing = []
    for module, name in _documented_imports():
        try:
            mod = importlib.import_module(module)
            if not hasattr(mod, name):
                importlib.import_module(f"{module}.{name}")
        except ImportError as exc:
            missing.append(f"from {module} import {name}: {exc}")
    assert missing == []
    assert len(_documented_imports()) > 30  # the scan itself works


def test_front_door_exports_what_the_docs_use():
    import pyg_dist
    for name in ("OutOfCorePartitioner", "Checkpointer", "run_main", "FeatureCache", "build_cache", "dist_session",
                 "serve_partition", "read_meta", "load_original_ids"):
        assert name in pyg_dist.__all__, name


def test_tests_mirror_the_source_folders(tmp_path):
    assert house.mirror_gaps() == []
    src = _tree(tmp_path, {"__init__.py": "", "store/__init__.py": "", "rpc/__init__.py": ""})
    tests = tmp_path / "tests"
    (tests / "store").mkdir(parents=True)
    (tests / "store" / "test_x.py").write_text("")
    (tests / "extra").mkdir()
    assert house.mirror_gaps(src, tests) == ["src package rpc has no tests/rpc with a test file",
                                             "tests/extra mirrors no package of src/pyg_dist"]


def _loaded(code):
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\n"
                          "print(' '.join(sorted(m for m in sys.modules if m.startswith('pyg_dist'))))"],
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.split()


def test_importing_the_runtime_loads_no_partitioner():
    loaded = _loaded("from pyg_dist.store import LocalFeatureStore, load_stores\n"
                     "import pyg_dist.loader.dist_node_loader, pyg_dist.train.session")
    assert "pyg_dist.store.feature_store" in loaded  # the check sees what was imported
    assert [m for m in loaded if m.startswith("pyg_dist.partition")] == []
    assert "pyg_dist.partition.partitioner" in _loaded("import pyg_dist.partition.partitioner")


@pytest.mark.timeout(180)
def test_a_trainer_process_loads_no_partitioner_module(tmp_path):
    import pyg_dist
    from pyg_dist.partition import Partitioner
    from pyg_dist.testing import spawn_world

    root = tmp_path / "p2"
    Partitioner(pyg_dist.synthetic_graph(300, 5, num_features=4, seed=1), 2, method="random").save(root,
                                                                                                 progress=False)
    for loaded in spawn_world(2, house.trainer_modules, str(root), timeout=150):
        assert "pyg_dist.sampler.dist_neighbor" in loaded and "pyg_dist.format.reader" in loaded
        assert [m for m in loaded if m.startswith("pyg_dist.partition")] == []


def test_the_module_page_is_fresh_and_names_every_module():
    from pyg_dist.testing import module_map
    page = (REPO / "docs" / "reference" / "modules.md").read_text(encoding="utf-8")
    assert page == module_map.render_page(), "docs/reference/modules.md is stale: run python scripts/gen_layout.py"
    assert module_map.missing_docstrings() == []
    named = set(re.findall(r"^\| `(pyg_dist[\w.]*)` \|", page, flags=re.M))
    assert named == set(house.imports()), "the page and the package disagree on which modules exist"


def test_the_module_page_says_what_each_module_is_and_where_it_may_reach(tmp_path):
    from pyg_dist.testing import module_map
    root = _tree(tmp_path, {
        "__init__.py": '"""Top."""\n',
        "store/__init__.py": '"""Stores."""\n',
        "store/a.py": '"""One store: the rows. More text."""\nfrom pyg_dist.format import c\n',
        "format/__init__.py": '"""Format."""\n',
        "format/c.py": "x = 1\n",                                                # no docstring
    })
    assert module_map.missing_docstrings(root) == ["pyg_dist.format.c"]
    page = module_map.render_page(root)
    assert "| `pyg_dist.store.a` | One store: the rows. | format |" in page
    assert "## store" in page and "May import: core, ops, format, cache, rpc." in page
