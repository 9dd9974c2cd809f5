"""A plan's route made live: the :class:`EngineRoute` a run measures with.

Holds :func:`engine_route`, which reads the route's API key from the environment
(named by the plan, never held in it) and builds the endpoint the transport sends
to. The plan stays data; this is the first step that leaves it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import SecretStr

from deepseekbench._errors import PlanError
from deepseekbench._net._route import EngineRoute
from deepseekbench._plan._routes import RoutePlan
from deepseekbench._types._secrets import checked_key

__all__ = ["engine_route"]


def engine_route(
    route: RoutePlan, default_model: str, environ: Mapping[str, str] | None = None
) -> EngineRoute:
    """The :class:`~deepseekbench.EngineRoute` to measure ``route`` with (key read from
    ``environ``, default the process environment; model default ``default_model``).

    Raises:
        PlanError: ``api_key_env`` names an unset variable.
        KeyFormatError: the variable's key has a character an HTTP header
            cannot carry (CR/LF, another control character, non-ASCII).
    """
    key: SecretStr | None = None
    if route.api_key_env is not None:
        env = os.environ if environ is None else environ
        value = env.get(route.api_key_env)
        # a key pasted here instead of a variable name must not be echoed
        name = route.api_key_env if route.api_key_env.isupper() else "(name not shown)"
        if not value or not value.strip():  # a blank key is no key
            raise PlanError(
                f"route {route.label!r}: api_key_env: environment variable {name} is not set"
            )
        key = checked_key(value, f"route {route.label!r}: api_key_env {name}")
    return EngineRoute(
        base_url=route.base_url,
        model=route.model or default_model,
        api_key=key,
        dialect=route.dialect,
        speculative=route.speculative,
        label=route.label,
        request_extras=route.request_extras,
        continuous_usage=route.continuous_usage,
    )
