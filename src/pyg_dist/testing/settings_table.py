r"""One configuration table, read from the code: every setting of pyg_dist's configuration objects and every
``PYG_DIST_*`` environment variable, with type, default and meaning, rendered as one Markdown page.

A setting's name, type (the annotation as written) and default come from the dataclass fields or the
``__init__`` signature; its meaning from the ``Args:`` section of the object's docstring (Google style; one
entry may name several parameters: ``a, b, c: ...`` or ``a / b: ...``). The variables come from
:data:`pyg_dist.envvars.ENV_VARS`. ``scripts/gen_settings.py`` writes the page to ``docs/reference/settings.md``;
``tests/testing/test_settings.py`` fails when the page, the docstrings, the variables the code reads or the
registry disagree.

Example:
    >>> parse_args("Summary.\n\nArgs:\n    a, b: Two at once.\n    c: One,\n        continued.\n")
    {'a': 'Two at once.', 'b': 'Two at once.', 'c': 'One, continued.'}
"""
from __future__ import annotations

import dataclasses
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pyg_dist.envvars import ENV_VARS, EnvVar
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.loader.dist_link_loader import DistLinkNeighborLoader
from pyg_dist.loader.dist_node_loader import DistNeighborLoader
from pyg_dist.loader.link_loader import LinkNeighborLoader
from pyg_dist.loader.node_loader import NeighborLoader
from pyg_dist.partition.config import PartitionConfig
from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner
from pyg_dist.partition.partitioner import Partitioner
from pyg_dist.tma.schedule import TMAConfig
from pyg_dist.train.checkpoint import Checkpointer
from pyg_dist.train.session import TrainConfig

PACKAGE_DIR = Path(__file__).resolve().parent.parent
#: The module that holds the registry (the source scan leaves it out: it names every variable).
REGISTRY_FILE = PACKAGE_DIR / "envvars.py"
ENV_NAME = re.compile(r"PYG_DIST_[A-Z_]+")
_KEY = re.compile(r"(?P<keys>\*{0,2}[A-Za-z_]\w*(?:\s*[,/]\s*\*{0,2}[A-Za-z_]\w*)*)\s*:(?:\s+(?P<text>.*))?")
_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`(?P<tilde>~?)(?P<target>[^`]+)`")


@dataclass(frozen=True)
class Setting:
    """One parameter of a documented object.

    Args:
        name: The parameter's name (``kwargs`` for ``**kwargs``).
        type: Its annotation as written in the source (``""`` when it has none).
        default: ``repr`` of its default; ``None`` when it has none (required, or ``*args`` / ``**kwargs``).
        meaning: Its ``Args:`` entry (``""`` when the docstring has none).
        stars: ``"*"`` / ``"**"`` for ``*args`` / ``**kwargs``, else ``""``.
    """
    name: str
    type: str
    default: Optional[str]
    meaning: str
    stars: str = ""


@dataclass(frozen=True)
class Documented:
    """An object whose settings the page lists.

    Args:
        obj: The class (a dataclass, or a class whose ``__init__`` takes the settings).
        note: One sentence under its heading (Markdown).
        config: The config dataclass the object builds from its arguments (named under the heading; its fields
            must all be arguments of the objects that build it, or in ``fixed``).
        fixed: Fields of ``config`` the object sets itself (not arguments).
    """
    obj: type
    note: str
    config: Optional[type] = None
    fixed: Tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return self.obj.__name__

    @property
    def path(self) -> str:
        return f"{self.obj.__module__}.{self.obj.__qualname__}"


#: The objects of the page, in its order.
DOCUMENTED: Tuple[Documented, ...] = (
    Documented(TrainConfig, "The settings of a distributed run: `dist_session(TrainConfig(...))`."),
    Documented(Partitioner, "The in-memory partitioner (and `pyg-dist-partition`).", PartitionConfig,
               ("out_of_core",)),
    Documented(OutOfCorePartitioner, "The bounded-memory partitioner (`pyg-dist-partition --out-of-core`).",
               PartitionConfig, ("out_of_core",)),
    Documented(TMAConfig, "When time-based model aggregation (`run_tma`) aggregates and stops."),
    Documented(DistNeighborLoader, "Node mini-batches over a partitioned graph (PyG `NeighborLoader` API)."),
    Documented(DistLinkNeighborLoader, "Link mini-batches over a partitioned graph (PyG `LinkNeighborLoader` API)."),
    Documented(NeighborLoader, "Node mini-batches over an in-memory graph (one process)."),
    Documented(LinkNeighborLoader, "Link mini-batches over an in-memory graph (one process)."),
    Documented(Checkpointer, "Periodic, atomic, resumable checkpoints (`DistEnv.checkpointer()` builds one from "
                             "`TrainConfig`)."),
)


# ---------------------------------------------------------------------------------------------- reading the code
def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _entries(lines: Sequence[str]) -> List[Tuple[List[str], List[str]]]:
    """``(keys, text lines)`` of each entry of the section body ``lines`` (up to the next section)."""
    entries: List[Tuple[List[str], List[str]]] = []
    head, entry_indent = _indent(lines[0]), None
    for line in lines[1:]:
        if not line.strip():
            continue
        if _indent(line) <= head:
            break
        entry_indent = _indent(line) if entry_indent is None else entry_indent
        match = _KEY.fullmatch(line.strip()) if _indent(line) == entry_indent else None
        if match:
            keys = [k.strip().lstrip("*") for k in re.split(r"[,/]", match["keys"])]
            entries.append((keys, [match["text"] or ""]))
        elif entries:
            entries[-1][1].append(line.strip())
    return entries


def parse_args(doc: Optional[str]) -> Dict[str, str]:
    """``{parameter: meaning}`` of the ``Args:`` section of a Google-style docstring (``{}`` without one).

    An entry may name several parameters (``a, b, c:`` or ``a / b:``; each gets the entry's meaning), a
    ``*args`` / ``**kwargs`` entry is keyed ``args`` / ``kwargs``, and continuation lines (indented deeper)
    join the meaning with single spaces.
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Args:"), None)
    if start is None:
        return {}
    out: Dict[str, str] = {}
    for keys, text in _entries(lines[start:]):
        meaning = " ".join(t for t in text if t)
        out.update({key: meaning for key in keys})
    return out


def _type_text(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty or annotation is dataclasses.MISSING:
        return ""
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def _parameters(obj: Any) -> List[Tuple[str, str, Optional[str], str]]:
    """``(name, type, default repr or None, stars)`` of the settings of ``obj``, in declaration order."""
    if dataclasses.is_dataclass(obj):
        out = []
        for f in dataclasses.fields(obj):
            if not f.init:
                continue
            default = None if f.default is dataclasses.MISSING else repr(f.default)
            if f.default_factory is not dataclasses.MISSING:
                default = f"{getattr(f.default_factory, '__name__', 'factory')}()"
            out.append((f.name, _type_text(f.type), default, ""))
        return out
    if not inspect.isclass(obj):
        raise InvalidArgumentError("settings_table", "obj", obj, "a class (a dataclass or one with __init__)")
    params = list(inspect.signature(obj.__init__).parameters.values())[1:]  # self
    stars: Dict[Any, str] = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [(p.name, _type_text(p.annotation), None if p.default is inspect.Parameter.empty else repr(p.default),
             stars.get(p.kind, "")) for p in params]


def collect_settings(obj: Any) -> List[Setting]:
    """The settings of ``obj`` (dataclass fields, else ``__init__``'s parameters) with their documented meanings
    (``""`` where its docstring's ``Args:`` has none; :func:`find_problems` reports those)."""
    doc = parse_args(obj.__doc__)
    return [Setting(name, type_, default, doc.get(name, ""), stars)
            for name, type_, default, stars in _parameters(obj)]


def find_problems(obj: Any) -> List[str]:
    """One line per parameter of ``obj`` without a documented meaning, and per ``Args:`` entry naming no
    parameter (a stale line); ``[]`` when the docstring and the code agree."""
    title = getattr(obj, "__name__", repr(obj))
    names = [s.name for s in collect_settings(obj)]
    doc = parse_args(obj.__doc__)
    problems = [f"{title}.{name}: no meaning in the Args: section of {title}'s docstring"
                for name in names if not doc.get(name)]
    problems += [f"{title}: Args: documents '{key}', which is no parameter" for key in doc if key not in names]
    return problems


def coverage_problems(documented: Sequence[Documented] = DOCUMENTED) -> List[str]:
    """Fields of a config dataclass that no object building it takes as an argument (nor sets itself)."""
    problems = []
    for config in sorted({d.config for d in documented if d.config is not None}, key=lambda c: c.__name__):
        builders = [d for d in documented if d.config is config]
        known = {s.name for d in builders for s in collect_settings(d.obj)} | {f for d in builders for f in d.fixed}
        problems += [f"{config.__name__}.{f.name}: no argument of {', '.join(d.title for d in builders)}"
                     for f in dataclasses.fields(config) if f.name not in known]
    return problems


def field_problems(env_vars: Sequence[EnvVar] = ENV_VARS,
                   documented: Sequence[Documented] = DOCUMENTED) -> List[str]:
    """Variables whose ``field`` (``Object.parameter``) names no setting of a documented object."""
    settings = {d.title: {s.name for s in collect_settings(d.obj)} for d in documented}
    problems = []
    for var in env_vars:
        if var.field is None:
            continue
        owner, _, name = var.field.partition(".")
        if name not in settings.get(owner, set()):
            problems.append(f"{var.name}: backs {var.field}, which is no setting of a documented object")
    return problems


def all_problems(documented: Sequence[Documented] = DOCUMENTED) -> List[str]:
    """Every problem of the page's objects and of the registry's ``field`` names."""
    problems = [p for d in documented for p in find_problems(d.obj)]
    return problems + coverage_problems(documented) + field_problems(ENV_VARS, documented)


def env_names_in_code(root: Path = PACKAGE_DIR, skip: Sequence[Path] = (REGISTRY_FILE,)) -> Dict[str, List[str]]:
    """``{variable: [files naming it]}`` for every ``PYG_DIST_*`` literal in the ``*.py`` files under ``root``
    (code, strings and comments alike), ``skip`` left out; paths relative to ``root``, sorted."""
    skipped = {p.resolve() for p in skip}
    found: Dict[str, List[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if path.resolve() in skipped:
            continue
        for name in sorted(set(ENV_NAME.findall(path.read_text(encoding="utf-8")))):
            found.setdefault(name, []).append(path.relative_to(root).as_posix())
    return dict(sorted(found.items()))


def env_problems(root: Path = PACKAGE_DIR, env_vars: Sequence[EnvVar] = ENV_VARS) -> List[str]:
    """Variables the code names but the registry lacks, and registry entries the code never names."""
    in_code, registered = env_names_in_code(root), {v.name for v in env_vars}
    problems = [f"{name}: named in {', '.join(files)} but not in pyg_dist.envvars.ENV_VARS"
                for name, files in in_code.items() if name not in registered]
    unread = sorted(registered - set(in_code))
    return problems + [f"{name}: in ENV_VARS but named nowhere in the code" for name in unread]


# ---------------------------------------------------------------------------------------------- the page
def to_markdown(text: str) -> str:
    """Docstring text as one Markdown table cell: Sphinx roles and double backticks as code, ``|`` escaped."""
    def role(m: re.Match) -> str:
        target = m["target"]
        return f"`{target.split('.')[-1] if m['tilde'] else target}`"

    return _ROLE.sub(role, text).replace("``", "`").replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`".replace("|", "\\|") if text else "-"


def _row(s: Setting) -> str:
    default = "-" if s.stars else ("required" if s.default is None else _code(s.default))
    return f"| {_code(s.stars + s.name)} | {_code(s.type)} | {default} | {to_markdown(s.meaning) or '-'} |"


def render_section(d: Documented) -> List[str]:
    """The lines of one object's section: heading, path and note, its table."""
    settings = collect_settings(d.obj)
    lines = [f"## {d.title}", "", f"`{d.path}`: {d.note}"]
    if d.config is not None:
        kept = [s.name for s in settings if s.name in {f.name for f in dataclasses.fields(d.config)}]
        fixed = ", ".join(f"`{f}`" for f in d.fixed)
        lines[-1] += (f" `{d.config.__name__}` keeps {', '.join(f'`{k}`' for k in kept)}"
                      + (f" ({fixed} set by the class)." if fixed else "."))
    lines += ["", "| setting | type | default | meaning |", "| --- | --- | --- | --- |"]
    return lines + [_row(s) for s in settings] + [""]


def render_env_section(env_vars: Sequence[EnvVar] = ENV_VARS) -> List[str]:
    """The lines of the environment-variable section."""
    lines = ["## Environment variables", "",
             "Read where they act (the module named in each meaning), and each checked by its own reader when "
             "`dist_session()` starts, before the process group forms (`pyg_dist.train.env_check`): a bad value "
             "fails at start-up with an `InvalidArgumentError` naming the variable. A variable that backs a setting "
             "is that setting's default: the setting, when given, wins.", "",
             "| variable | type | default | backs | meaning |", "| --- | --- | --- | --- | --- |"]
    for v in sorted(env_vars, key=lambda v: v.name):
        backs = _code(v.field) if v.field else "-"
        lines.append(f"| `{v.name}` | `{v.type}` | {to_markdown(v.default)} | {backs} | {to_markdown(v.meaning)} |")
    return lines + [""]


def render_page(documented: Sequence[Documented] = DOCUMENTED, env_vars: Sequence[EnvVar] = ENV_VARS) -> str:
    """The whole page (deterministic: the same code gives the same bytes).

    Raises:
        InvalidArgumentError: a setting has no documented meaning, or another :func:`all_problems` problem.
    """
    problems = all_problems(documented)
    if problems:
        raise InvalidArgumentError("settings table", "docstrings", problems[0],
                                   f"every setting documented ({len(problems)} problem(s): {problems})")
    count = sum(len(collect_settings(d.obj)) for d in documented)
    lines = ["<!-- Generated by scripts/gen_settings.py from the code (pyg_dist.testing.settings_table); "
             "do not edit by hand. -->", "", "# Settings", "",
             f"Every setting of pyg_dist's configuration objects ({count}) and every `PYG_DIST_*` environment "
             f"variable ({len(env_vars)}): names, types and defaults from the code, meanings from the docstrings "
             "(`Args:`) and from `pyg_dist.envvars`. `tests/testing/test_settings.py` fails when this page and "
             "the code disagree; regenerate it with `python scripts/gen_settings.py`.", ""]
    lines += [f"- [{d.title}](#{d.title.lower()})" for d in documented]
    lines += ["- [Environment variables](#environment-variables)", ""]
    for d in documented:
        lines += render_section(d)
    lines += render_env_section(env_vars)
    return "\n".join(lines).rstrip("\n") + "\n"


__all__ = ["Setting", "Documented", "DOCUMENTED", "parse_args", "collect_settings", "find_problems",
           "coverage_problems", "field_problems", "all_problems", "env_names_in_code", "env_problems",
           "to_markdown", "render_section", "render_env_section", "render_page"]
