"""A refused plan in words: one readable line per problem of a pydantic validation error.

Holds :func:`validation_error_lines` (enum values listed, unknown keys answered
with the nearest field, one line for the same problem in several routes, secrets
never shown) and :func:`loc_text` / :func:`one_line`, which the plan loader
shares.
"""

from __future__ import annotations

import difflib
import enum
import re
import types
from collections.abc import Mapping, Sequence
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

__all__ = ["loc_text", "one_line", "validation_error_lines"]

# Fields whose value may be a secret: an error names the field, never the value.
_SECRET_FIELDS = frozenset({"api_key", "api_key_env", "headers", "env", "env_from", "command"})


def loc_text(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "plan"


def _type_at(model: type[BaseModel] | None, loc: Sequence[int | str]) -> Any:
    """The annotation at ``loc`` inside ``model`` (Optional stripped), or ``None``."""
    tp: Any = model
    for part in loc:
        if isinstance(part, str) and isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(part)
            tp = field.annotation if field is not None else None
        elif isinstance(part, int) and get_origin(tp) in (tuple, list):
            items = [a for a in get_args(tp) if a is not Ellipsis]
            tp = items[0] if len(items) == 1 else None
        else:
            return None
        if get_origin(tp) in (Union, types.UnionType):
            non_none = [a for a in get_args(tp) if a is not type(None)]
            tp = non_none[0] if len(non_none) == 1 else None
    return tp


def _may_be_secret(loc: Sequence[int | str], value: Any) -> bool:
    """Whether an error's input may be a secret (then only its field is named)."""
    if any(part in _SECRET_FIELDS for part in loc):
        return True
    return isinstance(value, str) and "@" in value and "base_url" in loc


def _error_message(err: Any, model: type[BaseModel] | None) -> str:
    """The readable text of one pydantic error (without its location)."""
    loc = tuple(err["loc"])
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    hidden = _may_be_secret(loc, value)
    shown = "the value (not shown: it may be a secret)" if hidden else repr(value)
    tp = _type_at(model, loc)
    if kind == "enum" and isinstance(tp, type) and issubclass(tp, enum.Enum):
        allowed = ", ".join(repr(m.value) for m in tp)
        return f"{shown} is not a valid {tp.__name__}; allowed: {allowed}"
    if kind in ("enum", "literal_error"):
        return f"{shown} is not allowed; allowed: {ctx.get('expected', '?')}"
    if kind == "extra_forbidden":
        parent = _type_at(model, loc[:-1])
        fields = (
            sorted(parent.model_fields)
            if isinstance(parent, type) and issubclass(parent, BaseModel)
            else []
        )
        near = difflib.get_close_matches(str(loc[-1]), fields, n=1) if loc else []
        return "unknown field" + (f"; did you mean {near[0]!r}?" if near else "")
    msg: str = err["msg"].removeprefix("Value error, ")
    simple = isinstance(value, (str, int, float, bool))
    if kind != "missing" and not hidden and simple and repr(value) not in msg:
        msg += f" (got {value!r})"
    return msg


def _route_labels(data: Mapping[str, Any] | None, indexes: Sequence[int]) -> str:
    """`` (routes 'a', 'b')``: the labels of the plan's routes at ``indexes``, where
    ``data`` (the raw plan) gives a string label for every one; else ``""``."""
    routes = data.get("routes") if data is not None else None
    if not isinstance(routes, Sequence) or isinstance(routes, str):
        return ""
    labels = []
    for i in indexes:
        route = routes[i] if 0 <= i < len(routes) else None
        label = route.get("label") if isinstance(route, Mapping) else None
        if not isinstance(label, str):
            return ""
        labels.append(repr(label))
    return f" (route{'s' if len(labels) != 1 else ''} {', '.join(labels)})"


def validation_error_lines(
    exc: ValidationError,
    model: type[BaseModel] | None = None,
    data: Mapping[str, Any] | None = None,
) -> list[str]:
    """One readable line per distinct problem of ``exc``: ``routes[1].speculative: ...``.

    Enum errors name the enum (found by walking ``model``'s fields along the
    error location) and list its values; unknown keys suggest the nearest field
    (``difflib``); pydantic's documentation links are left out. A value that may
    be a secret (``api_key_env``, ``api_key``, ``headers``, a ``base_url`` with
    user-info) is never shown: the line names the field only. The same problem
    in several items of a list (one bad ``dialect`` in every route) is one line
    naming every index — ``routes[0,2].dialect`` — and, given the raw plan
    ``data``, the routes' labels.
    """
    grouped: dict[tuple[tuple[int | str | None, ...], str], list[int]] = {}
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        first = next((i for i, part in enumerate(loc) if isinstance(part, int)), None)
        generic = loc if first is None else (*loc[:first], None, *loc[first + 1 :])
        index = [] if first is None else [int(loc[first])]
        grouped.setdefault((generic, _error_message(err, model)), []).extend(index)
    lines: list[str] = []
    for (generic, msg), indexes in grouped.items():
        parts = [p for p in generic if p is not None]
        if not indexes:
            lines.append(one_line(f"{loc_text(parts)}: {msg}"))
            continue
        cut = generic.index(None)
        head = loc_text(parts[:cut])
        tail = loc_text(["x", *parts[cut:]])[1:]
        where = f"{head}[{','.join(str(i) for i in indexes)}]{tail}"
        labels = _route_labels(data, indexes) if generic[:cut] == ("routes",) else ""
        lines.append(one_line(f"{where}{labels}: {msg}"))
    return lines


_LINE_BREAKING = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with control and line-breaking characters escaped (``\\r``,
    ``\\n``, ``\\u2028``): a plan key holding CR/LF stays on its error's line."""
    return _LINE_BREAKING.sub(lambda m: repr(m.group())[1:-1], text)
