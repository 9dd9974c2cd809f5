"""Reading a plan: a mapping, TOML or JSON text, or a file, to a validated plan or one error.

Holds the readers behind :class:`BenchmarkPlan`'s ``from_mapping``, ``from_toml``,
``from_json`` and ``load`` (the class methods call these): each refuses what it
cannot read with :class:`~deepseekbench.PlanError`, one readable line per problem
(:func:`~deepseekbench._plan._messages.validation_error_lines`), the file named.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import ValidationError

from deepseekbench._errors import PlanError
from deepseekbench._plan._messages import loc_text, one_line, validation_error_lines
from deepseekbench._userfile import SMALL_FILE_MAX_BYTES, read_user_text

if TYPE_CHECKING:
    from deepseekbench._plan._plan import BenchmarkPlan

__all__ = ["MAX_PLAN_DEPTH", "load_plan", "plan_from_json", "plan_from_mapping", "plan_from_toml"]

MAX_PLAN_DEPTH = 64
"""Deepest nesting of lists and tables a plan may hold: deeper values (in
``request_extras``, say) overflow pydantic's serializer or Python's recursion."""


def _too_deep(data: Any, limit: int) -> list[int | str] | None:
    """The path of a value nested more than ``limit`` levels deep in ``data``, or
    ``None``; iterative, so it never recurses itself."""
    stack: list[tuple[Any, list[int | str]]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        if len(path) > limit:
            return path[: limit + 1]
        if isinstance(value, Mapping):
            stack.extend((v, [*path, str(k)]) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((v, [*path, i]) for i, v in enumerate(value))
    return None


def plan_from_mapping(
    cls: type[BenchmarkPlan], data: Mapping[str, Any], *, base_dir: str | Path | None = None
) -> BenchmarkPlan:
    """Validate a plan of class ``cls`` from a mapping (:meth:`BenchmarkPlan.from_mapping`).

    Raises:
        PlanError: the mapping is not a valid plan (wraps the validation error),
            or its values nest deeper than :data:`MAX_PLAN_DEPTH` (64) levels.
    """
    deep = _too_deep(data, MAX_PLAN_DEPTH)
    if deep is not None:
        raise PlanError(
            f"invalid plan: {one_line(loc_text(deep[:4]))}... nests lists or tables "
            f"more than {MAX_PLAN_DEPTH} levels deep"
        )
    payload = dict(data)
    if base_dir is not None:
        payload.setdefault("base_dir", str(Path(base_dir).resolve()))
    try:
        return cls.model_validate(payload)
    except ValidationError as exc:
        lines = validation_error_lines(exc, cls, payload)
        n = len(lines)
        raise PlanError(
            f"invalid plan ({n} error{'s' if n != 1 else ''}):\n  " + "\n  ".join(lines)
        ) from exc


def plan_from_toml(
    cls: type[BenchmarkPlan], text: str, *, base_dir: str | Path | None = None
) -> BenchmarkPlan:
    """Parse a TOML plan (:meth:`BenchmarkPlan.from_toml`).

    Raises:
        PlanError: not TOML, or not a valid plan.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"plan is not valid TOML: {exc}") from exc
    except RecursionError:
        raise PlanError(
            "plan is not valid TOML: arrays or inline tables nested too deeply"
        ) from None
    return cls.from_mapping(data, base_dir=base_dir)


def plan_from_json(
    cls: type[BenchmarkPlan], text: str | bytes, *, base_dir: str | Path | None = None
) -> BenchmarkPlan:
    """Parse a JSON plan (:meth:`BenchmarkPlan.from_json`).

    Raises:
        PlanError: not a JSON object, or not a valid plan.
    """
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise PlanError(f"plan is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise PlanError("a JSON plan must be an object")
    return cls.from_mapping(data, base_dir=base_dir)


def load_plan(cls: type[BenchmarkPlan], path: str | Path) -> BenchmarkPlan:
    """Load ``*.toml`` or ``*.json`` (:meth:`BenchmarkPlan.load`); relative paths
    inside resolve against its folder.

    Raises:
        PlanError: unreadable or non-UTF-8 file, unknown suffix, or an invalid
            plan (the message names the file).
    """
    p = Path(path)
    text = read_user_text(p, what="plan", fail=PlanError, max_bytes=SMALL_FILE_MAX_BYTES)
    try:
        if p.suffix.lower() == ".toml":
            return cls.from_toml(text, base_dir=p.parent)
        if p.suffix.lower() == ".json":
            return cls.from_json(text, base_dir=p.parent)
    except PlanError as exc:
        raise PlanError(f"{p}: {exc}") from exc
    raise PlanError(f"{p}: a plan must be a .toml or .json file")
