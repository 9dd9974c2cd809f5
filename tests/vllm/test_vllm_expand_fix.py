"""The DeepSeek MTP route at T=0.8 on a vLLM server with the CPU expand fix.

``test_vllm_deepseek_witness.py`` finds vLLM 0.32's CPU MTP route ``differs`` from
``off`` at temperature 0.8 (a sharper law, T≈0.59). The cause is a vLLM bug
(:data:`tests.vllm.expand_fix.BUG`): the CPU build's ``expand_kernel`` override
(``vllm/utils/cpu_triton_utils.py`` ``_expand_kernel_impl``) never writes its float32
output, so the verify pass divides the target logits by uninitialised memory. This
test serves the same MTP configuration with :mod:`tests.vllm.expand_fix` loaded into
the server's interpreters (a ``sitecustomize.py`` first on its ``PYTHONPATH``; the
fix only, nothing else changed) beside the session's ``ds-off`` server, runs the same
sampled plan (40 prompts once each, natural length) and requires the witness to say
``verified``, with its tokens tested and power printed: the route is lossless once
the temperature reaches the verify pass. The file sorts after every test that serves
the unpatched ``ds-mtp`` (its server is stopped here to make room), so the pool
starts no configuration twice. Measured 2026-12-03 (vLLM 0.32.0 CPU): with the fix
``verified``, 1,656 tokens tested, p 1.0, power 0.9 against a PIT-CDF distance of
0.069, tokens fit T≈0.81 [0.78, 0.84]; unfixed ``differs``, 979 tokens, p 7e-33,
T≈0.64 [0.61, 0.67] (docs/engines.md).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from deepseekbench import QualityParity, find_vllm_python
from tests.vllm import expand_fix
from tests.vllm.conftest import DEEPSEEK_MODEL, VllmModels, deepseek_specs
from tests.vllm.plans import append_report, build_plan, run_pair
from tests.vllm.pool import ServerPool
from tests.vllm.test_vllm_deepseek_witness import TEMPERATURE, check_witness, sampled

pytestmark = pytest.mark.vllm


# vLLM's own call path: the platform registers its overrides, then the rejection
# sampler's expand_batch_to_tokens runs on float32 (the per-token temperature) and int32
_PROBE = """
import json
from vllm.platforms import current_platform
current_platform.register_triton_kernel_overrides()
import torch
from vllm.v1.sample import rejection_sampler as rs
cu = torch.tensor([2, 3, 6], dtype=torch.int32)
out = {}
f32, i32 = torch.tensor([0.8, 0.0, 1.3]), torch.tensor([7, 0, 9], dtype=torch.int32)
for name, x in (("float32", f32), ("int32", i32)):
    got = rs.expand_batch_to_tokens(x, cu, 6, replace_from=0, replace_to=1)
    out[name] = [str(got.dtype), got.tolist()]
print(json.dumps(out))
"""


def _expand(*, fixed: bool) -> dict[str, list[object]]:
    env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_NO_USAGE_STATS="1", HF_HUB_OFFLINE="1")
    if fixed:
        env["PYTHONPATH"] = os.fspath(expand_fix.sitecustomize_dir())
    else:
        env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [os.fspath(find_vllm_python()), "-c", _PROBE],
        env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    assert (expand_fix.MARK in done.stderr) is fixed, done.stderr[-2000:]
    result: dict[str, list[object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_expand_fix_writes_the_float32_temperatures() -> None:
    """In vLLM's own interpreter, through the ``sitecustomize.py`` the server gets:
    ``expand_batch_to_tokens`` returns the per-token temperatures (float32, 0 replaced
    by 1) and int32 values; without the fix, what it returns is printed (the bug)."""
    bare = _expand(fixed=False)
    append_report(f"expand_batch_to_tokens without the fix: {bare}")
    got = _expand(fixed=True)
    append_report(f"expand_batch_to_tokens with the fix: {got}")
    assert got["int32"] == ["torch.int32", [7, 7, 1, 9, 9, 9]]
    dtype, values = got["float32"]
    assert dtype == "torch.float32"
    assert values == pytest.approx([0.8, 0.8, 1.0, 1.3, 1.3, 1.3])


def test_deepseek_mtp_with_the_expand_fix_is_verified(
    deepseek_models: VllmModels, vllm_pool: ServerPool, tmp_path: Path
) -> None:
    off, mtp = deepseek_specs(deepseek_models.deepseek, depth=1)
    fixed = mtp.model_copy(update={"name": "ds-mtp-expand-fix"})
    path = os.pathsep.join(
        p for p in (os.fspath(expand_fix.sitecustomize_dir()), os.environ.get("PYTHONPATH")) if p
    )
    running = vllm_pool.serve([off, fixed], env={fixed.name: {"PYTHONPATH": path}})
    servers = {"off": running[off.name], "mtp": running[fixed.name]}
    log = servers["mtp"].log_path.read_text(errors="replace")
    assert expand_fix.MARK in log, "the fix did not load in the MTP server"
    plan = sampled(build_plan(DEEPSEEK_MODEL, servers["off"], servers["mtp"], "mtp", "mtp"))
    title = f"DeepSeek-V3 MTP at T={TEMPERATURE} with the CPU expand fix (vLLM)"
    run = run_pair(plan, servers, tmp_path, title)
    check_witness(run, "mtp")
    row = next(r for r in run.result.rows if r.route_label == "mtp")
    append_report(
        f"witness mtp with the expand fix: {row.quality_parity.value}, "
        f"{row.witness_tokens_tested} tokens tested, p={row.witness_p_value}, power "
        f"{row.witness_power} against a PIT-CDF distance of {row.witness_detectable_distance}"
    )
    assert row.quality_parity is QualityParity.verified, row.parity_detail
