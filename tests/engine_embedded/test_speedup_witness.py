"""The decomposition and its witness on the embedded engine, end to end through ``run_plan``.

Three things the cost model makes certain, asserted without timing the machine:

* the verify-delay fault (``CostModel.verify_delay_ms``, a fixed delay on every verify
  step) leaves acceptance exactly unchanged (greedy decoding of the same prompts), and
  moves the step cost: the witness, predicting from the closed form
  (``CostModel.step_costs``, which leaves the fault out), names an unexplained per-step
  overhead — bounded generously here (between half and three times the delay: a busy
  machine stretches every step, ``off``'s and the candidate's alike, and the
  prediction is scaled on ``off``'s measured step); the 20 % recovery is checked by
  ``benchmarks/bench_speedup_witness.py``;
* a weaker draft head (``draft``: a 3-character context against ``mtp``'s 5) at the same
  depth and costs is attributed to acceptance, not cost.
"""

from __future__ import annotations

import pytest

from deepseekbench import (
    BenchmarkPlan,
    CostModel,
    LiveGate,
    Scorecard,
    SpeedupDecomposition,
    StepCosts,
    embedded_plan,
    embedded_route,
    run_plan,
    smoke_tasks,
    which_factor_moved,
    witness_step_costs,
)

pytestmark = pytest.mark.anyio

DELAY_MS = 200.0
COSTS: dict[str, float] = {
    "target_step_ms": 10.0,
    "verify_token_ms": 0.0,
    "draft_step_ms": 0.0,
    "compute_ms_per_token": 0.0,
    "batch_exponent": 0.0,
    "prefill_ms_per_token": 0.0,
}
"""A flat closed form: every step 10 ms, a verify step as cheap as a decode step (so
the faulted route is clearly slower than ``off``, about 0.15×, an interval clear of 1
even on a busy machine, and a route's step costs do not depend on its draft head)."""
DEPTH = 3
PROMPTS = ("arith-add-29-33", "arith-mul-7-8", "arith-mul-9-6", "reverse-zizur", "reverse-tonsa")
"""Smoke prompts where the 3-character ``draft`` head accepts far less than ``mtp``'s
(acceptance length about 1.6 against 2.9 over the five, greedy)."""


def _plan() -> BenchmarkPlan:
    prompts = {t.id: t.prompt for t in smoke_tasks()}
    return embedded_plan(
        [
            embedded_route("off", "off", COSTS),
            embedded_route("mtp", "mtp", COSTS, depth=DEPTH),
            embedded_route("mtp-delay", "mtp", COSTS, depth=DEPTH, verify_delay_ms=DELAY_MS),
            embedded_route("weak", "draft", COSTS, depth=DEPTH),
        ],
        prompts=[prompts[i] for i in PROMPTS],
        max_tokens=48,
        concurrency=[1],
        requests=15,
        repeats=1,  # one round: a per-request bootstrap interval
    )


async def test_the_witness_names_the_verify_delay_and_a_weak_draft_is_acceptance() -> None:
    result = await run_plan(_plan(), gate=LiveGate())
    card = Scorecard.from_run(result)
    parts: dict[str, SpeedupDecomposition] = {}
    for ln in card.lines:
        if ln.route != "off":
            assert ln.decomposition is not None, (ln.route, ln.speedup_text)
            parts[ln.route] = ln.decomposition
    mtp, delayed, weak = parts["mtp"], parts["mtp-delay"], parts["weak"]
    # the fault leaves acceptance exactly as it was: the same greedy outputs
    assert delayed.acceptance_length == mtp.acceptance_length
    assert which_factor_moved(mtp, delayed) == "step_cost"
    verify, decode = CostModel(**COSTS).step_costs(1, DEPTH, model_draft=True)
    model = StepCosts(verify_step_ms=verify, decode_step_ms=decode, source="cost model")
    w = witness_step_costs(delayed, model)
    assert not w.agrees
    assert 0.5 * DELAY_MS <= w.unexplained_ms <= 3 * DELAY_MS, w.text()
    # against the same route without the fault, the difference is the delay
    plain = witness_step_costs(mtp, model)
    assert w.unexplained_ms - plain.unexplained_ms >= 0.5 * DELAY_MS
    # a weaker head at the same depth and costs: acceptance moved, the step did not
    assert weak.acceptance_length < mtp.acceptance_length
    assert which_factor_moved(mtp, weak) == "acceptance", (mtp, weak)
