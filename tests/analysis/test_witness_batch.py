"""The step witness at the batch the engine ran: the demo's own rows at c = 8 (a recorded
run of the demo's three engines, ``tests/data/demo_c8_engine_steps.jsonl``: pinned answers
of different lengths, so the engine runs fewer sequences per step than the 8 streams), and
the fallback to batch = concurrency where a row lacks the engine's step count. Whether the
prediction then agrees is a measured figure (docs/scorecard.md), not asserted here."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepseekbench import (
    CostModel,
    Row,
    Scorecard,
    SpeedupDecomposition,
    StepCostsError,
    cost_model_step_costs,
    load_results,
    witness_batch,
    witness_step_costs,
)

RUN = Path(__file__).resolve().parent.parent / "data" / "demo_c8_engine_steps.jsonl"
DEMO_COSTS = CostModel(compute_ms_per_token=3.0)
"""The demo engines' cost model (``DEMO_COMPUTE_MS_PER_TOKEN`` = 3.0, the rest default)."""
DEPTH = 3


def _demo() -> tuple[dict[str, Row], SpeedupDecomposition]:
    result = load_results(RUN)
    rows = {str(r.route_label): r for r in result.rows}
    card = Scorecard.from_run(result)
    (d,) = (ln.decomposition for ln in card.lines if ln.route == "mtp")
    assert d is not None
    return rows, d


def test_the_demo_rows_carry_the_engine_run_batch_below_the_concurrency() -> None:
    rows, _ = _demo()
    for label in ("off", "mtp"):
        r = rows[label]
        assert r.engine_steps is not None and r.engine_steps > 0
        assert r.engine_batch_mean is not None and 1.0 < r.engine_batch_mean < 8.0
        assert r.engine_steps_source is not None
        assert "vllm:iteration_tokens_total" in r.engine_steps_source


def test_the_witness_reads_the_cost_model_at_each_routes_engine_run_batch() -> None:
    rows, d = _demo()
    ran = witness_batch(rows["mtp"], rows["off"], concurrency=8)
    assert ran.basis == "engine" and "the batch the engine ran" in str(ran)
    assert (ran.candidate, ran.off) == (
        rows["mtp"].engine_batch_mean,
        rows["off"].engine_batch_mean,
    )
    costs = cost_model_step_costs(DEMO_COSTS, ran, DEPTH, model_draft=True)
    # the verify step at the candidate's batch, off's decode step at off's (not one batch)
    verify, _ = DEMO_COSTS.step_costs(ran.candidate, DEPTH, model_draft=True)
    _, decode = DEMO_COSTS.step_costs(ran.off, DEPTH, model_draft=True)
    assert (costs.verify_step_ms, costs.decode_step_ms) == (verify, decode)
    full_verify, full_decode = DEMO_COSTS.step_costs(8, DEPTH, model_draft=True)
    assert costs.verify_step_ms < full_verify and costs.decode_step_ms < full_decode
    w = witness_step_costs(d, costs)
    assert "the batch the engine ran" in w.text() and "sequences per step" in str(w)


def test_without_the_engine_figure_the_witness_says_it_used_the_concurrency() -> None:
    rows, d = _demo()
    without = rows["off"].model_copy(update={"engine_batch_mean": None})
    conc = witness_batch(rows["mtp"], without, concurrency=8)
    assert conc.basis == "concurrency" and (conc.candidate, conc.off) == (8, 8)
    assert "'off' has no engine_batch_mean" in str(conc)
    costs = cost_model_step_costs(DEMO_COSTS, conc, DEPTH, model_draft=True)
    assert (costs.verify_step_ms, costs.decode_step_ms) == DEMO_COSTS.step_costs(
        8, DEPTH, model_draft=True
    )
    assert "batch = concurrency 8" in witness_step_costs(d, costs).text()


def test_witness_batch_refuses_a_concurrency_below_one() -> None:
    rows, _ = _demo()
    with pytest.raises(StepCostsError, match="concurrency"):
        witness_batch(rows["mtp"], rows["off"], concurrency=0)
