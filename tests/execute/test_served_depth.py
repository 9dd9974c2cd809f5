"""The draft depth a server says it serves is recorded, also where the plan declares none
(the served-depth probe): on the route, in every measurement, in the results file and in the rows.

Against the embedded engine over loopback, which serves llama.cpp's ``/props`` and
SGLang's ``/get_server_info`` when it speaks those dialects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from deepseekbench import (
    BenchmarkPlan,
    CostModel,
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    EngineRoute,
    LiveGate,
    RoutePlan,
    Speculative,
    measure_streamed,
    run_plan,
)
from deepseekbench._execute._served_config import check_spec_config
from deepseekbench._net._route_plan import engine_route

COSTS = CostModel(target_step_ms=2.0, verify_token_ms=0.1, draft_step_ms=0.15)
REQ = {"messages": [{"role": "user", "content": "2+2="}], "max_tokens": 8}


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.anyio
@pytest.mark.parametrize("dialect", [Dialect.llamacpp, Dialect.sglang])
@pytest.mark.parametrize(("speculative", "depth"), [(Speculative.mtp, 3), (Speculative.ngram, 5)])
async def test_an_undeclared_depth_is_read_and_carried_by_each_measurement(
    dialect: Dialect, speculative: Speculative, depth: int
) -> None:
    config = EngineConfig(speculative=speculative, draft_depth=depth, dialect=dialect, cost=COSTS)
    gate = LiveGate()
    async with EmbeddedEngine(config) as engine, gate.client() as client:
        rp = RoutePlan(
            label="spec", speculative=speculative, base_url=engine.base_url, dialect=dialect
        )
        routes = {"spec": engine_route(rp, config.model_name)}
        assert await check_spec_config([rp], routes, gate=gate, client=client) == {"spec": depth}
        assert routes["spec"].served_spec_tokens == depth
        m = await measure_streamed(REQ, route=routes["spec"], gate=gate, client=client)
    assert m.error is None and m.spec_tokens == depth


@pytest.mark.anyio
@pytest.mark.parametrize("dialect", [Dialect.llamacpp, Dialect.sglang])
async def test_a_server_without_speculation_gives_no_depth(dialect: Dialect) -> None:
    config = EngineConfig(dialect=dialect, cost=COSTS)  # speculative off
    gate = LiveGate()
    async with EmbeddedEngine(config) as engine, gate.client() as client:
        rp = RoutePlan(
            label="spec", speculative=Speculative.mtp, base_url=engine.base_url, dialect=dialect
        )
        routes = {"spec": engine_route(rp, config.model_name)}
        assert await check_spec_config([rp], routes, gate=gate, client=client) == {}
        assert routes["spec"].served_spec_tokens is None
        m = await measure_streamed(REQ, route=routes["spec"], gate=gate, client=client)
    assert m.error is None and m.spec_tokens is None


@pytest.mark.anyio
async def test_a_per_request_depth_wins_over_the_served_one() -> None:
    """vLLM reports the depth per request (``num_spec_tokens``): that is what ran."""
    config = EngineConfig(speculative=Speculative.mtp, draft_depth=2, cost=COSTS)
    gate = LiveGate()
    async with EmbeddedEngine(config) as engine, gate.client() as client:
        route = EngineRoute(
            base_url=engine.base_url,
            model=config.model_name,
            dialect=Dialect.vllm,
            speculative=Speculative.mtp,
            served_spec_tokens=7,
        )
        m = await measure_streamed(REQ, route=route, gate=gate, client=client)
    assert m.error is None and m.spec_tokens == 2


def test_a_run_records_the_served_depth_in_results_and_rows(tmp_path: Path) -> None:
    results = tmp_path / "run.jsonl"

    async def main() -> Any:
        async with (
            EmbeddedEngine(EngineConfig(cost=COSTS)) as off,
            EmbeddedEngine(
                EngineConfig(
                    speculative=Speculative.mtp,
                    draft_depth=4,
                    dialect=Dialect.llamacpp,
                    cost=COSTS,
                )
            ) as spec,
        ):
            plan = BenchmarkPlan.model_validate(
                {
                    "model": "deepseekbench-ref",
                    "routes": [
                        {"label": "off", "speculative": "off", "base_url": off.base_url},
                        {
                            "label": "mtp",
                            "speculative": "mtp",
                            "base_url": spec.base_url,
                            "dialect": "llamacpp",
                        },
                    ],
                    "requests_per_cell": 3,
                    "warmup_per_cell": 0,
                    "arrival": {"mode": "concurrency", "concurrency": 2},
                    "parity": {"concurrency": 8, "max_tokens": 32},
                }
            )
            assert plan.routes[1].spec_tokens is None  # nothing declared
            return await run_plan(plan, gate=LiveGate(), results_path=results)

    result = anyio.run(main)
    rows = {r.route_label: r for r in result.rows}
    assert rows["mtp"].spec_tokens == 4 and rows["off"].spec_tokens is None
    records = [orjson.loads(line) for line in results.read_bytes().splitlines() if line.strip()]
    measured = [r for r in records if r["record"] == "measurement"]
    depths = {r["route"]: r["measurement"]["spec_tokens"] for r in measured}
    assert depths == {"off": None, "mtp": 4}
    file_rows = {r["row"]["route_label"]: r["row"] for r in records if r["record"] == "row"}
    assert file_rows["mtp"]["spec_tokens"] == 4
