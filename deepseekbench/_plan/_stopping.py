"""``[stopping]``: when a comparison's measurement rounds end, and the few-rounds warning.

``mode = "fixed"`` (the default, and the only behaviour before this section existed)
runs every round of the plan. ``mode = "sequential"`` reads an anytime-valid
confidence sequence of each speculative route's paired speedup over ``off`` after
every round (``deepseekbench._analysis._sequential``) and stops running that route
at a (cell, load point) once it is decided: credited (the sequence excludes 1), no
meaningful difference (it lies inside ``±delta``), or the ``cap`` of rounds ran.
``off`` runs as long as any route it is compared with does. Pure data: the decision
itself is made by the runner from the measured rows.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "MIN_VERDICT_REQUESTS",
    "FewRoundsWarning",
    "StoppingPlan",
    "caller_stacklevel",
    "few_rounds_message",
]

MIN_VERDICT_REQUESTS = 5
"""Fewest measured requests per route, cell and load point before a sequential verdict:
the same floor a speedup needs (``deepseekbench._analysis._speedup``'s
``MIN_REQUESTS_FOR_SPEEDUP``), so no comparison stops on traffic too small to credit
or to judge the measured traffic's parity on."""


class FewRoundsWarning(UserWarning):
    """The plan runs fewer than 3 measurement rounds: the paired interval of a speedup
    has at most one degree of freedom (with 2 rounds its 95 % half-width is 12.7 times
    the rounds' spread), so its verdict is rarely decided. Raised as a warning at
    validation (``BenchmarkPlan.validate_sources``), never an error."""


def few_rounds_message(rounds: int) -> str | None:
    """The warning for a plan of ``rounds`` rounds per cell and load point (a count), or
    ``None`` for 3 or more."""
    if rounds >= 3:
        return None
    what = (
        "1 round: no paired rounds, so no interval covers drift between rounds (the "
        "speedup's interval is a paired cluster bootstrap over the prompts where the "
        "requests carry prompt ids, else a per-request bootstrap)"
        if rounds == 1
        else "2 rounds: the paired interval has 1 degree of freedom (t 12.71)"
    )
    return f"{what}; set repeats = 3 or more (or [stopping] cap) for a verdict that can decide"


_PACKAGE = str(Path(__file__).resolve().parent.parent)
# frames a warning passes through on its way out of a run: the package, the event loop
_RUNTIME = ("anyio", "asyncio", "trio", "sniffio", "contextlib", "threading", "concurrent")


def caller_stacklevel() -> int:
    """The ``stacklevel`` (a count, >= 2) that points a ``warnings.warn`` made by the
    caller of this function at the first frame outside this package and the event
    loop's machinery (anyio, asyncio, trio): the user's own call, not a package line."""
    frame = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame.f_back is not None:
        frame = frame.f_back
        level += 1
        name = str(frame.f_globals.get("__name__", ""))
        inside = frame.f_code.co_filename.startswith(_PACKAGE) or name == "deepseekbench"
        if not inside and name.split(".", 1)[0] not in _RUNTIME:
            return level
    return max(level, 2)


class StoppingPlan(BaseModel):
    """The ``[stopping]`` table of a plan.

    Attributes:
        mode: ``"fixed"`` (every round runs) or ``"sequential"`` (a route stops at a
            cell and load point once its anytime-valid sequence is decided).
        delta: the "no meaningful difference" band (fraction, 0 < delta < 0.5; default
            0.03: a speedup within ``[1/1.03, 1.03]``).
        cap: the most rounds per cell and load point (2..100); ``None``: ``repeats``.
            Sequential mode schedules this many rounds and skips the decided ones.
        min_rounds: the fewest rounds before any verdict (>= 2; default 2).
        min_requests: the fewest measured requests per route, cell and load point
            before any verdict (>= 1; default :data:`MIN_VERDICT_REQUESTS`).
        alpha: the error rate of the sequence over all rounds together (0 < alpha <
            0.5; default 0.05).

    Raises:
        pydantic.ValidationError: a value out of range, ``min_rounds > cap``, or an
            unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    mode: Literal["fixed", "sequential"] = "fixed"
    delta: float = Field(default=0.03, gt=0, lt=0.5, description="no-difference band (fraction)")
    cap: int | None = Field(default=None, ge=2, le=100, description="most rounds (None: repeats)")
    min_rounds: int = Field(default=2, ge=2, le=100, description="fewest rounds before a verdict")
    min_requests: int = Field(
        default=MIN_VERDICT_REQUESTS,
        ge=1,
        le=100_000,
        description="fewest measured requests per route before a verdict",
    )
    alpha: float = Field(default=0.05, gt=0, lt=0.5, description="error rate over all rounds")

    @model_validator(mode="after")
    def _order(self) -> StoppingPlan:
        if self.cap is not None and self.min_rounds > self.cap:
            raise ValueError(f"min_rounds ({self.min_rounds}) must not exceed cap ({self.cap})")
        return self

    @property
    def sequential(self) -> bool:
        """True in ``sequential`` mode."""
        return self.mode == "sequential"
