"""The best configuration per load of a depth grid.

A launched route whose ``spec_tokens`` (or draft model, or method) is a list expands
into one route per configuration (``grid_of`` names the grid). At every cell and
load point, each configuration gets a **conservative score** from its paired
rounds against ``off``: the median of the per-round speedups minus their median
absolute deviation (MAD), so a configuration that is fast on average but unstable
ranks below a steadier one. The idea of scoring each depth by "median minus a MAD
penalty" is vLLM's ``benchmarks/tune_speculative_k.py`` (``vllm-project/vllm``);
this is our own code over our own rounds. With one round the score is the speedup
itself (no spread to penalise).

Only configurations whose speedup is **credited** (parity verified on both sides,
route identity not refused, enough requests: :func:`~deepseekbench.compare_speedup`)
compete; ranking is by the scorecard's speed metric, never by acceptance rate
(which falls as depth grows although speed may still rise). Acceptance length and
per-position acceptance are carried beside the choice, for reading only.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["BestConfig", "GridCandidate", "best_configs", "conservative_score"]

SCORE_RULE = (
    "median of the paired-round speedups minus their median absolute deviation "
    "(idea: vLLM benchmarks/tune_speculative_k.py); credited configurations only"
)
"""How :func:`conservative_score` scores, in words (written into the JSON)."""


def conservative_score(round_speedups: Sequence[float]) -> float | None:
    """``median(s) - median(|s - median(s)|)`` over the per-round speedups (times
    faster, dimensionless); the value itself for one round; ``None`` for none."""
    if not round_speedups:
        return None
    med = statistics.median(round_speedups)
    mad = statistics.median(abs(s - med) for s in round_speedups)
    return med - mad


@dataclass(frozen=True, slots=True)
class GridCandidate:
    """One configuration of a grid at one cell and load point.

    ``speedup``: the credited figure (``None`` when refused); ``round_speedups``:
    per paired round (times faster); ``acceptance_length`` in tokens per verify
    step; ``acceptance_by_position``: ratios, position 1 first; ``spec_config``:
    the launched configuration (method, depth, draft model, engine keys).
    """

    grid: str
    route: str
    cell: str
    load: str
    load_level: float | None
    speedup: float | None
    round_speedups: tuple[float, ...]
    acceptance_length: float | None
    acceptance_by_position: tuple[float, ...] | None
    spec_config: Mapping[str, Any]
    concurrency: int | None = None
    rate_per_s: float | None = None


class BestConfig(BaseModel):
    """The chosen configuration of one grid at one cell and load point.

    Attributes:
        grid: the grid's label (the route it was expanded from).
        cell, load: where it was chosen (``load`` as the scorecard shows it).
        best: the chosen route's label (``None`` when no configuration was credited).
        score: its conservative score (times faster, dimensionless).
        speedup: its credited speedup (times faster).
        spec_config: its launched configuration (``{}`` when not launched).
        acceptance_length, acceptance_by_position: shown beside, never ranked on.
        candidates: every configuration's ``{route, score, speedup, credited,
            acceptance_length}``, best first.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    grid: str
    cell: str
    load: str
    concurrency: int | None = Field(default=None, description="closed-loop concurrency")
    rate_per_s: float | None = Field(default=None, description="open-loop rate, requests/s")
    best: str | None
    score: float | None = Field(default=None, description="conservative score, times faster")
    speedup: float | None = Field(default=None, description="credited speedup, times faster")
    spec_config: dict[str, Any] = Field(default_factory=dict)
    acceptance_length: float | None = Field(default=None, description="tokens per verify step")
    acceptance_by_position: tuple[float, ...] | None = None
    candidates: tuple[dict[str, Any], ...] = ()


def _score(c: GridCandidate) -> float | None:
    if c.speedup is None:
        return None  # not credited: does not compete
    return conservative_score(c.round_speedups) if c.round_speedups else c.speedup


def best_configs(candidates: Sequence[GridCandidate]) -> list[BestConfig]:
    """One :class:`BestConfig` per grid, cell and load point (ascending load), the
    highest conservative score among credited configurations winning (ties: the
    earlier configuration in plan order)."""
    groups: dict[tuple[str, str, str], list[GridCandidate]] = {}
    for c in candidates:
        groups.setdefault((c.grid, c.cell, c.load), []).append(c)
    out: list[BestConfig] = []
    order = sorted(groups, key=lambda k: (k[0], k[1], groups[k][0].load_level or 0.0))
    for key in order:
        group = groups[key]
        scored = [(c, _score(c)) for c in group]
        ranked = sorted(
            (x for x in scored if x[1] is not None),
            key=lambda x: -x[1],  # type: ignore[operator]
        )
        rows = [
            {
                "route": c.route,
                "score": s,
                "speedup": c.speedup,
                "credited": c.speedup is not None,
                "acceptance_length": c.acceptance_length,
            }
            for c, s in ranked + [x for x in scored if x[1] is None]
        ]
        if not ranked:
            out.append(BestConfig(grid=key[0], cell=key[1], load=key[2], best=None,
                                  concurrency=group[0].concurrency,
                                  rate_per_s=group[0].rate_per_s,
                                  candidates=tuple(rows)))  # fmt: skip
            continue
        best, score = ranked[0]
        out.append(
            BestConfig(
                grid=key[0],
                cell=key[1],
                load=key[2],
                concurrency=best.concurrency,
                rate_per_s=best.rate_per_s,
                best=best.route,
                score=score,
                speedup=best.speedup,
                spec_config=dict(best.spec_config),
                acceptance_length=best.acceptance_length,
                acceptance_by_position=best.acceptance_by_position,
                candidates=tuple(rows),
            )
        )
    return out
