"""One adapter per engine: what differs between serving engines, behind one seam.

Layer: just above ``_types`` (imports only ``_errors`` and ``_types``), so that
``_net``, ``_measure`` and ``_plan`` can ask it. Each engine is one module here
named after its dialect (``vllm``, ``sglang``, ``llamacpp``, ``openai``,
``deepseek``, ``auto``) that defines an :class:`EngineDialect` subclass and a
module-level ``DIALECT`` instance; :func:`dialect_for` finds it by name (the
module is imported on first use), and :func:`register_dialect` adds one from
elsewhere (a test, a harness). Adding an engine: ``docs/engines.md``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import Any

from deepseekbench._dialects._base import (
    SERVER_TIME_FIELDS,
    CacheSet,
    CounterSet,
    EngineDialect,
    GaugeSet,
)
from deepseekbench._errors import PlanError
from deepseekbench._types._acceptance import (
    AcceptanceRecord,
    positions_from_histogram,
    positions_from_steps,
)
from deepseekbench._types._axes import Dialect

__all__ = [
    "SERVER_TIME_FIELDS",
    "AcceptanceRecord",
    "CacheSet",
    "CounterSet",
    "EngineDialect",
    "GaugeSet",
    "acceptance_from_llamacpp",
    "acceptance_from_sglang",
    "acceptance_from_vllm",
    "all_dialects",
    "can_ignore_eos",
    "dialect_for",
    "positions_from_histogram",
    "positions_from_steps",
    "read_acceptance",
    "register_dialect",
    "unregister_dialect",
]

_REGISTRY: dict[str, EngineDialect] = {}
_NAME = re.compile(r"[a-z][a-z0-9]*\Z")


def register_dialect(adapter: EngineDialect, *, replace: bool = False) -> EngineDialect | None:
    """Register ``adapter`` under ``adapter.name``; return the one it replaced.

    Raises:
        PlanError: ``adapter`` is not an :class:`EngineDialect`, its name is not
            lower-case letters and digits, or the name is taken and not ``replace``.
    """
    if not isinstance(adapter, EngineDialect):
        raise PlanError(f"{adapter!r} is not an EngineDialect")
    name = adapter.name
    if not _NAME.match(name):
        raise PlanError(f"dialect name {name!r}: use lower-case letters and digits")
    old = _REGISTRY.get(name) or _discover(name)
    if old is not None and not replace:
        raise PlanError(f"dialect {name!r} is already registered (pass replace=True)")
    _REGISTRY[name] = adapter
    return old


def unregister_dialect(name: str) -> None:
    """Forget the adapter registered under ``name`` (a built-in one is found again
    by module on the next :func:`dialect_for`). Unknown names are ignored."""
    _REGISTRY.pop(name, None)


def _discover(name: str) -> EngineDialect | None:
    """The ``DIALECT`` of module ``deepseekbench._dialects.<name>``, or ``None``."""
    if not _NAME.match(name):
        return None
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"{__name__}.{name}":
            return None
        raise
    found = getattr(module, "DIALECT", None)
    return found if isinstance(found, EngineDialect) and found.name == name else None


def dialect_for(dialect: Dialect | str) -> EngineDialect:
    """The adapter of ``dialect`` (a :class:`~deepseekbench.Dialect` or its name).

    Raises:
        PlanError: no adapter is registered or found by module for the name.
    """
    name = dialect.value if isinstance(dialect, Dialect) else str(dialect)
    found = _REGISTRY.get(name)
    if found is None:
        found = _discover(name)
        if found is None:
            known = ", ".join(repr(d.name) for d in all_dialects())
            raise PlanError(f"no engine dialect {name!r}; known: {known}")
        _REGISTRY[name] = found
    return found


def can_ignore_eos(dialect: Dialect | str) -> bool:
    """Whether ``dialect`` has a field that generates past end-of-sequence (its
    adapter's ``eos_controls`` sends something).

    Raises:
        PlanError: as :func:`dialect_for`.
    """
    return bool(dialect_for(dialect).eos_controls(1))


def all_dialects() -> tuple[EngineDialect, ...]:
    """Every adapter: the built-in ones in :class:`~deepseekbench.Dialect` order,
    then any other registered, in registration order."""
    for d in Dialect:
        if d.value not in _REGISTRY:
            dialect_for(d)
    names = [d.value for d in Dialect] + [n for n in _REGISTRY if n not in Dialect.__members__]
    return tuple(_REGISTRY[n] for n in dict.fromkeys(names) if n in _REGISTRY)


def read_acceptance(chunk: Mapping[str, Any], dialect: Dialect | str) -> AcceptanceRecord | None:
    """Per-request acceptance from one parsed chunk by the adapter of ``dialect``.

    ``auto`` tries vLLM, SGLang, then llama.cpp; ``openai`` and ``deepseek``
    report no acceptance. Never raises on wire data.

    Raises:
        PlanError: ``dialect`` names no adapter.
    """
    return dialect_for(dialect).read_acceptance(chunk)


# The built-in engines' readers, re-exported for the old ``deepseekbench._acceptance`` path
# (imported last: each engine module imports this package's ``_base``).
from deepseekbench._dialects.llamacpp import acceptance_from_llamacpp  # noqa: E402
from deepseekbench._dialects.sglang import acceptance_from_sglang  # noqa: E402
from deepseekbench._dialects.vllm import acceptance_from_vllm  # noqa: E402
