"""Forensics: ``off``'s log-probabilities at every divergence, asked of ``off`` only.

After measurement, each divergence found (a speculative route against ``off`` on the
parity set or the measured traffic, and ``off`` against itself) gets one follow-up
request to the ``off`` route: the same chat request (prompt, seed, temperature 0),
non-streamed, with ``logprobs: true`` and ``top_logprobs`` (:data:`TOP_LOGPROBS`).
The speculative route is never asked: some vLLM releases turn speculation off for a
request that asks for logprobs (vLLM #34497), and the measured requests never carry a
logprobs request. The answer's ``choices[0].logprobs.content[]`` is aligned, token by
token, with the diverging output (:func:`~deepseekbench._types._margin.align_divergence`);
the answer is read whole within the route's ``timeout_s`` (a total deadline) and a
size cap (:func:`~deepseekbench._net._bounded.read_bounded`); an engine that serves no
logprobs, an HTTP error, a transport failure, an answer past the deadline or over the
cap gives an ``unexplained`` margin (``margin_nats = None``) whose note says why, never a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import anyio
import httpx
import orjson

from deepseekbench._errors import LiveGateError
from deepseekbench._net._bounded import BoundedReadError, read_bounded
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._records._follow_up import FollowUp
from deepseekbench._types._margin import (
    DEFAULT_TAU_NATS,
    DivergenceMargin,
    align_divergence,
    no_margin,
    parse_chat_logprobs,
)
from deepseekbench._types._request import ChatRequest

__all__ = ["TOP_LOGPROBS", "explain_divergences", "follow_up_body"]

TOP_LOGPROBS: Final[int] = 5
"""Alternatives asked per position (OpenAI allows up to 20; llama.cpp ``n_probs``)."""


def follow_up_body(route: EngineRoute, request: ChatRequest) -> dict[str, object]:
    """The follow-up's JSON body: ``route.build_body(request)`` with temperature 0,
    non-streamed, and ``logprobs``/``top_logprobs`` added."""
    body = route.build_body(request.model_copy(update={"temperature": 0.0}))
    body.pop("stream_options", None)
    body.update({"stream": False, "logprobs": True, "top_logprobs": TOP_LOGPROBS})
    return body


async def _explain(
    f: FollowUp, off: EngineRoute, gate: LiveGate, client: httpx.AsyncClient, timeout_s: float
) -> DivergenceMargin:
    common: dict[str, Any] = {
        "candidate": f.candidate,
        "tau_nats": DEFAULT_TAU_NATS,
        "source": f.source,
    }
    headers = {**off.request_headers(), "accept": "application/json"}
    try:
        r = await read_bounded(
            client,
            "POST",
            off.chat_url,
            deadline_s=timeout_s,
            content=orjson.dumps(follow_up_body(off, f.request)),
            headers=headers,
        )
    except LiveGateError as exc:  # e.g. max_requests spent by the measurement: keep the run
        return no_margin(f.prompt_id, note=f"gate refused the follow-up: {exc}", **common)
    if isinstance(r, BoundedReadError):
        return no_margin(f.prompt_id, note=f"follow-up failed: {r.reason}: {r}", **common)
    if r.status_code != 200:
        return no_margin(f.prompt_id, note=f"follow-up HTTP {r.status_code}", **common)
    try:
        data = r.json()
    except ValueError:
        return no_margin(f.prompt_id, note="follow-up answered no JSON", **common)
    usage = data.get("usage") if isinstance(data, dict) else None
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        gate.charge_output_tokens(max(0, usage["completion_tokens"]))
    positions = parse_chat_logprobs(data) if isinstance(data, dict) else None
    if positions is None:
        return no_margin(f.prompt_id, note="engine served no logprobs", **common)
    m = align_divergence(positions, f.candidate_text, prompt_id=f.prompt_id, **common)
    if m.margin_nats is None and f.other_text is not None and f.other_text != f.candidate_text:
        # off's follow-up took the candidate's path: the same fork seen from off's side
        m = align_divergence(positions, f.other_text, prompt_id=f.prompt_id, **common)
    return m


async def explain_divergences(
    follow_ups: Sequence[FollowUp],
    *,
    off: EngineRoute,
    gate: LiveGate,
    client: httpx.AsyncClient,
    timeout_s: float,
    concurrency: int = 4,
) -> list[tuple[FollowUp, DivergenceMargin]]:
    """Ask ``off`` once per follow-up (``concurrency`` in flight) and explain each.

    A follow-up the gate refuses (a spent ``max_requests`` budget, say) is not sent
    and gives margin ``None`` with the gate's reason: what was measured is kept.

    Returns:
        ``(follow-up, margin)`` pairs in ``follow_ups`` order, margins classified against
        :data:`~deepseekbench._types._margin.DEFAULT_TAU_NATS` (the analysis
        reclassifies them against the row's τ).
    """
    out: list[DivergenceMargin | None] = [None] * len(follow_ups)
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    async def one(i: int, f: FollowUp) -> None:
        async with limiter:
            out[i] = await _explain(f, off, gate, client, timeout_s)

    async with anyio.create_task_group() as tg:
        for i, f in enumerate(follow_ups):
            tg.start_soon(one, i, f)
    return [(f, m) for f, m in zip(follow_ups, out, strict=True) if m is not None]
