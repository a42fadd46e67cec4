"""A griffe extension for the docs site: Sphinx roles in docstrings become Markdown.

pyg_dist's docstrings are Google style with Sphinx cross-reference roles (``:class:`~pyg_dist.x.Y```), which
mkdocstrings would print as they are. Each role becomes a code span; when its target is an object an API page
renders (a ``::: target`` line under ``docs/reference/api/`` or ``docs/reference/errors.md``), also a link to it.
``mkdocs.yml`` loads this file (``handlers.python.options.extensions``).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Set

from griffe import Extension

EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.M)  # griffe's Google parser knows "Examples:" as code
DIRECTIVE = re.compile(r"\s*# doctest: \+\w+")
ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj|py:\w+):`(?P<tilde>~?)(?P<target>[^`<>]+)`")
DOCS = Path(__file__).resolve().parent.parent / "docs"


def rendered_targets(docs: Path = DOCS) -> Set[str]:
    """The identifiers the API pages render (``::: name`` lines)."""
    pages = list((docs / "reference" / "api").glob("*.md")) + [docs / "reference" / "errors.md"]
    names = set()
    for page in pages:
        if page.exists():
            names.update(m.group(1) for m in re.finditer(r"^::: (\S+)", page.read_text(encoding="utf-8"), re.M))
    return names


def to_markdown(text: str, targets: Set[str]) -> str:
    """``text`` with Sphinx roles as code spans (linked when their target is rendered), examples as examples.

    ``Example:`` becomes ``Examples:`` (the section griffe renders as code) and doctest directives are dropped.

    Example:
        >>> to_markdown("See :class:`~a.B` and :func:`a.c`.", {"a.B"})
        'See [`B`][a.B] and `a.c`.'
    """
    def one(m: re.Match) -> str:
        target = m.group("target").strip()
        shown = target.rsplit(".", 1)[-1] if m.group("tilde") else target
        return f"[`{shown}`][{target}]" if target in targets else f"`{shown}`"
    return ROLE.sub(one, DIRECTIVE.sub("", EXAMPLE.sub(r"\1Examples:", text)))


class SphinxRoles(Extension):
    """Rewrites every loaded object's docstring once (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.targets = rendered_targets()

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:  # griffe's hook, called for every object
        doc = getattr(obj, "docstring", None)
        if doc is not None:
            doc.value = to_markdown(doc.value, self.targets)
