"""0.1.0's private module paths (its flat layout), kept importable with a warning.

Docs and scripts of 0.1.0 imported some private modules by path
(``deepseekbench._speedup``); each now resolves to its stage folder's module with a
:class:`DeprecationWarning`. Imports nothing from the package, so any layer may sit above it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

__all__ = ["install_moved_finder"]

# Private module paths from before the stage folders (0.1.0's flat layout), kept
# importable because docs and scripts used some of them. Deprecated: import the
# public name from ``deepseekbench`` instead. (``_plan``, ``_measure`` and
# ``_analysis`` are now the stage folders themselves.)
_MOVED: dict[str, str] = {
    "deepseekbench._acceptance": "deepseekbench._dialects",
    "deepseekbench._axes": "deepseekbench._types._axes",
    "deepseekbench._breakdown": "deepseekbench._analysis._breakdown",
    "deepseekbench._capability": "deepseekbench._plan._capability",
    "deepseekbench._client_health": "deepseekbench._records._client_health",
    "deepseekbench._executor": "deepseekbench._execute._executor",
    "deepseekbench._gate": "deepseekbench._net._gate",
    "deepseekbench._llamacpp": "deepseekbench._launch._llamacpp",
    "deepseekbench._parity": "deepseekbench._types._parity",
    "deepseekbench._plot": "deepseekbench._report._plot",
    "deepseekbench._pool_executor": "deepseekbench._execute._pool_executor",
    "deepseekbench._prepare": "deepseekbench._execute._prepare",
    "deepseekbench._probe": "deepseekbench._net._probe",
    "deepseekbench._ray_executor": "deepseekbench._execute._ray_executor",
    "deepseekbench._request": "deepseekbench._types._request",
    "deepseekbench._results": "deepseekbench._store._results",
    "deepseekbench._route": "deepseekbench._net._route",
    "deepseekbench._row": "deepseekbench._types._row",
    "deepseekbench._rowstats": "deepseekbench._analysis._rowstats",
    "deepseekbench._schedule": "deepseekbench._plan._schedule",
    "deepseekbench._scorecard": "deepseekbench._report._scorecard",
    "deepseekbench._selfcheck": "deepseekbench._measure._selfcheck",
    "deepseekbench._server_metrics": "deepseekbench._measure._server_metrics",
    "deepseekbench._servers": "deepseekbench._launch._servers",
    "deepseekbench._spec_config": "deepseekbench._execute._served_config",
    "deepseekbench._spec_fields": "deepseekbench._analysis._spec_fields",
    "deepseekbench._speedup": "deepseekbench._analysis._speedup",
    "deepseekbench._sse": "deepseekbench._measure._sse",
    "deepseekbench._stats": "deepseekbench._analysis._stats",
    "deepseekbench._tasks": "deepseekbench._plan._tasks",
    "deepseekbench._tokens": "deepseekbench._measure._tokens",
    "deepseekbench._traffic": "deepseekbench._analysis._traffic",
    "deepseekbench._transport": "deepseekbench._net._transport",
    "deepseekbench._vllm": "deepseekbench._launch._vllm",
    "deepseekbench._worker": "deepseekbench._execute._worker",
    "deepseekbench._workers": "deepseekbench._execute._workers",
    "deepseekbench._workload": "deepseekbench._plan._workload",
    "deepseekbench._workshare": "deepseekbench._execute._workshare",
}


class _MovedLoader(importlib.abc.Loader):
    def exec_module(self, module: ModuleType) -> None:
        new = _MOVED[module.__name__]
        warnings.warn(
            f"{module.__name__} moved to {new}; import the public name from deepseekbench",
            DeprecationWarning,
            stacklevel=2,
        )
        target = importlib.import_module(new)
        module.__dict__.update({k: v for k, v in vars(target).items() if not k.startswith("__")})
        module.__dict__["__all__"] = list(getattr(target, "__all__", ()))


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, _MovedLoader())


def install_moved_finder() -> None:
    """Make every path of :data:`_MOVED` importable (once per interpreter)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
