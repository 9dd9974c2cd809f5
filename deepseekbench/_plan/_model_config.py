"""The settings every plan model shares, and the seed types a plan sends.

Holds :data:`PLAN_CONFIG` (frozen, unknown keys refused, refused values never
echoed, no inf/nan) and the :data:`Seed` / :data:`ArrivalSeed` field types.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

__all__ = ["PLAN_CONFIG", "ArrivalSeed", "Seed"]

# hide_input_in_errors: str(ValidationError) never repeats a refused value, which
# may be a secret (a key pasted into api_key_env, user-info in a base_url).
# allow_inf_nan=False: TOML's inf/nan would be stored as null and never read back.
PLAN_CONFIG = ConfigDict(
    frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False
)

Seed = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
"""A seed sent to the server: a signed 64-bit integer (vLLM's request ``seed``
field; a larger one is refused by the server on every request)."""

ArrivalSeed = Annotated[int, Field(ge=0, le=2**63 - 1)]
"""The arrival schedule's seed: non-negative (``numpy.random.default_rng``) and
64-bit, like the other seeds."""
