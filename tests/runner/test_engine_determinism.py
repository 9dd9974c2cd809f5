"""The engine's deterministic mode, per route, read and recorded.

SGLang reports it (``GET /get_server_info`` ``enable_deterministic_inference``); other
engines take the plan's ``[[routes]] deterministic``. Against the embedded engine on
127.0.0.1 speaking SGLang's dialect, whose ``/get_server_info`` reports the flag as
configured (or leaves it out, as SGLang releases before the flag did).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from deepseekbench import (
    BenchmarkPlan,
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    LiveGate,
    RoutePlan,
    RunResult,
    Scorecard,
    Speculative,
    dialect_for,
    load_results,
    run_plan,
)
from deepseekbench._analysis._determinism_rows import determinism_fields, determinism_note
from deepseekbench._execute._served_config import engine_determinism
from deepseekbench._net._route_plan import engine_route
from deepseekbench._types._determinism import DeterminismSource, EngineDeterminism
from tests._helpers import COSTS, plan_of, read_records

SERVER_DETAIL = "sglang /get_server_info enable_deterministic_inference"


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({"enable_deterministic_inference": True}, True),
        ({"enable_deterministic_inference": False}, False),
        ({"speculative_num_steps": 3}, None),  # a release before the flag
        ({"enable_deterministic_inference": "true"}, None),  # not a boolean: no guess
        ([], None),
    ],
)
def test_sglang_reads_enable_deterministic_inference(info: Any, expected: bool | None) -> None:
    assert dialect_for(Dialect.sglang).deterministic_from_info(info) is expected
    assert dialect_for(Dialect.vllm).deterministic_from_info(info) is None


def route(label: str, url: str, dialect: Dialect, deterministic: bool | None = None) -> RoutePlan:
    return RoutePlan(
        label=label,
        speculative=Speculative.off,
        base_url=url,
        dialect=dialect,
        deterministic=deterministic,
    )


@pytest.mark.anyio
async def test_server_then_plan_then_unknown() -> None:
    on = EngineConfig(cost=COSTS, dialect=Dialect.sglang, deterministic_inference=True)
    off = on.model_copy(update={"deterministic_inference": False})
    silent = on.model_copy(update={"deterministic_inference": None})
    gate = LiveGate()
    async with (
        EmbeddedEngine(on) as e_on,
        EmbeddedEngine(off) as e_off,
        EmbeddedEngine(silent) as e_silent,
        gate.client() as client,
    ):
        plans = [
            route("on", e_on.base_url, Dialect.sglang),
            # the server's word wins over the plan's declaration
            route("off", e_off.base_url, Dialect.sglang, deterministic=True),
            route("silent", e_silent.base_url, Dialect.sglang, deterministic=True),
            route("vllm", e_silent.base_url, Dialect.vllm, deterministic=False),
            route("none", e_silent.base_url, Dialect.vllm),
        ]
        routes = {rp.label: engine_route(rp, "deepseekbench-ref") for rp in plans}
        modes = await engine_determinism(plans, routes, gate=gate, client=client)
    server = DeterminismSource.server
    assert modes["on"] == EngineDeterminism(deterministic=True, source=server, detail=SERVER_DETAIL)
    assert modes["off"].deterministic is False and modes["off"].source is server
    assert modes["silent"].deterministic is True
    assert modes["silent"].source is DeterminismSource.plan
    assert modes["vllm"].deterministic is False
    assert modes["vllm"].source is DeterminismSource.plan
    assert modes["none"] == EngineDeterminism()
    assert modes["none"].describe() == "unknown"
    assert modes["on"].describe() == f"on (server: {SERVER_DETAIL})"


@pytest.mark.anyio
async def test_a_server_that_does_not_answer_leaves_it_to_the_plan() -> None:
    gate = LiveGate()
    async with gate.client() as client:
        # nothing listens on port 9 of loopback (discard): a connection error, no crash
        rp = route("dead", "http://127.0.0.1:9/v1", Dialect.sglang, deterministic=False)
        modes = await engine_determinism(
            [rp], {"dead": engine_route(rp, "m")}, gate=gate, client=client
        )
    assert modes["dead"].deterministic is False
    assert modes["dead"].source is DeterminismSource.plan


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_declaration_is_not_hashed_and_is_left_out_when_unset() -> None:
    base: dict[str, Any] = {"requests_per_cell": 2, "parity": {"prompts": ["p"]}}
    routes = [("off", "off", "http://127.0.0.1:1/v1"), ("mtp", "mtp", "http://127.0.0.1:2/v1")]
    plain = plan_of(routes, base, {})
    data = plain.model_dump(mode="json")
    assert all("deterministic" not in r for r in data["routes"])
    data["routes"][0]["deterministic"] = True
    declared = BenchmarkPlan.model_validate(data)
    assert declared.routes[0].deterministic is True
    assert declared.plan_hash() == plain.plan_hash()


def test_the_note_names_both_sides_when_they_differ() -> None:
    on = EngineDeterminism(deterministic=True, source=DeterminismSource.plan)
    modes = {"off": on, "mtp": EngineDeterminism()}
    assert determinism_note(modes, "mtp", "off") == (
        "engine deterministic mode: unknown; off: on (plan)"
    )
    assert determinism_note({"off": on, "mtp": on}, "mtp", "off") == (
        "engine deterministic mode: on (plan)"
    )
    fields = determinism_fields(modes, "off", "off", {"divergence_note": None})
    assert fields == {
        "divergence_note": None,
        "engine_deterministic": True,
        "engine_deterministic_source": "plan",
    }


def run(tmp_path: Path) -> RunResult:
    """off (deterministic mode on, as SGLang reports it) and a mis-tuned mtp (mode off)
    on SGLang-dialect engines; a vLLM-dialect ngram route declared on."""
    off_cfg = EngineConfig(cost=COSTS, dialect=Dialect.sglang, deterministic_inference=True)
    mtp_cfg = off_cfg.model_copy(
        update={
            "speculative": Speculative.mtp,
            "draft_depth": 3,
            "deterministic_inference": False,
            "mistuned_draft": True,  # diverges: the row gets a parity note
        }
    )
    ngram_cfg = EngineConfig(cost=COSTS, speculative=Speculative.ngram)

    async def main() -> RunResult:
        async with (
            EmbeddedEngine(off_cfg) as off,
            EmbeddedEngine(mtp_cfg) as mtp,
            EmbeddedEngine(ngram_cfg) as ngram,
        ):
            plan = plan_of(
                [
                    ("off", "off", off.base_url, Dialect.sglang),
                    ("mtp", "mtp", mtp.base_url, Dialect.sglang),
                    ("ngram", "ngram", ngram.base_url, Dialect.vllm),
                ],
                {
                    "requests_per_cell": 8,
                    "warmup_per_cell": 0,
                    "arrival": {"mode": "concurrency", "concurrency": 4},
                    "parity": {"concurrency": 8, "max_tokens": 64},
                },
                {},
            )
            data = plan.model_dump(mode="json")
            data["routes"][2]["deterministic"] = True
            plan = BenchmarkPlan.model_validate(data)
            gate = LiveGate()
            return await run_plan(plan, gate=gate, results_path=tmp_path / "r.jsonl")

    return anyio.run(main)


def test_run_records_the_modes_and_the_scorecard_shows_them(tmp_path: Path) -> None:
    result = run(tmp_path)
    recs = [r for r in read_records(tmp_path / "r.jsonl") if r["record"] == "engine_determinism"]
    got = {r["route"]: r["determinism"] for r in recs}
    assert got["off"] == {"deterministic": True, "source": "server", "detail": SERVER_DETAIL}
    assert got["mtp"]["deterministic"] is False and got["mtp"]["source"] == "server"
    assert got["ngram"] == {
        "deterministic": True,
        "source": "plan",
        "detail": "[[routes]] deterministic",
    }
    rows = {r.route_label: r for r in result.rows}
    assert (rows["off"].engine_deterministic, rows["off"].engine_deterministic_source) == (
        True,
        "server",
    )
    assert rows["mtp"].engine_deterministic is False
    assert rows["ngram"].engine_deterministic is True
    assert rows["ngram"].engine_deterministic_source == "plan"
    note = rows["mtp"].divergence_note
    assert note is not None and note.startswith("decisive divergence"), note
    expected = f"engine deterministic mode: off (server: {SERVER_DETAIL}); off: on (server:"
    assert expected in note
    text = Scorecard.from_run(result).to_text()
    assert "engine deterministic mode: off" in text
    # read back from the file alone, the same
    again = load_results(tmp_path / "r.jsonl")
    assert {r.route_label: r.engine_deterministic for r in again.rows} == {
        "off": True,
        "mtp": False,
        "ngram": True,
    }


def test_an_old_results_file_reads_as_unknown(tmp_path: Path) -> None:
    fixture = Path(__file__).parent.parent / "data" / "results_v0"
    for name in ("tasks.jsonl", "data.jsonl"):
        shutil.copy(fixture / name, tmp_path / name)
    text = (fixture / "results.jsonl").read_text(encoding="utf-8")
    path = tmp_path / "results.jsonl"
    path.write_text(text.replace("/tmp/dsb-fixture-v0", str(tmp_path)), encoding="utf-8")
    old = load_results(path)
    assert old.rows and all(r.engine_deterministic is None for r in old.rows)
    assert all(r.engine_deterministic_source is None for r in old.rows)
