"""Every module path and dotted name the docs and docstrings cite exists.

The package is reorganised now and then (modules move between stage folders); a
citation such as ``deepseekbench/_plan/_determinism.py`` or
``:func:`~deepseekbench._execute._prepare.conversation_pid``` must follow the code.
Checked against the files themselves, not imports: the package keeps a few old dotted
paths importable as deprecated aliases, which a citation must not rely on.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "deepseekbench"
_PATH = re.compile(r"(?<![\w./])(?:deepseekbench/)?(_[a-z_]+/)+_?[a-z_]+\.py\b")
_DOTTED = re.compile(r"\bdeepseekbench(?:\._[a-z_]+)+(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name == name:
                return True
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        elif isinstance(node, ast.ImportFrom) and any(
            (a.asname or a.name) == name for a in node.names
        ):
            return True
    return False


def _module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def dotted_exists(name: str) -> bool:
    """``deepseekbench._a._b.Name.attr``: the longest module prefix is a file that
    defines the next part (a class attribute after it is not checked)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        path = _module_file(parts[:cut])
        if path is not None:
            return cut == len(parts) or _defines(path, parts[cut])
    return False


def path_exists(text: str, source: Path) -> bool:
    rel = text.removeprefix("deepseekbench/")
    here = source.parent
    return (PACKAGE / rel).is_file() or (here / rel).is_file() or (ROOT / text).is_file()


def cited(text: str) -> tuple[list[str], list[str]]:
    return [m.group(0) for m in _PATH.finditer(text)], _DOTTED.findall(text)


def _old_paths() -> set[str]:
    """The deprecated aliases ``deepseekbench/_moved.py`` keeps (``_MOVED``): named
    there and where a module says it keeps one, never cited as a place to look."""
    tree = ast.parse((PACKAGE / "_moved.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_MOVED":
            assert isinstance(node.value, ast.Dict)
            return {ast.literal_eval(k) for k in node.value.keys if k}
    raise AssertionError("deepseekbench/_moved.py has no _MOVED table")


def missing(files: list[Path]) -> list[str]:
    out = []
    aliases = _old_paths()
    for f in files:
        text = f.read_text()
        paths, names = cited(text)
        if f.name in ("__init__.py", "_moved.py"):
            names = [n for n in names if n not in aliases]
        out += [f"{f.relative_to(ROOT)}: {p}" for p in paths if not path_exists(p, f)]
        out += [f"{f.relative_to(ROOT)}: {n}" for n in names if not dotted_exists(n)]
    return sorted(set(out))


def _sources() -> list[Path]:
    return [*PACKAGE.rglob("*.py"), *(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]


def test_every_cited_module_and_name_exists() -> None:
    assert missing(_sources()) == []


def test_the_check_finds_a_stale_citation(tmp_path: Path) -> None:
    assert not dotted_exists("deepseekbench._plan._determinism.engine_determinism")
    assert not dotted_exists("deepseekbench._execute._prepare.conversation_pid")
    assert dotted_exists("deepseekbench._plan._schedule.conversation_pid")
    assert not path_exists("deepseekbench/_plan/_spec_config.py", ROOT / "README.md")
    assert path_exists("deepseekbench/_execute/_served_config.py", ROOT / "README.md")
