"""The scorecard's depth-grid section: the best configuration per load.

Builds :class:`~deepseekbench._analysis._best_config.GridCandidate` values from a
scorecard's lines, rows and paired rounds, and renders the choice as text and as
JSON a deployment can read (``{"metric", "score_rule", "choices": [...]}``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from deepseekbench._analysis._best_config import (
    SCORE_RULE,
    BestConfig,
    GridCandidate,
    best_configs,
)
from deepseekbench._analysis._speedup import SpeedupMetric, speedup_of
from deepseekbench._types._axes import Speculative
from deepseekbench._types._row import Row

__all__ = ["grid_choices", "grid_json", "grid_text"]


def _round_speedups(
    base: Mapping[int, float], cand: Mapping[int, float], metric: SpeedupMetric
) -> tuple[float, ...]:
    shared = sorted(set(base) & set(cand))
    out = []
    for r in shared:
        if base[r] > 0 and cand[r] > 0:
            out.append(speedup_of(base[r], cand[r], metric))
    return tuple(out)


def grid_choices(
    lines: Sequence[Any],
    rows: Sequence[Row],
    grids: Mapping[str, str],
    rounds: Mapping[str, Mapping[int, float]],
    metric: SpeedupMetric,
    key_of: Any,
) -> list[BestConfig]:
    """The best configuration per grid, cell and load among the scorecard's lines.

    ``lines``/``rows``: the scorecard's, in the same order; ``grids``: route label
    → grid label (routes of no grid are left out); ``rounds``: the metric per
    round keyed by ``key_of(row)``; ``metric``: the scorecard's speed metric.
    """
    base_rows = {
        (r.route_label, ln.cell, ln.load): r
        for ln, r in zip(lines, rows, strict=True)
        if r.speculative is Speculative.off
    }
    candidates = []
    for ln, row in zip(lines, rows, strict=True):
        grid = grids.get(ln.route)
        if grid is None or ln.speculative is Speculative.off:
            continue
        base = base_rows.get((ln.baseline, ln.cell, ln.load))
        credited = ln.credited  # an earned speedup; a printed slowdown is no best config
        per_round = (
            _round_speedups(rounds.get(key_of(base), {}), rounds.get(key_of(row), {}), metric)
            if base is not None and credited
            else ()
        )
        candidates.append(
            GridCandidate(
                grid=grid,
                route=ln.route,
                cell=ln.cell,
                load=ln.load,
                load_level=ln.load_level,
                speedup=ln.verdict.speedup if credited else None,
                round_speedups=per_round,
                acceptance_length=ln.acceptance_length,
                acceptance_by_position=ln.acceptance_by_position,
                spec_config=orjson.loads(row.spec_config) if row.spec_config else {},
                concurrency=row.concurrency,
                rate_per_s=row.request_rate_per_s,
            )
        )
    return best_configs(candidates)


def grid_json(choices: Sequence[BestConfig], metric: SpeedupMetric) -> str:
    """``{"metric", "score_rule", "choices": [BestConfig, ...]}`` as indented JSON."""
    data = {
        "metric": metric.value,
        "score_rule": SCORE_RULE,
        "choices": [c.model_dump(mode="json") for c in choices],
    }
    return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()


def _pos(by_pos: tuple[float, ...] | None) -> str:
    return " ".join(f"{f:.2f}" for f in by_pos) if by_pos else "—"


def grid_text(choices: Sequence[BestConfig], metric: SpeedupMetric) -> list[str]:
    """The text section: one line per grid, cell and load (empty without grids)."""
    if not choices:
        return []
    out = [
        f"Best configuration per load (by {metric.value}; score = median of paired-round "
        "speedups minus their MAD, after vLLM's tune_speculative_k.py; credited only)"
    ]
    for c in choices:
        where = f"{c.grid} @ {c.cell} {c.load}"
        if c.best is None:
            out.append(f"  {where}: none credited")
            continue
        length = f"{c.acceptance_length:.2f}" if c.acceptance_length is not None else "—"
        others = ", ".join(
            f"{x['route']} {x['score']:.2f}" if x["score"] is not None else f"{x['route']} refused"
            for x in c.candidates[1:]
        )
        out.append(
            f"  {where}: {c.best} (score {c.score:.2f}, {c.speedup:.2f}×; acc.len {length}, "
            f"by position {_pos(c.acceptance_by_position)})"
            + (f"; then {others}" if others else "")
        )
    return out
