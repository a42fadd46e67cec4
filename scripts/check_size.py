"""Size budgets for the package: modules of at most 400 code lines, functions of at most 60.

A code line is a line that is neither blank nor a comment. A function's count covers its body without
its docstring (nested functions count towards the enclosing one too, and are checked on their own).
Exit status 1 and one line per offender when something is over budget.

    python scripts/check_size.py              # checks src/
    python scripts/check_size.py src/pyg_dist/ops
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def is_code(line: str) -> bool:
    """A line that is neither blank nor a comment."""
    text = line.strip()
    return bool(text) and not text.startswith("#")


def function_code_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef, lines: Sequence[str]) -> int:
    """Code lines of ``fn``'s body, its docstring left out."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    numbers = {n for stmt in body for n in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1)}
    return sum(1 for n in numbers if is_code(lines[n - 1]))


def over_budget(path: Path, max_module: int, max_function: int) -> Iterator[str]:
    """One line per budget that ``path`` exceeds (the module, then its functions in source order)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    count = sum(1 for line in lines if is_code(line))
    if count > max_module:
        yield f"{path}: module has {count} code lines (budget {max_module})"
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        yield f"{path}: cannot parse ({exc.msg}, line {exc.lineno})"
        return
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for fn in sorted(functions, key=lambda n: n.lineno):
        count = function_code_lines(fn, lines)
        if count > max_function:
            yield f"{path}:{fn.lineno}: function {fn.name} has {count} code lines (budget {max_function})"


def main(argv: Optional[List[str]] = None) -> int:
    """Checks every ``*.py`` under the given folders (default ``src``); returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("roots", nargs="*", default=["src"], help="folders (or files) to check")
    parser.add_argument("--max-module", type=int, default=MAX_MODULE_LINES)
    parser.add_argument("--max-function", type=int, default=MAX_FUNCTION_LINES)
    args = parser.parse_args(argv)
    paths: List[Path] = []
    for root in map(Path, args.roots):
        if not root.exists():
            parser.error(f"no such file or folder: {root}")
        paths += [root] if root.is_file() else sorted(root.rglob("*.py"))
    problems = [p for path in paths for p in over_budget(path, args.max_module, args.max_function)]
    for line in problems:
        print(line)
    if problems:
        print(f"check_size: {len(problems)} over budget", file=sys.stderr)
        return 1
    print(f"check_size: {len(paths)} files within budget (modules <= {args.max_module}, "
          f"functions <= {args.max_function} code lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
