"""Real vLLM on the generated Llama pair: ``off`` beside ``draft`` and a mis-tuned
``draft`` route, each run as a ``BenchmarkPlan`` through the library (``off`` beside
``ngram`` is ``tests/vllm/test_vllm_launch.py``, where the plan launches both servers).

The session's server pool (``conftest.vllm_pool``) starts ``off`` once for both tests
and each test's candidate beside it (two servers at most: the mis-tuned route's start
stops the ``draft`` server, which no later test asks for). Every plan's verdict is
checked against the raw streamed texts, and the per-request
``metrics.speculative_decoding`` counts against ``/metrics``.

The mis-tuned route is vLLM's own ``rejection_sample_method = "synthetic"`` (with
``synthetic_acceptance_length``): the rejection sampler accepts drafts at a chosen rate
without comparing them with the target's choice (vLLM's ``rejection_sampler.py``
greedy kernel takes the synthetic branch before the argmax test), so the output is not
the target's. vLLM 0.32's CPU build refuses it at start-up: its C++ rejection kernels
(``vllm/utils/cpu_triton_utils.py``) assert "Synthetic acceptance not supported with
CPU sampling". The test accepts exactly two outcomes: that refusal (the CPU build; the
route cannot exist there) or, where the server starts (a build with synthetic
sampling), a run the harness must measure and refuse.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deepseekbench import QualityParity, VllmServerError, VllmServerSpec
from tests.vllm.checks import (
    check_counts,
    check_requests,
    check_verdict,
    measured_texts,
)
from tests.vllm.conftest import VllmModels, server_spec
from tests.vllm.plans import append_report, build_plan, run_pair
from tests.vllm.pool import ServerPool
from tests.vllm.test_vllm_deepseek_witness import TEMPERATURE, check_witness, sampled

pytestmark = pytest.mark.vllm

MODEL = "deepseekbench-llama-generated"
NUM_SPEC = 3
MISTUNED_LENGTH = 3.5  # mean acceptance length the synthetic sampler aims at (<= 1 + 3)


def off_spec(models: VllmModels) -> VllmServerSpec:
    """The baseline server (speculation off), shared by both tests."""
    return server_spec("off", "llama-off", models.llama_target, served_model_name=MODEL)


def test_draft_model_matches_off_and_is_credited(
    vllm_pool: ServerPool, vllm_models: VllmModels, tmp_path: Path
) -> None:
    spec = server_spec(
        "draft", "llama-draft", vllm_models.llama_target, vllm_models.llama_draft,
        served_model_name=MODEL, num_speculative_tokens=NUM_SPEC,
    )  # fmt: skip
    running = vllm_pool.serve([off_spec(vllm_models), spec])
    servers = {"off": running["llama-off"], "draft": running["llama-draft"]}
    plan = build_plan(MODEL, servers["off"], servers["draft"], "draft", "draft")
    run = run_pair(plan, servers, tmp_path, "Llama pair: off vs draft model (vLLM)")
    check_requests(run, "draft")
    matches = check_verdict(run, "draft")
    summary = check_counts(run, "draft")
    assert matches == [True] * len(matches)
    texts = measured_texts(run)
    assert texts["draft"] == texts["off"]
    # a trained draft of the same corpus: acceptance strictly between 0 and 1 drafts
    assert 0 < summary["accepted"] <= summary["drafted"]


def test_draft_model_is_verified_by_the_witness(
    vllm_pool: ServerPool, vllm_models: VllmModels, tmp_path: Path
) -> None:
    """The distribution witness at T = 0.8 on the draft-model pair (the first test's
    servers, still up: the pool holds two); see ``test_vllm_deepseek_witness``."""
    off = off_spec(vllm_models)
    draft = server_spec(
        "draft", "llama-draft", vllm_models.llama_target, vllm_models.llama_draft,
        served_model_name=MODEL, num_speculative_tokens=NUM_SPEC,
    )  # fmt: skip
    running = vllm_pool.serve([off, draft])
    servers = {"off": running["llama-off"], "draft": running["llama-draft"]}
    plan = sampled(build_plan(MODEL, servers["off"], servers["draft"], "draft", "draft"))
    run = run_pair(plan, servers, tmp_path, f"Llama draft model at T={TEMPERATURE} (vLLM)")
    check_witness(run, "draft")


def test_synthetic_acceptance_route_differs_and_is_refused(
    vllm_pool: ServerPool, vllm_models: VllmModels, tmp_path: Path
) -> None:
    spec = server_spec(
        "draft", "llama-mistuned", vllm_models.llama_target, vllm_models.llama_draft,
        served_model_name=MODEL, num_speculative_tokens=NUM_SPEC,
    )  # fmt: skip
    cfg = dict(spec.speculative_config or {})
    cfg |= {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": MISTUNED_LENGTH}
    spec = spec.model_copy(update={"speculative_config": cfg})
    try:
        running = vllm_pool.serve([off_spec(vllm_models), spec])
    except VllmServerError as exc:
        # the CPU build: refused at start-up, before any request (see module docstring)
        assert exc.name == "llama-mistuned" and exc.log_path is not None
        log = exc.log_path.read_text(encoding="utf-8", errors="replace")
        assert "Synthetic acceptance not supported with CPU sampling" in log, str(exc)
        append_report(
            "draft-mistuned (rejection_sample_method=synthetic): refused at start-up by this "
            "vLLM build ('Synthetic acceptance not supported with CPU sampling'); no "
            "output-changing speculative setting runs on vLLM's CPU build"
        )
        return
    servers = {"off": running["llama-off"], "draft-mistuned": running["llama-mistuned"]}
    plan = build_plan(MODEL, servers["off"], servers["draft-mistuned"], "draft-mistuned", "draft")
    run = run_pair(plan, servers, tmp_path, "Llama pair: off vs synthetic-acceptance draft")
    check_requests(run, "draft-mistuned")
    matches = check_verdict(run, "draft-mistuned")
    summary = check_counts(run, "draft-mistuned")
    # accepting unverified drafts changes the text: the harness must see it and refuse
    assert not all(matches)
    row = next(r for r in run.result.rows if r.route_label == "draft-mistuned")
    assert row.quality_parity is QualityParity.differs
    texts = measured_texts(run)
    assert texts["draft-mistuned"] != texts["off"]
    # the synthetic sampler reports the acceptance it was told to produce
    assert summary["accepted"] / summary["drafted"] > 0.7
    append_report(
        f"draft-mistuned: parity prompts matching off {matches.count(True)}/{len(matches)}; refused"
    )
