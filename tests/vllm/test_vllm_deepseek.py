"""Real vLLM on the generated DeepSeek-V3-architecture model: ``off`` beside its own MTP.

The model is the less-trained (30-step) one whose servers the divergence-margin test
(``test_vllm_divergence_margin.py``) uses too: the session starts the pair once
(``conftest.deepseek_specs``, ``vllm_pool``). At this test's 48 parity tokens its MTP
route matched ``off`` on every probed prompt (docs/engines.md, "The DeepSeek
divergence"); the verdict is checked against the raw texts either way.

The MTP depth is probed from the checkpoint's ``config.json``
(``num_nextn_predict_layers``), used as ``num_speculative_tokens`` and recorded in the
run's ``run_start`` record. Both servers run ``--enforce-eager`` (the MTP one needs it:
torch.compile's warm-up overflowed the stack) in float32, one sequence at a time, with
``--attention-backend CPU_MLA`` and ``"attention_backend": "CPU_MLA"`` in the MTP
speculative config (on a CPU with AMX, vLLM would otherwise pick AMX_MLA, which refuses
float32 weights; see ``conftest.MLA_ATTENTION_BACKEND``); each server's log must show
CPU_MLA chosen and AMX_MLA never.

Whatever vLLM's CPU MTP path returns is judged as it is: the library's verdict must be
the one the raw streamed texts give (``verified`` only when every parity prompt is
token-for-token off's text; otherwise ``differs``, first divergence shown, no speedup
credited), and a verified but slower route is reported with its speedup below 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deepseekbench import mtp_depth_from_hf_config
from tests.vllm.checks import (
    check_counts,
    check_requests,
    check_verdict,
    report_decomposition,
    row_of,
)
from tests.vllm.conftest import (
    DEEPSEEK_MODEL,
    DEEPSEEK_STEPS,
    MLA_ATTENTION_BACKEND,
    VllmModels,
    deepseek_specs,
)
from tests.vllm.plans import append_report, build_plan, run_pair
from tests.vllm.pool import ServerPool

pytestmark = pytest.mark.vllm


def test_deepseek_mtp_plan(
    deepseek_models: VllmModels, vllm_pool: ServerPool, tmp_path: Path
) -> None:
    depth = mtp_depth_from_hf_config(deepseek_models.deepseek / "config.json")
    assert depth == 1  # the generator writes one MTP layer
    specs = deepseek_specs(deepseek_models.deepseek, depth)
    assert specs[1].speculative_config == {
        "method": "mtp", "num_speculative_tokens": depth,
        "attention_backend": MLA_ATTENTION_BACKEND,
    }  # fmt: skip
    running = vllm_pool.serve(specs)
    servers = {"off": running["ds-off"], "mtp": running["ds-mtp"]}
    plan = build_plan(
        DEEPSEEK_MODEL, servers["off"], servers["mtp"], "mtp", "mtp",
        model_source=deepseek_models.deepseek / "config.json",
    )  # fmt: skip
    title = f"DeepSeek-V3 (generated, {DEEPSEEK_STEPS} steps): off vs MTP (vLLM)"
    run = run_pair(plan, servers, tmp_path, title)

    # vLLM chose the requested MLA backend (vllm/platforms/cpu.py logs "Using <name>
    # backend." once per process), for the target and the drafter alike
    for server in servers.values():
        log = server.log_path.read_text(errors="replace")
        assert f"Using {MLA_ATTENTION_BACKEND} backend" in log, server.log_path
        assert "AMX_MLA" not in log, server.log_path

    # the probed depth is recorded with the run
    (start,) = run.records("run_start")
    cap = start["model_capability"]
    assert cap["format"] == "hf_config" and cap["mtp_depth"] == depth
    assert cap["architecture"] == "deepseek_v3"

    check_requests(run, "mtp")
    matches = check_verdict(run, "mtp")
    summary = check_counts(run, "mtp")
    assert len(summary["acceptance_by_position"]) == depth
    report_decomposition(run, "mtp")
    # the engine's own step count (vllm:iteration_tokens_total): these servers run one
    # sequence at a time (max_num_seqs=1), so the sequences per engine step derived from
    # vLLM's counters can be at most 1 (a prefill-only step counts none)
    for label in ("off", "mtp"):
        row = row_of(run, label)
        append_report(
            f"{label}: engine steps {row.engine_steps}, sequences per step "
            f"{row.engine_batch_mean} ({row.engine_steps_source})"
        )
        assert row.engine_steps is not None and row.engine_steps > 0, label
        assert row.engine_batch_mean is not None, label
        assert 0.5 <= row.engine_batch_mean <= 1.0 + 1e-9, (label, row.engine_batch_mean)
    line = next(ln for ln in run.card.lines if ln.route == "mtp")
    speed = (
        f"speedup {line.verdict.speedup:.2f}x"
        if line.credited and line.verdict and line.verdict.speedup
        else "no speedup credited"
    )
    append_report(
        f"mtp: depth {depth} (config.json num_nextn_predict_layers); parity prompts matching "
        f"off {matches.count(True)}/{len(matches)}; {speed}"
    )
