"""Adding an engine touches one module: a toy dialect defined and registered here only.

``ToyDialect`` speaks a wire format no built-in engine uses (its own reasoning,
EOS and reporting fields, acceptance in ``toy_spec``, times in ``toy_times``,
``toy:*`` Prometheus counters, ``/toy_info`` for the served depth, its own
tokenize body). Registered under a new name it is found by the registry and
its counters are read from ``/metrics``; registered in place of a route's
dialect it carries a whole measurement, every stage asking it and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import orjson
import pytest

from deepseekbench import (
    AcceptanceRecord,
    AcceptanceScope,
    ChatRequest,
    CounterSet,
    Dialect,
    EndpointTokenCounter,
    EngineDialect,
    EngineRoute,
    LiveGate,
    PlanError,
    ReasoningMode,
    dialect_for,
    measure_streamed,
    metrics_delta,
    parse_metrics,
    read_acceptance,
    register_dialect,
    unregister_dialect,
)
from deepseekbench._dialects import all_dialects, can_ignore_eos
from deepseekbench._execute._served_config import served_spec_tokens
from deepseekbench._net._probe import probe_route
from tests._replay import Script, Write, replay_server


class ToyDialect(EngineDialect):
    """A made-up engine: every per-engine answer differs from the built-in ones."""

    name: ClassVar[str] = "toy"
    continuous_usage: ClassVar[bool] = True
    spec_keys: ClassVar[frozenset[str]] = frozenset({"toy_spec", "toy_times"})
    counter_sets: ClassVar[tuple[CounterSet, ...]] = (
        CounterSet(
            source="prometheus:toy:*",
            drafts="toy:verify_steps",
            draft_tokens="toy:drafted",
            accepted="toy:accepted",
            per_position="toy:accepted_per_pos",
        ),
    )
    depth_paths: ClassVar[tuple[str, ...]] = ("/toy_info",)

    def reasoning_controls(self, mode: ReasoningMode) -> dict[str, Any]:
        return {"toy_think": mode.value}

    def eos_controls(self, max_tokens: int | None) -> dict[str, Any]:
        return {"toy_min_tokens": max_tokens}

    def report_extras(self) -> dict[str, Any]:
        return {"toy_report": True}

    def read_acceptance(self, chunk: Mapping[str, Any]) -> AcceptanceRecord | None:
        spec = chunk.get("toy_spec")
        if not isinstance(spec, Mapping):
            return None
        return AcceptanceRecord.from_counts(
            engine=self.engine,
            source="toy_spec",
            draft_tokens=spec.get("drafted"),
            accepted_tokens=spec.get("accepted"),
            verify_steps=spec.get("steps"),
        )

    def server_times(self, chunk: Mapping[str, Any]) -> Mapping[str, Any] | None:
        t = chunk.get("toy_times")
        return {"server_ttft_ms": t.get("ttft")} if isinstance(t, Mapping) else None

    def spec_tokens_from_info(self, info: Any) -> int | None:
        return info.get("toy_depth") if isinstance(info, Mapping) else None

    def tokenize_body(self, model: str, text: str) -> dict[str, Any]:
        return {"toy_text": text}

    def answers_any_model(self, models: Any) -> bool:
        return True


class ToyAsOpenai(ToyDialect):
    """The toy registered in place of a dialect a route can name."""

    name: ClassVar[str] = "openai"


@pytest.fixture
def toy() -> Iterator[EngineDialect]:
    adapter = ToyDialect()
    register_dialect(adapter)
    try:
        yield adapter
    finally:
        unregister_dialect("toy")


@pytest.fixture
def toy_route_dialect() -> Iterator[Dialect]:
    old = register_dialect(ToyAsOpenai(), replace=True)
    try:
        yield Dialect.openai
    finally:
        assert old is not None
        register_dialect(old, replace=True)


def _json(body: Any) -> Script:
    data = orjson.dumps(body)
    return Script(headers={"content-type": "application/json"}, writes=(Write(0.0, data),))


def _sse(*objs: dict[str, Any]) -> Script:
    frames = ["data: " + orjson.dumps(o).decode() + "\n\n" for o in objs] + ["data: [DONE]\n\n"]
    return Script.sse(frames)


def test_a_new_name_is_found_and_its_counters_are_read(toy: EngineDialect) -> None:
    assert dialect_for("toy") is toy and toy in all_dialects()
    record = read_acceptance({"toy_spec": {"drafted": 8, "accepted": 6, "steps": 4}}, "toy")
    assert record is not None and record.accepted_token_ratio == 0.75
    assert record.acceptance_length == 2.5 and record.engine is Dialect.auto
    before = parse_metrics("toy:verify_steps 10\ntoy:drafted 30\ntoy:accepted 15\n")
    after = parse_metrics("toy:verify_steps 20\ntoy:drafted 60\ntoy:accepted 33\n")
    delta = metrics_delta(before, after)
    assert delta is not None and delta.source == "prometheus:toy:*"
    assert (delta.draft_tokens, delta.accepted_tokens, delta.verify_steps) == (30, 18, 10)
    assert delta.scope is AcceptanceScope.server_wide


def test_registry_refuses_a_taken_name_and_bad_names(toy: EngineDialect) -> None:
    with pytest.raises(PlanError, match="already registered"):
        register_dialect(ToyDialect())
    with pytest.raises(PlanError, match="already registered"):
        register_dialect(ToyAsOpenai())  # a built-in name, found by module
    with pytest.raises(PlanError, match="no engine dialect 'nosuch'"):
        dialect_for("nosuch")
    with pytest.raises(PlanError, match="not an EngineDialect"):
        register_dialect(object())  # type: ignore[arg-type]


def test_unregistered_toy_counters_are_not_read() -> None:
    text = "toy:verify_steps 10\ntoy:drafted 30\ntoy:accepted 15\n"
    assert metrics_delta(parse_metrics(text), parse_metrics(text)) is None


@pytest.mark.anyio
async def test_a_measurement_runs_through_the_toy(toy_route_dialect: Dialect) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "ab"}, "finish_reason": None}]}
    last = {"choices": [{"index": 0, "delta": {"content": "c"}, "finish_reason": "stop"}]}
    final = {
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        "toy_spec": {"drafted": 6, "accepted": 3, "steps": 2},
        "toy_times": {"ttft": 12.5},
    }
    request = ChatRequest(
        messages=({"role": "user", "content": "x"},),
        max_tokens=4,
        reach_max_tokens=True,
        reasoning_mode=ReasoningMode.think_high,
    )
    async with replay_server(_sse(chunk, last, final)) as server:
        route = EngineRoute(
            base_url=server.base_url,
            model="m",
            dialect=toy_route_dialect,
            continuous_usage=True,
        )
        m = await measure_streamed(request, route=route, gate=LiveGate())
        sent = orjson.loads(server.requests[0].body)
    assert sent["toy_think"] == "think_high" and sent["toy_min_tokens"] == 4
    assert sent["toy_report"] is True
    assert sent["stream_options"] == {"continuous_usage_stats": True, "include_usage": True}
    assert "chat_template_kwargs" not in sent and "reasoning_effort" not in sent
    assert can_ignore_eos(toy_route_dialect)
    assert m.acceptance is not None and m.acceptance.source == "toy_spec"
    assert m.acceptance.accepted_token_ratio == 0.5 and m.acceptance.acceptance_length == 2.5
    assert m.server_ttft_ms == 12.5


@pytest.mark.anyio
async def test_side_endpoints_ask_the_toy(toy_route_dialect: Dialect) -> None:
    gate = LiveGate()
    async with replay_server(_json({"toy_depth": 3})) as server:
        route = EngineRoute(base_url=server.base_url, model="m", dialect=toy_route_dialect)
        async with gate.client() as client:
            assert await served_spec_tokens(route, gate=gate, client=client) == 3
        assert server.requests[0].path == "/toy_info"
    models = {"data": [{"id": "other"}]}
    async with replay_server(_json(models)) as server:
        route = EngineRoute(base_url=server.base_url, model="m", dialect=toy_route_dialect)
        async with gate.client() as client:
            assert await probe_route(route, gate=gate, client=client) is None
    async with replay_server(_json({"tokens": [1, 2, 3]})) as server:
        route = EngineRoute(base_url=server.base_url, model="m", dialect=toy_route_dialect)
        async with gate.client() as client:
            counter = EndpointTokenCounter(route, gate=gate, client=client)
            assert await counter.count(["hello"]) == [3]
        assert orjson.loads(server.requests[0].body) == {"toy_text": "hello"}
