"""One table of every known speculative-counter name (``_dialects/_counters.py``),
read by both the per-request readers and the ``/metrics`` reader; router-mode
llama-server scraped with ``?model=``."""

from __future__ import annotations

import httpx
import pytest

from deepseekbench import Dialect, EngineRoute, LiveGate, read_acceptance, scrape_metrics
from deepseekbench._dialects import all_dialects
from deepseekbench._dialects._counters import (
    SPEC_COUNTERS,
    CounterKind,
    prometheus_sets,
    request_names,
)
from deepseekbench._types._acceptance import dense_histogram
from tests._replay import RecordedRequest, Script, Write, replay_server


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_every_prometheus_family_an_engine_reads_is_in_the_table() -> None:
    known = {c.name for c in SPEC_COUNTERS if c.place == "prometheus"}
    for adapter in all_dialects():
        for cs in adapter.counter_sets:
            names = {*cs.names, cs.per_position} - {None}
            assert names <= known, (adapter.name, names - known)
        assert adapter.counter_sets == prometheus_sets(adapter.engine)


def test_a_verify_round_count_beside_draft_n_is_the_verify_steps() -> None:
    """llama.cpp ``timings``: drafted, accepted and the rounds they were verified in."""
    chunk = {"timings": {"draft_n": 12, "draft_n_accepted": 9, "draft_rounds": 4}}
    record = read_acceptance(chunk, Dialect.llamacpp)
    assert record is not None
    assert (record.draft_tokens, record.accepted_tokens, record.verify_steps) == (12, 9, 4)
    assert record.acceptance_length == pytest.approx(1 + 9 / 4)
    without = read_acceptance({"timings": {"draft_n": 12, "draft_n_accepted": 9}}, Dialect.llamacpp)
    assert without is not None and without.verify_steps is None


@pytest.mark.parametrize("steps_name", request_names(Dialect.vllm, CounterKind.verify_steps))
def test_vllm_per_request_reader_takes_every_verify_step_alias(steps_name: str) -> None:
    stats = {"num_draft_tokens": 30, "num_accepted_tokens": 12, steps_name: 10}
    record = read_acceptance({"metrics": {"speculative_decoding": stats}}, Dialect.vllm)
    assert record is not None and record.verify_steps == 10


def test_sparse_histogram_object_is_read_as_the_dense_list() -> None:
    assert dense_histogram({"0": 39, "1": 1, "3": 3}, 4) == [39, 1, 0, 3]
    assert dense_histogram({"0": 39, "3": 3}) == [39, 0, 0, 3]
    assert dense_histogram([5, 1], 3) == [5, 1, 0]
    assert dense_histogram({"4": 1}, 4) is None  # a bucket past the depth
    assert dense_histogram({"x": 1}) is None
    assert dense_histogram({"1": -1}) is None


_METRICS = "# TYPE llamacpp:spec_decode_num_drafts_total counter\n" + (
    "llamacpp:spec_decode_num_drafts_total 3\n"
)


@pytest.mark.anyio
@pytest.mark.parametrize("dialect", ["llamacpp", "auto"])
async def test_router_mode_llama_server_is_scraped_with_the_model(dialect: str) -> None:
    """llama-server in router mode answers 400 without ``?model=``: a llama.cpp route
    names the model on its first scrape; another route does after the 400."""

    def answer(request: RecordedRequest) -> Script:
        if httpx.URL(request.path).params.get("model") != "dsv4-test":
            body = b'{"error":{"code":400,"message":"model name is missing from the request"}}'
            return Script(
                status=400, headers={"content-type": "application/json"}, writes=(Write(0.0, body),)
            )
        return Script(
            headers={"content-type": "text/plain"}, writes=(Write(0.0, _METRICS.encode()),)
        )

    async with replay_server(answer) as server:
        route = EngineRoute(base_url=server.base_url, model="dsv4-test", dialect=Dialect(dialect))
        snap = await scrape_metrics(route, gate=LiveGate())
    assert snap.error is None
    assert snap.values["llamacpp:spec_decode_num_drafts"] == 3
    assert len(server.requests) == (1 if dialect == "llamacpp" else 2)
    assert server.requests[-1].path == "/metrics?model=dsv4-test"
