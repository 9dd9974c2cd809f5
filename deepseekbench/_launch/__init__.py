"""Launchers for real serving engines (vLLM, llama.cpp, SGLang, the embedded engine),
started from a plan's ``[routes.launch]`` or by tests and benchmarks.

Holds the launcher registry, beside the dialect registry and keyed by the same
names (:func:`launcher_for`: ``embedded``, ``llamacpp``, ``vllm``, ``sglang``; the
built-in launchers' module is imported on first use). Public names are
re-exported from :mod:`deepseekbench`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from deepseekbench._errors import PlanError

if TYPE_CHECKING:
    from deepseekbench._launch._launchers import Launcher

__all__ = ["all_launchers", "launcher_for"]

_REGISTRY: dict[str, Launcher] = {}


def _builtins() -> None:
    if not _REGISTRY:
        found = importlib.import_module("deepseekbench._launch._launchers").LAUNCHERS
        _REGISTRY.update((launcher.name, launcher) for launcher in found)


def launcher_for(name: str) -> Launcher:
    """The launcher of the engine named ``name`` (the name of the dialect it speaks).

    Raises:
        PlanError: no engine of that name is launched.
    """
    _builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise PlanError(
            f"no launcher for engine {name!r}; known: {', '.join(sorted(_REGISTRY))}"
        ) from None


def all_launchers() -> dict[str, Launcher]:
    """Every registered launcher, by name."""
    _builtins()
    return dict(_REGISTRY)
