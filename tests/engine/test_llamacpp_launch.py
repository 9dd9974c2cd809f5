"""Real llama-server routes launched from a plan.

One plan, no server started by hand: ``off`` and a draft-model route whose
``spec_tokens = [2, 4]`` expands into two routes at two ``--spec-draft-n-max`` values
(llama.cpp's ``--draft-max``, renamed in the builds this targets). The run launches
three llama-server processes through ``[routes.launch]``, checks each served depth
against ``/props``, measures, and records each route's exact command line and the
engine's version in the results file and on its rows; every server is gone after.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import orjson
import pytest

from deepseekbench import BenchmarkPlan, LiveGate, RouteIdentity, load_results, run_plan
from tests._helpers import read_records
from tests._procs import running
from tests.engine.gguf_models import EngineModels
from tests.engine.plans import launched_pair_plan

pytestmark = pytest.mark.engine


def _plan(models: EngineModels, results: Path) -> BenchmarkPlan:
    return launched_pair_plan(models, results, spec_tokens=[2, 4], requests_per_cell=5, repeats=1)


def test_a_plan_launches_off_and_a_draft_route_at_two_depths(
    engine_models: EngineModels, tmp_path: Path
) -> None:
    results = tmp_path / "launched.jsonl"
    plan = _plan(engine_models, results)
    assert [r.label for r in plan.routes] == ["off", "draft-k2", "draft-k4"]
    result = anyio.run(lambda: run_plan(plan, gate=LiveGate()))
    rows = {r.route_label: r for r in result.rows}
    versions = set()
    for label, row in rows.items():
        cmd = row.engine_command
        assert cmd is not None and Path(cmd[0]).name == "llama-server", cmd
        assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
        assert cmd[cmd.index("--alias") + 1] == plan.model
        assert row.engine_version is not None and row.engine_version.startswith("llama.cpp ")
        versions.add(row.engine_version)
        assert row.route_identity is not RouteIdentity.refused, row.route_identity_detail
        if label == "off":
            assert "--spec-type" not in cmd and row.spec_config == "{}"
            continue
        assert label is not None
        depth = int(label[-1])
        assert cmd[cmd.index("--spec-draft-n-max") + 1] == str(depth)
        assert cmd[cmd.index("--spec-type") + 1] == "draft-simple"
        assert orjson.loads(row.spec_config or "{}")["spec_tokens"] == depth
        assert row.spec_tokens == depth  # served (/props) = declared
        assert row.draft_tokens  # the route drafted
    assert len(versions) == 1
    start = next(r for r in read_records(results) if r["record"] == "run_start")
    assert {k: tuple(v["command"]) for k, v in start["launched"].items()} == {
        k: r.engine_command for k, r in rows.items()
    }
    assert load_results(results).rows == result.rows
    commands = [r.engine_command for r in rows.values()]
    assert commands  # every server was stopped with the run (no llama-server of ours is left)
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = tuple((d / "cmdline").read_bytes().decode().rstrip("\0").split("\0"))
            except OSError:
                continue
            assert argv not in commands or not running(int(d.name)), f"{argv} outlived the run"
