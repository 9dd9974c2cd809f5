"""The package imports downwards only, in the pipeline's order: a static check of the layers.

The order is written in ``deepseekbench/__init__.py``'s docstring, lowest first here:
the shared vocabulary and records, then the stages in the order a run meets them
(plan, engines and network, launch, measure, execute, store, analysis, report), then
the wiring (runner, CLI) and the public surface. Every module belongs to a layer (its
stage folder, or itself for a top-level module); a module may import from its own
layer or from one below it, never from one above. On top of the order, a few pairs
are forbidden outright (:data:`FORBIDDEN`): a stage that is pure data or pure
judging never reaches into the code that talks to servers.

Every ``import``/``from ... import`` of ``deepseekbench`` counts: at module level,
inside functions (a lazy import is still a dependency) and inside
``if TYPE_CHECKING:`` blocks (a type-only import still ties a lower stage to a
higher one's vocabulary; move the type down instead). Only ``__init__`` and
``__main__`` (the public surface) stand above every layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "deepseekbench"

# lowest first; a layer may import itself and anything before it
LAYERS = (
    "_exports",
    "_moved",
    "_version",
    "_errors",
    "_userfile",
    "_types",
    "_records",
    "_dialects",
    "_plan",
    "_engine",
    "_net",
    "_launch",
    "_measure",
    "_execute",
    "_store",
    "_analysis",
    "_report",
    "_runner",
    "_cli",
    "__main__",
    "__init__",
)
RANK = {name: i for i, name in enumerate(LAYERS)}

FORBIDDEN: dict[tuple[str, str], str] = {
    ("_plan", "_measure"): "the plan is pure data: it imports no measurement code",
    ("_plan", "_net"): "the plan is pure data: it imports no network code",
    ("_plan", "_launch"): "the plan is pure data: the launcher imports the plan, not the reverse",
    ("_store", "_measure"): "the store keeps records: it imports no measurement code",
    ("_store", "_execute"): "the store keeps records: it imports no execution code",
    ("_analysis", "_measure"): "analysis is pure: it imports no measurement code",
    ("_analysis", "_execute"): "analysis is pure: it imports no execution code",
    ("_report", "_plan"): "the report renders rows: it imports no plan",
}
"""(importer layer, imported layer) pairs refused whatever the order says, with why."""


def layer_of(module: str) -> str:
    """``deepseekbench._plan._schedule`` -> ``_plan``; ``deepseekbench`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """Every ``deepseekbench`` module named by an import anywhere in ``tree``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith(package)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == package:  # from deepseekbench import X: X may be a module
                found += [(node.lineno, f"{package}.{a.name}") for a in node.names]
            elif node.module.startswith(package + "."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.append((node.lineno, "<relative import>"))
    return found


def _imports(root: Path) -> list[tuple[str, str, str, int, str, str]]:
    """``(path, importer, its layer, line, imported, its layer)`` for every import of
    the package by a module below the public surface, in path and line order."""
    out: list[tuple[str, str, str, int, str, str]] = []
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        here = layer_of(name) if name != root.name else "__init__"
        if here in ("__init__", "__main__"):
            continue
        rel = str(path.relative_to(root.parent))
        for line, target in sorted(imported_modules(ast.parse(path.read_text()), root.name)):
            there = layer_of(target) if target != "<relative import>" else "<relative>"
            out.append((rel, name, here, line, target, there))
    return out


def upward_imports(root: Path) -> list[str]:
    """``path:line: importer (layer) imports imported (layer)`` for every import that goes up."""
    bad: list[str] = []
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        here = layer_of(name) if name != root.name else "__init__"
        if here not in ("__init__", "__main__") and here not in RANK:
            bad.append(f"{path.relative_to(root.parent)}: {here} is in no layer")
    for rel, name, here, line, target, there in _imports(root):
        if here in RANK and (there not in RANK or RANK[there] > RANK[here]):
            bad.append(f"{rel}:{line}: {name} ({here}) imports {target} ({there})")
    return bad


def forbidden_imports(root: Path) -> list[str]:
    """``path:line: importer (layer) imports imported (layer): why`` for every import of
    a pair in :data:`FORBIDDEN`."""
    return [
        f"{rel}:{line}: {name} ({here}) imports {target} ({there}): {FORBIDDEN[here, there]}"
        for rel, name, here, line, target, there in _imports(root)
        if (here, there) in FORBIDDEN
    ]


def test_every_import_points_down() -> None:
    assert upward_imports(PACKAGE) == []


def test_no_forbidden_pair_is_imported() -> None:
    assert forbidden_imports(PACKAGE) == []


def test_every_folder_and_top_module_has_a_layer() -> None:
    entries = {
        p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert entries == set(LAYERS)


def test_the_order_is_the_one_documented() -> None:
    drawing = (PACKAGE / "__init__.py").read_text().split("**Layers.**")[1].split("\n\n")[1]
    shown = [
        line.split()[0].rstrip("/,")
        for line in drawing.splitlines()
        if line.startswith("    ") and not line.startswith("     ")
    ]
    assert shown == list(reversed(LAYERS))


def test_every_forbidden_pair_names_two_distinct_layers() -> None:
    for importer, imported in FORBIDDEN:
        assert importer in RANK and imported in RANK
        assert importer != imported


def _plant(root: Path, layer: str, module: str, text: str) -> None:
    folder = root / layer
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text("")
    (folder / f"{module}.py").write_text(text)


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    pkg = tmp_path / "deepseekbench"
    _plant(
        pkg,
        "_types",
        "_low",
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from deepseekbench._plan._plan import BenchmarkPlan\n"
        "def f():\n"
        "    from deepseekbench import _report\n",
    )
    assert upward_imports(pkg) == [
        "deepseekbench/_types/_low.py:3: deepseekbench._types._low (_types) imports "
        "deepseekbench._plan._plan (_plan)",
        "deepseekbench/_types/_low.py:5: deepseekbench._types._low (_types) imports "
        "deepseekbench._report (_report)",
    ]


def test_the_check_catches_a_layer_out_of_order_for_the_pipeline(tmp_path: Path) -> None:
    # the plan is the first stage: measurement (a later stage) may read it, not the reverse
    pkg = tmp_path / "deepseekbench"
    _plant(pkg, "_measure", "_m", "from deepseekbench._plan._plan import BenchmarkPlan\n")
    _plant(pkg, "_plan", "_p", "from deepseekbench._measure._m import X\n")
    assert upward_imports(pkg) == [
        "deepseekbench/_plan/_p.py:1: deepseekbench._plan._p (_plan) imports "
        "deepseekbench._measure._m (_measure)"
    ]


@pytest.mark.parametrize(("importer", "imported"), sorted(FORBIDDEN))
@pytest.mark.parametrize("how", ["top", "lazy", "type_only", "package"])
def test_the_check_catches_each_forbidden_pair(
    tmp_path: Path, importer: str, imported: str, how: str
) -> None:
    pkg = tmp_path / "deepseekbench"
    statement = {
        "top": f"from deepseekbench.{imported}._x import X\n",
        "lazy": f"def f():\n    from deepseekbench.{imported}._x import X\n",
        "type_only": (
            "from typing import TYPE_CHECKING\n"
            f"if TYPE_CHECKING:\n    import deepseekbench.{imported}._x\n"
        ),
        "package": f"from deepseekbench import {imported}\n",
    }[how]
    _plant(pkg, importer, "_bad", statement)
    _plant(pkg, importer, "_good", f"from deepseekbench.{importer}._bad import X\n")
    line = statement.count("\n")
    target = f"deepseekbench.{imported}" + ("" if how == "package" else "._x")
    assert forbidden_imports(pkg) == [
        f"deepseekbench/{importer}/_bad.py:{line}: deepseekbench.{importer}._bad ({importer}) "
        f"imports {target} ({imported}): {FORBIDDEN[importer, imported]}"
    ]
