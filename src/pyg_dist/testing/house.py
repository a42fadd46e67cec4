"""The house rules, read from the code: pyg_dist's import graph (with ``ast``, nothing imported), its stages
and the imports each stage may make, its circles, and the public-name tables of the package ``__init__``s.

Stages, from the ground up (a stage imports only the stages listed for it, and itself)::

    core       _types, errors, _lazy, _alloc, timeouts, context, iface (listeners), group (process group),
               envvars (the PYG_DIST_* table), _fsio (durable writes)
    ops        kernels                                  -> core
    format     the partition folder as a format         -> core, ops
    cache      the caches, their ranking and files      -> core, ops, format
    datasets   graph sources                            -> core, ops, format, cache
    partition  offline writers (+ ooc/)                 -> core, ops, format, cache, datasets
    rpc        the runtime                              -> core, ops, format, cache
    store      one partition per process                -> core, ops, format, cache, rpc (remote rows)
    sampler    seeds -> hops -> features                -> ... store
    loader     PyG loaders                              -> ... sampler
    embedding  learnable partitioned rows               -> ... loader
    train      the front door, checkpoint, inference    -> ... embedding
    tma        time-based model aggregation             -> ... train
    distributed, testing: beside (migration layer; test helpers) -> anything but each other's callers
    plan       the planner (pyg-dist-plan)              -> the runtime, datasets, partition, testing
    pyg_dist   the package's own lazy table             -> anything

The runtime stages (store and up) never import ``partition``; ``partition`` never imports the runtime. ``cache``
is shared by both: the partitioner writes a folder's cache files, the runtime reads and fills its caches.

Example:
    >>> from pyg_dist.testing.house import stage_violations, circles
    >>> stage_violations(), circles()      # doctest: +SKIP
    ([], [])
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

PACKAGE_DIR = Path(__file__).resolve().parent.parent
_RUNTIME = ["core", "ops", "format", "cache", "rpc", "store", "sampler", "loader", "embedding", "train", "tma"]
#: Stage -> the stages it may import besides itself.
ALLOWED: Dict[str, Set[str]] = {
    "core": set(),
    "ops": {"core"},
    "format": {"core", "ops"},
    "datasets": {"core", "ops", "format", "cache"},
    "partition": {"core", "ops", "format", "cache", "datasets"},
    **{s: set(_RUNTIME[:i]) for i, s in enumerate(_RUNTIME) if i >= 3},
    "distributed": set(_RUNTIME) | {"datasets", "partition"},
    "testing": set(_RUNTIME) | {"datasets", "partition"},
    "plan": set(_RUNTIME) | {"datasets", "partition", "testing"},
    "pyg_dist": set(_RUNTIME) | {"datasets", "partition", "distributed", "testing", "plan"},
}
_CORE = {"_types", "_version", "errors", "_lazy", "_alloc", "timeouts", "context", "iface", "group", "envvars", "_fsio"}


def module_name(path: Path, root: Path = PACKAGE_DIR) -> str:
    """``pyg_dist.a.b`` of ``root/a/b.py`` (a package is its ``__init__``)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage(module: str) -> str:
    """The stage of a module: its first package below ``pyg_dist`` (root modules: ``core``)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "pyg_dist"
    return "core" if parts[1] in _CORE else parts[1]


def _modules(root: Path) -> Dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _resolve(base: str, name: Optional[str], known: Dict[str, Path]) -> str:
    """The module that ``from base import name`` (or ``import base``) really loads."""
    if name and f"{base}.{name}" in known:
        return f"{base}.{name}"
    if name and base in known and known[base].name == "__init__.py":
        table = lazy_table(known[base])
        if name in table:
            return table[name]
    return base


def imports(root: Path = PACKAGE_DIR) -> Dict[str, Set[str]]:
    """Module -> the pyg_dist modules it imports anywhere in its file (functions and ``TYPE_CHECKING`` too)."""
    known = _modules(root)
    out: Dict[str, Set[str]] = {}
    for mod, path in known.items():
        deps: Set[str] = set()
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    parts = parts[:len(parts) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                deps.update(_resolve(base, a.name, known) for a in node.names)
        out[mod] = {d for d in deps if d.split(".")[0] == root.name and d != mod}
    return out


def lazy_table(init: Path) -> Dict[str, str]:
    """The ``_LAZY`` dict literal of a package ``__init__`` (``{}`` when it has none)."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def type_checking_names(init: Path) -> Dict[str, str]:
    """Name -> module of the ``from module import name`` lines under ``if TYPE_CHECKING:``."""
    out: Dict[str, str] = {}
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.module:
                    out.update({a.asname or a.name: imp.module for a in imp.names})
    return out


def stage_violations(root: Path = PACKAGE_DIR) -> List[Tuple[str, str]]:
    """``(importer, imported)`` pairs where a stage imports one it may not (see :data:`ALLOWED`)."""
    bad = []
    for mod, deps in imports(root).items():
        for dep in sorted(deps):
            s, t = stage(mod), stage(dep)
            if s != t and t not in ALLOWED.get(s, set()):
                bad.append((mod, dep))
    return bad


def circles(root: Path = PACKAGE_DIR) -> List[List[str]]:
    """Every strongly connected group of more than one module in the import graph (Tarjan)."""
    graph = imports(root)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def mirror_gaps(src: Path = PACKAGE_DIR, tests: Optional[Path] = None,
                beside: Tuple[str, ...] = ("integration",)) -> List[str]:
    """Where ``tests/`` does not mirror ``src/pyg_dist/`` folder for folder: a package without a test folder
    holding a test file, or a test folder (other than ``beside``) without a package."""
    tests = tests if tests is not None else src.parent.parent / "tests"
    packages = {p.parent.relative_to(src).as_posix() for p in src.rglob("__init__.py") if p.parent != src}
    folders = {p.relative_to(tests).as_posix() for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__"}
    gaps = [f"src package {p} has no tests/{p} with a test file" for p in sorted(packages)
            if not any((tests / p).glob("test_*.py"))]
    gaps += [f"tests/{f} mirrors no package of src/pyg_dist" for f in sorted(folders - packages)
             if f.split("/")[0] not in beside]
    return gaps


def trainer_modules(rank: int, world_size: int, root: str) -> List[str]:
    """One epoch of a real trainer (``dist_session`` + ``DistNeighborLoader``, RPC world, one batch in flight)
    on ``root``; returns the pyg_dist modules this process loaded (run it with :func:`~.world.spawn_world`)."""
    import sys

    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session

    with dist_session(TrainConfig(root, timeout=60)) as env:
        loader = DistNeighborLoader(env, [3, 2], batch_size=64, concurrency=1)
        for batch in loader:
            if batch.num_nodes == 0:
                raise AssertionError("empty batch")
    return sorted(m for m in sys.modules if m.split(".")[0] == "pyg_dist")
