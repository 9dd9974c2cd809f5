"""The declared speculative depth against what the server says."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deepseekbench import (
    Dialect,
    EngineRoute,
    LiveGate,
    LiveGateError,
    PlanError,
    RoutePlan,
    Speculative,
)
from deepseekbench._execute._served_config import (
    check_spec_config,
    served_spec_tokens,
    spec_tokens_from_info,
)
from deepseekbench._net._route_plan import engine_route
from tests._replay import RecordedRequest, Script, Write, replay_server

PROPS = {"default_generation_settings": {"params": {"speculative.n_max": 4, "n_predict": -1}}}
SGLANG = {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "tp_size": 1}


@pytest.mark.parametrize(
    ("dialect", "info", "want"),
    [
        (Dialect.llamacpp, PROPS, 4),
        (Dialect.llamacpp, {"default_generation_settings": {"params": {}}}, None),
        (
            Dialect.llamacpp,
            {
                "default_generation_settings": {
                    "params": {"speculative.types": "none", "speculative.n_max": 16}
                }
            },
            None,
        ),
        (Dialect.llamacpp, {"default_generation_settings": None}, None),
        (Dialect.sglang, SGLANG, 3),
        (Dialect.sglang, {**SGLANG, "speculative_algorithm": None}, None),
        (Dialect.sglang, {**SGLANG, "speculative_num_steps": 0}, None),
        (Dialect.sglang, {**SGLANG, "speculative_num_steps": True}, None),
        (Dialect.vllm, SGLANG, None),
        (Dialect.sglang, ["not", "a", "mapping"], None),
    ],
)
def test_depth_from_server_info(dialect: Dialect, info: Any, want: int | None) -> None:
    assert spec_tokens_from_info(dialect, info) == want


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _serve(paths: dict[str, Any]) -> Any:
    def answer(request: RecordedRequest) -> Script:
        if request.path not in paths:
            return Script(status=404, headers={"content-type": "text/plain"})
        body = json.dumps(paths[request.path]).encode()
        return Script(headers={"content-type": "application/json"}, writes=(Write(0, body),))

    return answer


def _plan(label: str, base_url: str, dialect: str, spec_tokens: int | None) -> RoutePlan:
    return RoutePlan(
        label=label,
        speculative=Speculative.mtp,
        base_url=base_url,
        dialect=Dialect(dialect),
        spec_tokens=spec_tokens,
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("dialect", "paths", "declared", "refused"),
    [
        ("llamacpp", {"/props": PROPS}, 4, False),
        ("llamacpp", {"/props": PROPS}, 3, True),
        ("sglang", {"/get_server_info": SGLANG}, 3, False),
        ("sglang", {"/get_server_info": SGLANG}, 2, True),
        ("sglang", {}, 2, False),  # the server does not say: nothing to contradict
        ("sglang", {"/server_info": SGLANG}, 2, True),  # the newer name, after a 404
        ("llamacpp", {"/props": PROPS}, None, False),  # nothing declared: asked, recorded
        ("sglang", {"/get_server_info": SGLANG}, None, False),
    ],
)
async def test_a_contradicted_declaration_stops_the_run(
    dialect: str, paths: dict[str, Any], declared: int | None, refused: bool
) -> None:
    gate = LiveGate()
    async with replay_server(_serve(paths)) as server, gate.client() as client:
        rp = _plan("spec", server.base_url, dialect, declared)
        routes = {"spec": engine_route(rp, "m")}
        if refused:
            with pytest.raises(PlanError, match=f"spec_tokens={declared}"):
                await check_spec_config([rp], routes, gate=gate, client=client)
        else:
            found = await check_spec_config([rp], routes, gate=gate, client=client)
            served = next(iter(paths.values()), None)
            want = spec_tokens_from_info(Dialect(dialect), served) if served else None
            assert found == ({"spec": want} if want else {})
            assert routes["spec"].served_spec_tokens == want  # what measurements carry
        asked = [r.path for r in server.requests]
        if dialect == "llamacpp":
            assert asked == ["/props"]
        else:
            assert asked[0] == "/get_server_info" and len(asked) == (
                1 if paths.get(asked[0]) else 2
            )


@pytest.mark.anyio
async def test_the_config_request_passes_the_gate() -> None:
    route = EngineRoute(base_url="http://10.1.2.3:8000/v1", model="m", dialect=Dialect.sglang)
    gate = LiveGate()
    async with gate.client() as client:
        with pytest.raises(LiveGateError):
            await served_spec_tokens(route, gate=gate, client=client)


def test_an_unset_depth_keeps_old_plan_hashes() -> None:
    rp = RoutePlan(label="a", speculative=Speculative.mtp, base_url="http://127.0.0.1:1/v1")
    assert "spec_tokens" not in rp.model_dump(mode="json")
    with_depth = rp.model_copy(update={"spec_tokens": 3})
    assert with_depth.model_dump(mode="json")["spec_tokens"] == 3
    with pytest.raises(ValueError):
        RoutePlan(
            label="a", speculative=Speculative.mtp, base_url="http://127.0.0.1:1/v1", spec_tokens=0
        )
