"""Issue 21 on real vLLM (CPU): the probe's known DeepSeek MTP divergence, through run_plan.

The less-trained (30-step) generated DeepSeek-V3 model of ``divergence_probe.py``
(docs/engines.md, "The DeepSeek divergence") diverges under MTP on the 16th of
``prompt_words(0, 16)`` (the probe's 0-based prompt 15; parity id ``prompt-16``) at
output token 46 (float32, one sequence at a time, 256 tokens). The probe, run on that
configuration, measured ``off``'s top-1 minus top-2 margin there at
:data:`PROBE_MARGIN_NATS`, with MTP's token ``off``'s runner-up. The forensics step
(``run_plan``, ``parity.exact = "within_noise"``) must classify it ``near_tie`` with a
margin within 0.005 nats of that figure; the bit-exact comparison still counts it
(1 of 16 prompts), while ``within_noise`` verifies the row. The speed verdict is held
against vLLM's own clock as in every vLLM test (``checks.check_clocks``).

Cost (the 2-core CI machine shared with other work, load 9-15): 400-530 s, of which
181-264 s for the two server start-ups and 216-254 s for ``run_plan`` (16 greedy
256-token parity prompts per route, ``off`` twice, a calibration pass, plus 2 x 9
measured requests); part of ``.ci/vllm.sh``, whose warm total was then 1348 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deepseekbench._types._axes import QualityParity
from tests.vllm import hf_models
from tests.vllm.checks import check_clocks
from tests.vllm.conftest import (
    MLA_ATTENTION_BACKEND,
    SEED,
    ensure_models,
    server_spec,
    serving,
    vllm_cache_dir,
)
from tests.vllm.plans import MODE, append_report, build_plan, run_pair

pytestmark = pytest.mark.vllm

MODEL = "deepseekbench-deepseek-v3-30steps"
# divergence_probe.py --dtype float32 --max-num-seqs 1 --max-tokens 256 --prompts 16
# (method mtp) on the 30-step model: prompt 15, first differing token 46, off's margin
PROBE_TOKEN = 46
PROBE_MARGIN_NATS = 0.01443  # 19:29 UTC 2026-12-01, vLLM 0.32.0 CPU (no AMX)
MARGIN_TOLERANCE_NATS = 0.005  # issue 21's "within 0.005 nats of the probe's figure"
PROMPTS = hf_models.prompt_words(SEED, 16)


def test_known_deepseek_mtp_divergence_is_a_near_tie(tmp_path: Path) -> None:
    models = ensure_models(vllm_cache_dir(), steps=30)
    common = {
        "served_model_name": MODEL,
        "enforce_eager": True,
        "attention_backend": MLA_ATTENTION_BACKEND,
        "max_num_seqs": 1,
    }
    specs = [
        server_spec("off", "ds-off", models.deepseek, **common),
        server_spec(
            "mtp", "ds-mtp", models.deepseek, num_speculative_tokens=1,
            draft_attention_backend=MLA_ATTENTION_BACKEND, **common,
        ),
    ]  # fmt: skip
    with serving(specs, tmp_path / "logs") as running:
        servers = {"off": running["ds-off"], "mtp": running["ds-mtp"]}
        plan = build_plan(MODEL, servers["off"], servers["mtp"], "mtp", "mtp")
        data = plan.model_dump(mode="json")
        data["parity"] |= {"prompts": list(PROMPTS), "max_tokens": 256, "exact": "within_noise"}
        plan = type(plan).model_validate(data)
        run = run_pair(plan, servers, tmp_path, "DeepSeek-V3 (30 steps): margins (vLLM)")

    margins = {
        r["prompt_id"]: r["margin"]
        for r in run.records("divergence_margin")
        if r["route"] == "mtp" and r["source"] == "parity"
    }
    m = margins["prompt-16"]
    seen = sorted(
        (k, v["token_index"], v["kind"], round(v["margin_nats"], 5)) for k, v in margins.items()
    )
    append_report(
        f"mtp divergence margins (prompt, token, kind, nats): {seen}; probe: prompt-16 "
        f"token {PROBE_TOKEN}, {PROBE_MARGIN_NATS} nats"
    )
    assert m["kind"] == "near_tie", m
    assert abs(m["margin_nats"] - PROBE_MARGIN_NATS) <= MARGIN_TOLERANCE_NATS, m
    assert m["token_index"] == PROBE_TOKEN, m
    assert m["candidate_rank"] == 2, m  # MTP emitted off's runner-up
    assert all(v["kind"] == "near_tie" for v in margins.values()), margins
    # the bit-exact comparison sees the divergence; within_noise explains it
    exact = run.result.parity[("mtp", MODE)].exact
    assert exact is not None
    assert [p.match for p in exact.prompts].count(False) == 1, exact
    assert exact.n_diverged == 1
    row = next(r for r in run.result.rows if r.route_label == "mtp")
    assert row.parity_basis == "within_noise"
    assert (row.divergences_near_tie, row.divergences_decisive) == (1, 0), row
    assert row.divergences_unexplained == 0, row
    assert row.quality_parity is QualityParity.verified, row.parity_detail
    check_clocks(run, "mtp")
