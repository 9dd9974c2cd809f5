"""Every test file that reads the shared cases (``../shared/cases``) carries the
``shared_cases`` marker, so ``pytest -m shared_cases`` replays all of them and nothing
else (README and docs/measurement.md name that command)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring constants of the module, its classes and functions."""
    kinds = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, kinds))]
    out: set[int] = set()
    for n in nodes:
        body = getattr(n, "body", [])
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            out.add(id(body[0].value))
    return out


def reads_shared_cases(source: str) -> bool:
    """True when the code (not its docstrings or comments) reaches ../shared/cases: a
    string naming ``shared/cases`` or the ``shared`` folder, or a call of ``cases_dir``."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        text = node.value if isinstance(node, ast.Constant) else None
        named = isinstance(text, str) and ("shared/cases" in text or text == "shared")
        if named and id(node) not in docs:
            return True
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "cases_dir":
            return True
    return False


def _marked(source: str) -> bool:
    return "pytest.mark.shared_cases" in source


def test_every_file_reading_the_shared_cases_carries_the_marker() -> None:
    sources = {
        p.relative_to(TESTS).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(TESTS.rglob("*.py"))
        if p != Path(__file__).resolve()  # this file's own examples are not a reader
    }
    names = {n for n, src in sources.items() if reads_shared_cases(src)}
    # the files known to replay them are found (the detector itself can fail)
    assert {
        "cases/test_cases_logprobs.py",
        "measure/test_cases_sse.py",
        "measure/test_server_rate_cases.py",
        "vocabulary/test_margin_reasoning.py",
    } <= names, names
    unmarked = sorted(n for n in names if not _marked(sources[n]))
    assert not unmarked, f"reads ../shared/cases without @pytest.mark.shared_cases: {unmarked}"


def test_the_detector_sees_code_not_prose() -> None:
    assert reads_shared_cases('CASE = ROOT / "shared/cases/sse/01.json"\n')
    assert reads_shared_cases("files = cases_dir() / 'sse'\n")
    assert not reads_shared_cases('"""Replays like ../shared/cases do."""\nx = 1\n')
    assert not _marked("import pytest\n")


def test_the_marker_is_registered() -> None:
    text = (TESTS.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert '"shared_cases: ' in text
