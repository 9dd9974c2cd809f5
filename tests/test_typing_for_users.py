"""Typing for users: the documented string usage type-checks in user code.

``EngineRoute(dialect="vllm", speculative="mtp")`` and ``Row(hosting="...")``
pass ``mypy --strict`` in a user's file, and ``mypy`` finds the package from
outside the repository after the README's editable install (hatchling's
editable install is a ``.pth`` path entry, which type checkers follow).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from enum import StrEnum
from pathlib import Path
from typing import get_args

import pytest
from pydantic import BaseModel

import deepseekbench as d
from deepseekbench._types import _axes

ROOT = Path(__file__).resolve().parent.parent

PAIRS: list[tuple[type[StrEnum], object]] = [
    (d.ContextBucket, d.ContextBucketName),
    (d.OutputTarget, d.OutputTargetName),
    (d.ReasoningMode, d.ReasoningModeName),
    (d.Speculative, d.SpeculativeName),
    (d.QualityParity, d.QualityParityName),
    (d.Hosting, d.HostingName),
    (d.Dialect, d.DialectName),
    (d.AcceptanceScope, d.AcceptanceScopeName),
    (d.Arrival, d.ArrivalName),
]


@pytest.mark.parametrize(("enum", "names"), PAIRS)
def test_each_string_alias_lists_exactly_its_enum_values(
    enum: type[StrEnum], names: object
) -> None:
    assert list(get_args(names)) == [m.value for m in enum]


def test_every_axis_enum_has_a_string_alias() -> None:
    base = _axes._ClosedEnum
    enums = {
        obj for obj in vars(_axes).values()
        if isinstance(obj, type) and issubclass(obj, base) and obj is not base
    }  # fmt: skip
    assert enums == {e for e, _ in PAIRS}


def _stub_params(path: Path, cls: str) -> dict[str, str]:
    """The keyword parameters (name → annotation source) of the ``if TYPE_CHECKING``
    ``__init__`` stub in class ``cls`` of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    for stmt in node.body:
        if isinstance(stmt, ast.If) and ast.unparse(stmt.test) == "TYPE_CHECKING":
            init = next(
                f for f in stmt.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"
            )
            return {a.arg: ast.unparse(a.annotation) for a in init.args.kwonlyargs if a.annotation}
    raise AssertionError(f"{cls} has no `if TYPE_CHECKING:` __init__ stub")


@pytest.mark.parametrize(
    ("model", "module"),
    [
        (d.EngineRoute, "_net/_route.py"),
        (d.Row, "_types/_row.py"),
        (d.ChatRequest, "_types/_request.py"),
    ],
)
def test_the_init_stub_matches_the_fields(model: type[BaseModel], module: str) -> None:
    params = _stub_params(ROOT / "deepseekbench" / module, model.__name__)
    assert list(params) == list(model.model_fields)  # same names, same order
    for name, field in model.model_fields.items():
        enum = next((e for e, _ in PAIRS if e in (field.annotation, *get_args(field.annotation))),
                    None)  # fmt: skip
        if enum is not None:
            assert f"{enum.__name__}Name" in params[name], f"{name}: {params[name]}"


USER_CODE = """\
from deepseekbench import ChatRequest, EngineRoute, Row

request = ChatRequest(
    messages=[{"role": "user", "content": "Hi"}], reasoning_mode="think_high", stop=["\\n"]
)
route = EngineRoute(
    base_url="http://127.0.0.1:8000/v1", model="m", dialect="vllm", speculative="mtp",
    api_key="sk-not-a-real-key",
)
row = Row(
    model_id="m",
    provider_route="local",
    engine_route="vllm",
    hosting="self_hosted",
    context_bucket="1k",
    output_target="256",
    reasoning_mode="non_think",
    stream=True,
    speculative="mtp",
    quality_parity="verified",
    acceptance_scope="per_request",
)
dialect_value: str = route.dialect.value
"""

TYPO = """\
from deepseekbench import EngineRoute

route = EngineRoute(base_url="http://127.0.0.1:8000/v1", model="m", dialect="vlm")
"""


@pytest.mark.typing
def test_mypy_strict_accepts_documented_strings_in_user_code_outside_the_repo(
    tmp_path: Path,
) -> None:
    pytest.importorskip("mypy")
    (tmp_path / "user_code.py").write_text(USER_CODE, encoding="utf-8")
    (tmp_path / "typo.py").write_text(TYPO, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir",
         str(tmp_path / ".mypy_cache"), "user_code.py", "typo.py"],
        cwd=tmp_path,  # outside the repository: the package comes from the install
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert "Cannot find implementation or library stub" not in out, out
    errors = [ln for ln in out.splitlines() if ": error:" in ln]
    assert errors and all(ln.startswith("typo.py:3:") for ln in errors), out
    assert '"dialect"' in errors[0], out
