"""Every module is short enough to hold one job, every function short enough for one screen.

The limits (900 lines a module, 60 lines of code a function) are the package's house
rule (``docs/`` and ``../shared/STYLE.md``: "short modules, short functions"). A
function's lines of code are its non-blank, non-comment lines after its docstring;
nested functions count in their parent too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "deepseekbench"
MAX_MODULE_LINES = 900
MAX_FUNCTION_CODE_LINES = 60


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    first = node.body[0]
    start = first.lineno
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        start = (first.end_lineno or first.lineno) + 1
    end = node.end_lineno or node.lineno
    return sum(1 for ln in lines[start - 1 : end] if ln.strip() and not ln.strip().startswith("#"))


def long_modules(root: Path) -> list[str]:
    """``path: N lines`` for every module over the limit."""
    out = []
    for path in sorted(root.rglob("*.py")):
        n = len(path.read_text().splitlines())
        if n > MAX_MODULE_LINES:
            out.append(f"{path.relative_to(root.parent)}: {n} lines")
    return out


def long_functions(root: Path) -> list[str]:
    """``path:line name: N lines of code`` for every function over the limit."""
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = _code_lines(node, lines)
                if n > MAX_FUNCTION_CODE_LINES:
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name}: {n}")
    return out


def test_no_module_over_the_limit() -> None:
    assert long_modules(PACKAGE) == []


def test_no_function_over_the_limit() -> None:
    assert long_functions(PACKAGE) == []


@pytest.mark.parametrize("kind", ["module", "function"])
def test_the_checks_catch_a_long_one(tmp_path: Path, kind: str) -> None:
    pkg = tmp_path / "deepseekbench"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_CODE_LINES + 1))
    if kind == "function":
        (pkg / "_f.py").write_text(f'def f() -> None:\n    """Doc."""\n{body}\n')
        assert long_functions(pkg) == ["deepseekbench/_f.py:1 f: 61"]
    else:
        (pkg / "_m.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
        assert long_modules(pkg) == ["deepseekbench/_m.py: 901 lines"]
