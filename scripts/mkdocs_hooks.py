"""MkDocs hooks of the docs site: command-line pages generated from the code's argparse parsers.

A page line ``<!-- argparse: module:function -->`` is replaced, at every build, by that parser's usage and one
table per argument group (options, value, default, help), so the command-line reference cannot go stale.
``mkdocs.yml`` loads this file (``hooks:``).
"""
from __future__ import annotations

import argparse
import importlib
import re
from typing import Any, List

MARKER = re.compile(r"^<!-- argparse: (?P<mod>[\w.]+):(?P<fn>\w+) -->$", re.M)


CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def _text(text: Any) -> str:
    """``text`` as literal Markdown: ``<name>`` stays visible (not an HTML tag), ``*`` no emphasis; code spans
    are kept as they are."""
    parts = CODE_SPAN.split(str(text))  # [text, ticks, code, text, ticks, code, ..., text]
    for i in range(0, len(parts), 3):
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
    for i in range(1, len(parts), 3):
        parts[i] = parts[i] + parts[i + 1] + parts[i]
        parts[i + 1] = ""
    return "".join(parts)


def _cell(text: Any) -> str:
    return _text(text).replace("|", "\\|").replace("\n", " ")


def _row(action: argparse.Action, prog: str) -> str:
    names = "<br>".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}`"  # one name a line
    value = "" if action.nargs == 0 else f"`{action.metavar or action.dest.upper()}`"
    if action.choices:
        value = " \\| ".join(f"`{c}`" for c in action.choices)
    unset = action.default is None or action.default is False or action.default == argparse.SUPPRESS
    default = "" if unset or action.nargs == 0 else f"`{action.default!r}`"
    if action.required:
        default = "required"
    # the help as argparse prints it (%(default)s, %% expanded), without a formatter's "(default: ...)" suffix
    text = argparse.HelpFormatter(prog)._expand_help(action) if action.help else ""
    return f"| {names} | {value} | {default} | {_cell(text)} |"


def render_parser(parser: argparse.ArgumentParser) -> str:
    """Markdown for one parser: its usage, description and a table per argument group."""
    usage = parser.format_usage().strip().removeprefix("usage: ")
    out: List[str] = ["```text", usage, "```", "", _cell(parser.description or ""), ""]
    for group in parser._action_groups:  # argparse keeps the groups here; no public accessor exists
        actions = [a for a in group._group_actions if a.help != argparse.SUPPRESS]
        if not actions:
            continue
        out += [f"**{_text(group.title)}**", "", "| option | value | default | meaning |", "| --- | --- | --- | --- |"]
        out += [_row(a, parser.prog) for a in actions] + [""]
    return "\n".join(out)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """MkDocs hook: expand every argparse marker of a page."""
    def one(m: re.Match) -> str:
        return render_parser(getattr(importlib.import_module(m.group("mod")), m.group("fn"))())
    return MARKER.sub(one, markdown)
