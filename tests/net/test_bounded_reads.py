"""Bounded reads: a whole-answer read ends by its deadline and under its cap.

Loopback servers that answer 1 byte per second, or with more than the cap (a small
cap, and the 64 MiB default against a 400 MB body generated lazily), on asyncio and
trio. Each read ends with a recorded :class:`BoundedReadError` (or the caller's record
of it: an ``unexplained`` margin with a note, a probe's ``timeout``, a configuration
read of ``None``), and the calls around it go on. No timing is asserted: a guard of
a minute only keeps a regression from hanging the suite.
"""

from __future__ import annotations

import resource
import tracemalloc
from collections.abc import Awaitable, Callable

import anyio
import orjson
import pytest
from anyio.abc import SocketStream

from deepseekbench import ChatRequest, Dialect, DivergenceKind, LiveGate
from deepseekbench._execute._forensics import explain_divergences
from deepseekbench._execute._served_config import served_spec_tokens
from deepseekbench._net._bounded import (
    DEFAULT_MAX_BYTES,
    BoundedReadError,
    BoundedResponse,
    read_bounded,
)
from deepseekbench._net._probe import probe_route
from deepseekbench._records._follow_up import FollowUp
from tests._replay import answering

pytestmark = pytest.mark.anyio
GUARD_S = 60.0  # a hang guard, not a timing assertion
MB = 1024 * 1024
REQUEST = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=8, seed=3)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def head(length: int | None = None) -> bytes:
    framing = f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    return f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{framing}\r\n\r\n".encode()


async def dribble(stream: SocketStream) -> None:
    """A JSON answer one byte per second (it would take minutes to finish)."""
    body = b'{"choices": []}' + b" " * 400
    await stream.send(head(len(body)))
    for i in range(len(body)):
        await stream.send(body[i : i + 1])
        await anyio.sleep(1.0)


def flood(total: int, *, declare: bool) -> Callable[[SocketStream], Awaitable[None]]:
    """``total`` bytes of JSON-looking body, generated 1 MiB at a time (never held)."""

    async def answer(stream: SocketStream) -> None:
        await stream.send(head(total if declare else None))
        block = b" " * MB
        sent = 0
        while sent < total:
            part = block[: min(MB, total - sent)]
            await stream.send(part if declare else b"%x\r\n%s\r\n" % (len(part), part))
            sent += len(part)
        if not declare:
            await stream.send(b"0\r\n\r\n")

    return answer


async def good(stream: SocketStream) -> None:
    entries = [
        {"token": "a", "logprob": -0.01, "top_logprobs": [{"token": "a", "logprob": -0.01}]},
        {
            "token": "a",
            "logprob": -0.30,
            "top_logprobs": [{"token": "a", "logprob": -0.30}, {"token": "b", "logprob": -0.32}],
        },
    ]
    choice = {"message": {"content": "aa"}, "logprobs": {"content": entries}}
    body = orjson.dumps({"choices": [choice]})
    await stream.send(head(len(body)) + body)


async def test_a_one_byte_per_second_answer_ends_at_the_deadline() -> None:
    async with answering(dribble) as route, LiveGate().client() as client:
        with anyio.fail_after(GUARD_S):
            got = await read_bounded(client, "GET", route.base_url, deadline_s=2.0)
    assert isinstance(got, BoundedReadError) and got.reason == "timeout"
    assert "2 s" in str(got)


@pytest.mark.parametrize("declare", [True, False], ids=["content-length", "chunked"])
async def test_an_answer_over_the_cap_is_cut_at_the_cap(declare: bool) -> None:
    async with answering(flood(2 * MB, declare=declare)) as route, LiveGate().client() as c:
        with anyio.fail_after(GUARD_S):
            got = await read_bounded(c, "GET", route.base_url, deadline_s=30.0, max_bytes=MB)
            ok = await read_bounded(c, "GET", route.base_url, deadline_s=30.0, max_bytes=3 * MB)
    assert isinstance(got, BoundedReadError) and got.reason == "too_large"
    assert isinstance(ok, BoundedResponse) and len(ok.content) == 2 * MB


async def test_follow_ups_past_the_deadline_are_recorded_and_the_rest_go_on() -> None:
    slow, fast = FollowUp("slow", "mtp", REQUEST, "ab"), FollowUp("fast", "mtp", REQUEST, "ab")
    gate = LiveGate()
    async with answering(dribble) as dead, answering(good) as live, gate.client() as client:
        with anyio.fail_after(GUARD_S):
            ((_, m),) = await explain_divergences(
                [slow], off=dead, gate=gate, client=client, timeout_s=2.0
            )
            ((_, n),) = await explain_divergences(
                [fast], off=live, gate=gate, client=client, timeout_s=2.0
            )
    assert m.kind is DivergenceKind.unexplained and "timeout" in m.note and "2 s" in m.note
    assert n.kind is DivergenceKind.near_tie and n.margin_nats == pytest.approx(0.02)


async def test_a_400_mb_follow_up_stops_at_the_64_mib_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    follow = FollowUp("big", "mtp", REQUEST, "ab")
    gate = LiveGate()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    tracemalloc.start()
    try:
        async with answering(flood(400 * MB, declare=False)) as route, gate.client() as client:
            with anyio.fail_after(GUARD_S * 2):
                ((_, m),) = await explain_divergences(
                    [follow], off=route, gate=gate, client=client, timeout_s=100.0
                )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert m.kind is DivergenceKind.unexplained and "too_large" in m.note
    assert str(DEFAULT_MAX_BYTES) in m.note
    assert peak < 3 * DEFAULT_MAX_BYTES  # the body past the cap is never held
    with capsys.disabled():
        print(
            f"\n400 MB follow-up: traced peak {peak / MB:.1f} MiB, "
            f"max RSS grew {(rss_after - rss_before) / 1024:.1f} MiB"
        )


async def test_a_slow_configuration_read_and_probe_end_at_their_deadline() -> None:
    gate = LiveGate()
    async with answering(dribble) as route, gate.client() as client:
        llama = route.model_copy(update={"dialect": Dialect.llamacpp})
        with anyio.fail_after(GUARD_S):
            depth = await served_spec_tokens(llama, gate=gate, client=client, timeout_s=2.0)
            probed = await probe_route(route, gate=gate, client=client, timeout_s=2.0)
    assert depth is None  # /props said nothing in time: recorded as unknown, run goes on
    assert probed is not None and probed[0] == "timeout"


async def test_impossible_values_written_as_python_literals_are_named() -> None:
    async def nan(stream: SocketStream) -> None:
        body = (
            b'{"choices": [{"message": {"content": "a"}, "logprobs": {"content": ['
            b'{"token": "a", "logprob": NaN, "top_logprobs": []}]}}]}'
        )
        await stream.send(head(len(body)) + body)

    gate = LiveGate()
    async with answering(nan) as route, gate.client() as client:
        ((_, m),) = await explain_divergences(
            [FollowUp("p", "mtp", REQUEST, "b")], off=route, gate=gate, client=client, timeout_s=5
        )
    assert m.kind is DivergenceKind.unexplained and "NaN" in m.note
