"""The embedded engine's deterministic mode: the engine says it (on, but for the numerics
mode, whose verify passes round differently from decode), the demos declare it on their
routes as docs/engines.md asks of an engine that does not report it, the run records it
(the scorecard's parity note read "engine deterministic mode: unknown"), and it makes no
parity verdict easier to earn."""

from __future__ import annotations

import pytest

from deepseekbench import EngineConfig, LiveGate, Speculative, compare_speedup
from deepseekbench._analysis._determinism_rows import determinism_note
from deepseekbench._analysis._speedup import RefusalReason
from deepseekbench._cli._demo import _numerics_plan, demo_capacity_plan, demo_plan
from deepseekbench._execute._served_config import engine_determinism
from deepseekbench._net._route_plan import engine_route
from deepseekbench._types._determinism import DeterminismSource, EngineDeterminism
from tests._helpers import make_row

URLS = [f"http://127.0.0.1:{port}/v1" for port in (1, 2, 3)]


def test_the_engine_says_its_mode() -> None:
    assert EngineConfig().deterministic_mode is True
    assert EngineConfig(speculative=Speculative.mtp, mistuned_draft=True).deterministic_mode is True
    assert EngineConfig(numerics=True).deterministic_mode is False  # verify rounds apart


def test_the_demos_declare_it_and_it_changes_no_request() -> None:
    declared = demo_plan(URLS, deterministic=EngineConfig().deterministic_mode)
    assert [r.deterministic for r in declared.routes] == [True, True, True]
    assert declared.plan_hash() == demo_plan(URLS).plan_hash()  # not hashed: no request
    assert all(r.deterministic is True for r in demo_capacity_plan().routes)
    numerics = _numerics_plan(URLS, "bit_exact", EngineConfig(numerics=True).deterministic_mode)
    assert [r.deterministic for r in numerics.routes] == [False, False, False]


@pytest.mark.anyio
async def test_the_run_reads_the_declaration_as_the_plans_word() -> None:
    plan = demo_plan(URLS, deterministic=True)
    routes = {rp.label: engine_route(rp, plan.model) for rp in plan.routes}
    gate = LiveGate()
    async with gate.client() as client:  # the vllm dialect reports nothing: nothing sent
        modes = await engine_determinism(plan.routes, routes, gate=gate, client=client)
    plan_word = EngineDeterminism(
        deterministic=True, source=DeterminismSource.plan, detail="[[routes]] deterministic"
    )
    assert modes == {"off": plan_word, "mtp": plan_word, "mtp-mistuned": plan_word}
    assert determinism_note(modes, "mtp-mistuned", "off") == (
        "engine deterministic mode: on (plan: [[routes]] deterministic)"
    )


def test_a_deterministic_engine_earns_no_parity_verdict() -> None:
    """The mode is recorded and shown, never read by a verdict: a row whose parity is not
    verified stays refused however deterministic its engine says it is."""
    for flag in (None, True):
        off = make_row(quality_parity="unknown", engine_deterministic=flag)
        mtp = make_row(
            speculative="mtp", route_label="mtp", tpot_ms=5.0, quality_parity="differs",
            engine_deterministic=flag, accepted_token_ratio=0.5, acceptance_length=2.0,
        )  # fmt: skip
        v = compare_speedup(off, mtp)
        assert not v.printed
        assert RefusalReason.baseline_parity_not_verified in v.reasons
        assert RefusalReason.candidate_parity_not_verified in v.reasons
