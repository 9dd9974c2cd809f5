"""``compare``: one results file, two llama.cpp runs, one engine flag changed between them.

The plan launches ``off`` and a draft-model route from ``[routes.launch]``; the second
run is the same plan with the draft route's ``--ctx-size`` raised, written to the same
results file (it then holds two runs). ``compare --run-a --run-b`` on that file names
the flag (with both values) as the one recorded difference, and only that flag: the
ports each launch got, the plan key behind the flag and the results path are not
factors.
"""

from __future__ import annotations

import io
from pathlib import Path

import anyio
import pytest

from deepseekbench import BenchmarkPlan, LiveGate, compare_runs, list_runs, load_results, run_plan
from deepseekbench._cli._main import main
from tests.engine.gguf_models import EngineModels
from tests.engine.plans import launched_pair_plan

pytestmark = pytest.mark.engine


def _plan(models: EngineModels, results: Path, draft_ctx: int) -> BenchmarkPlan:
    return launched_pair_plan(
        models, results, spec_tokens=2, requests_per_cell=6, repeats=2, draft_ctx=draft_ctx
    )


def test_an_engine_flag_change_is_named_in_the_attribution(
    engine_models: EngineModels, tmp_path: Path
) -> None:
    results = tmp_path / "runs.jsonl"
    first = _plan(engine_models, results, 1024)
    second = _plan(engine_models, results, 2048)
    anyio.run(lambda: run_plan(first, gate=LiveGate()))
    anyio.run(lambda: run_plan(second, gate=LiveGate()))
    runs = list_runs(results)
    assert [r.plan_hash for r in runs] == [first.plan_hash(), second.plan_hash()]
    a = load_results(results, plan_hash=runs[0].plan_hash)
    b = load_results(results, plan_hash=runs[1].plan_hash)
    cmp = compare_runs(a, b)
    assert [(f.kind, f.name, f.route, f.a, f.b) for f in cmp.factors] == [
        ("launch flag", "--ctx-size", "draft", "1024", "2048")
    ]
    assert {ln.route for ln in cmp.lines} == {"off", "draft"}
    assert not cmp.only_in_a and not cmp.only_in_b
    assert "launch flag --ctx-size (draft): 1024 → 2048" in cmp.summary
    assert "speculative config unchanged" not in cmp.summary  # it holds --ctx-size too
    from deepseekbench._report._compare import render_comparison

    print(render_comparison(cmp))  # the step's log shows what else the flag moved, if anything
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["compare", str(results), str(results), "--run-a", runs[0].plan_hash, "--run-b",
         runs[1].plan_hash, "--format", "markdown", "--fail-on-regression", "1000%"],
        stdout=out,
        stderr=err,
    )  # fmt: skip
    assert "launch flag --ctx-size (draft): 1024 → 2048" in out.getvalue(), err.getvalue()
    assert code in (0, 4)  # 4 only for a parity loss: no speed change is 10x
