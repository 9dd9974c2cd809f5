"""The package imports downwards only: a static check of the layer order.

The order is written in ``deepseekbench/__init__.py``'s docstring. Every module
belongs to a layer (its stage folder, or itself for a top-level module); a module
may import from its own layer or from one below it, never from one above.

Every ``import``/``from ... import`` of ``deepseekbench`` counts: at module level,
inside functions (a lazy import is still a dependency) and inside
``if TYPE_CHECKING:`` blocks (a type-only import still ties a lower stage to a
higher one's vocabulary; move the type down instead). Only ``__init__`` and
``__main__`` (the public surface) stand above every layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "deepseekbench"

# lowest first; a layer may import itself and anything before it
LAYERS = (
    "_version",
    "_errors",
    "_userfile",
    "_types",
    "_records",
    "_dialects",
    "_engine",
    "_net",
    "_launch",
    "_measure",
    "_plan",
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


def upward_imports(root: Path) -> list[str]:
    """``path:line: importer (layer) -> imported (layer)`` for every import that goes up."""
    bad: list[str] = []
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        here = layer_of(name) if name != root.name else "__init__"
        if here in ("__init__", "__main__"):
            continue
        if here not in RANK:
            bad.append(f"{path.relative_to(root.parent)}: {here} is in no layer")
            continue
        for line, target in imported_modules(ast.parse(path.read_text()), root.name):
            there = layer_of(target) if target != "<relative import>" else "<relative>"
            if there not in RANK or RANK[there] > RANK[here]:
                bad.append(
                    f"{path.relative_to(root.parent)}:{line}: {name} ({here}) imports "
                    f"{target} ({there})"
                )
    return bad


def test_every_import_points_down() -> None:
    assert upward_imports(PACKAGE) == []


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
    assert shown[0] == "__init__" and shown[1:] == list(reversed(LAYERS[:-2]))


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    pkg = tmp_path / "deepseekbench"
    (pkg / "_types").mkdir(parents=True)
    (pkg / "_types" / "__init__.py").write_text("")
    (pkg / "_types" / "_low.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from deepseekbench._plan._plan import BenchmarkPlan\n"
        "def f():\n"
        "    from deepseekbench import _report\n"
    )
    assert upward_imports(pkg) == [
        "deepseekbench/_types/_low.py:3: deepseekbench._types._low (_types) imports "
        "deepseekbench._plan._plan (_plan)",
        "deepseekbench/_types/_low.py:5: deepseekbench._types._low (_types) imports "
        "deepseekbench._report (_report)",
    ]
