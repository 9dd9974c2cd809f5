"""How a plan offers its load, and what a good request is: the ``[arrival]`` and ``[slo]`` sections.

Holds :class:`ArrivalPlan` (a closed loop of streams or an open loop at a rate,
either swept over a list; its load points and open-loop send times) and
:class:`SloPlan` (the limits a request must meet to count toward goodput).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from deepseekbench._plan._model_config import PLAN_CONFIG, ArrivalSeed
from deepseekbench._types._axes import Arrival
from deepseekbench._types._load import LoadPoint

__all__ = ["ArrivalPlan", "SloPlan"]

_Concurrency = Annotated[int, Field(ge=1, le=4096)]

_MIN_RATE_PER_S = 0.001
"""Smallest open-loop arrival rate (requests/s): one request per 1000 s on average.
Below it a cell of even a few requests would take hours (``rate_per_s = 1e-300``
schedules its second request after the universe ends), so it is refused."""

_Rate = Annotated[float, Field(gt=0)]


def _unique(values: tuple[Any, ...], name: str) -> None:
    if not values:
        raise ValueError(f"{name} needs at least one value")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} values must be unique, got {list(values)}")


class ArrivalPlan(BaseModel):
    """How requests are offered within a cell, at one load point or a sweep of them.

    ``mode="concurrency"``: a closed loop of ``concurrency`` workers; a list
    (``concurrency = [1, 4, 16, 64]``) sweeps it, one load point per value.
    ``mode="rate"``: an open loop at ``rate_per_s`` requests/s (a list sweeps
    it) with ``distribution`` ``poisson`` (exponential gaps) or ``gamma`` (gaps
    of shape ``gamma_shape``, mean ``1/rate_per_s``; shape < 1 is burstier),
    drawn from ``numpy.random.default_rng(seed)``; ``concurrency`` (one value)
    then caps requests in flight. ``max_lag_ms``: an open-loop row whose p90
    schedule lag (scheduled send → actual send) exceeds it is flagged
    ``schedule_lagged`` (ms). ``ramp_ms``: a closed loop's ramp, its streams' first
    sends spread evenly over that time (stream ``s`` of ``C`` at ``s · ramp_ms / C``;
    default 0: all at once, as before the key existed; ms, at most one hour; an open
    loop has its own send times and refuses one).

    Raises:
        pydantic.ValidationError: a ``concurrency`` outside 1..4096 (requests),
            a ``rate_per_s`` that is not a finite number (``"inf"`` included) or is
            below 0.001 requests/s, a ``gamma_shape`` or ``max_lag_ms`` not > 0, a
            ``seed`` outside 0..2**63-1, an empty or repeated sweep list,
            ``mode="rate"`` without ``rate_per_s``, a ``ramp_ms`` below 0, above one
            hour or with ``mode="rate"``,
            ``rate_per_s`` with ``mode="concurrency"``, a ``concurrency`` list with
            ``mode="rate"``, or an unknown field.
    """

    model_config = PLAN_CONFIG

    mode: Literal["concurrency", "rate"] = "concurrency"
    concurrency: _Concurrency | tuple[_Concurrency, ...] = 1
    rate_per_s: _Rate | tuple[_Rate, ...] | None = None
    distribution: Literal["poisson", "gamma"] = "poisson"
    gamma_shape: float = Field(default=1.0, gt=0)
    seed: ArrivalSeed = 0
    max_lag_ms: float = Field(default=100.0, gt=0)
    ramp_ms: float = Field(default=0.0, ge=0, le=3_600_000)

    @field_validator("rate_per_s", mode="before")
    @classmethod
    def _rate_numbers(cls, value: Any) -> Any:
        """One plain line for a rate that is not a finite number (``"inf"`` included):
        an open loop needs a finite rate; every request at once is a closed loop."""
        for x in value if isinstance(value, (list, tuple)) else [value]:
            number = isinstance(x, (int, float)) and not isinstance(x, bool)
            if x is not None and (not number or x != x or x in (float("inf"), float("-inf"))):
                raise ValueError(
                    f"must be a finite number of requests/s > 0, or a list of them (got {x!r}); "
                    "for every request at once (vLLM's --request-rate inf) use "
                    'mode = "concurrency" with concurrency = N'
                )
        return value

    @model_validator(mode="after")
    def _rate(self) -> ArrivalPlan:
        if self.mode == "rate" and self.rate_per_s is None:
            raise ValueError("mode='rate' needs rate_per_s")
        rates = self.rate_per_s if isinstance(self.rate_per_s, tuple) else (self.rate_per_s,)
        slow = [r for r in rates if r is not None and r < _MIN_RATE_PER_S]
        if slow:
            raise ValueError(
                f"rate_per_s {slow[0]:g} is below {_MIN_RATE_PER_S} requests/s (one request "
                f"per {1 / _MIN_RATE_PER_S:g} s): a cell at that rate would not end in a sane time"
            )
        if self.mode == "concurrency" and self.rate_per_s is not None:
            raise ValueError("rate_per_s is only used with mode='rate'")
        if self.mode == "rate" and self.ramp_ms > 0:
            raise ValueError(
                "ramp_ms spreads a closed loop's first starts; an open loop (mode='rate') "
                "sends at its own schedule's times"
            )
        if isinstance(self.concurrency, tuple):
            if self.mode == "rate":
                raise ValueError(
                    "with mode='rate', concurrency is one in-flight cap; sweep rate_per_s instead"
                )
            _unique(self.concurrency, "concurrency")
        if isinstance(self.rate_per_s, tuple):
            _unique(self.rate_per_s, "rate_per_s")
        return self

    def load_points(self) -> tuple[LoadPoint, ...]:
        """The sweep's load points, in plan order (one when nothing is swept)."""
        if self.mode == "rate" and self.rate_per_s is not None:
            rates = self.rate_per_s if isinstance(self.rate_per_s, tuple) else (self.rate_per_s,)
            cap = self.concurrency if isinstance(self.concurrency, int) else self.concurrency[0]
            kind = Arrival(self.distribution)
            return tuple(LoadPoint(kind, cap, float(r)) for r in rates)
        levels = self.concurrency if isinstance(self.concurrency, tuple) else (self.concurrency,)
        return tuple(LoadPoint(Arrival.closed, c) for c in levels)

    def offsets_s(
        self, n: int, *, salt: int = 0, rate_per_s: float | None = None
    ) -> list[float] | None:
        """Send times of ``n`` requests in seconds from the block start (``None`` = closed loop).

        Gaps: exponential with mean ``1/rate`` (Poisson process) or gamma(shape
        ``k``, scale ``1/(k·rate)``); the first request at 0. ``rate_per_s``
        picks the load point (default: the plan's first rate). ``salt`` varies
        the stream reproducibly.
        """
        if self.mode != "rate" or self.rate_per_s is None:
            return None
        import numpy as np

        if rate_per_s is None:
            rate_per_s = self.load_points()[0].rate_per_s
        assert rate_per_s is not None
        rng = np.random.default_rng([self.seed, salt])
        mean = 1.0 / rate_per_s
        if self.distribution == "poisson":
            gaps = rng.exponential(mean, size=n)
        else:
            gaps = rng.gamma(self.gamma_shape, mean / self.gamma_shape, size=n)
        if n:
            gaps[0] = 0.0
        return [float(x) for x in np.cumsum(gaps)]


class SloPlan(BaseModel):
    """Service-level objectives for goodput: a request is *good* when it meets every
    limit given (any subset; none set = no goodput).

    Attributes:
        ttft_ms: TTFT limit (ms). tpot_ms: TPOT limit (ms/token). e2e_ms: E2E limit (ms).

    Raises:
        pydantic.ValidationError: a limit not > 0, or an unknown field.
    """

    model_config = PLAN_CONFIG

    ttft_ms: float | None = Field(default=None, gt=0, description="TTFT limit, ms")
    tpot_ms: float | None = Field(default=None, gt=0, description="TPOT limit, ms/token")
    e2e_ms: float | None = Field(default=None, gt=0, description="E2E latency limit, ms")

    @property
    def limits(self) -> dict[str, float]:
        """The limits set, by metric name (``ttft_ms``, ``tpot_ms``, ``e2e_ms``)."""
        given = {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms}
        return {k: v for k, v in given.items() if v is not None}
