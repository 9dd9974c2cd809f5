"""Teacher forcing: ``off``'s distribution at every position of a given output, in one pass.

One request per output, to ``off`` only, on vLLM's wire (vLLM
``entrypoints/openai`` chat serving; the embedded engine serves the same): the chat
request with the output appended as a final assistant message,
``continue_final_message: true``, ``add_generation_prompt: false``, ``max_tokens: 1``,
``prompt_logprobs: K``, ``return_token_ids: true``, non-streamed, with neutral sampling
(temperature 1, top-p 1, top-k off) so that even a server in
``--logprobs-mode processed_logprobs`` serves the untempered distribution. The answer's
top-level ``prompt_logprobs`` holds one entry per prompt token (``null`` or
``{token_id: {logprob, rank, decoded_token}}``); the output's tokens are found by walking
back from the last prompt token, spelling ``output_text`` with the tokens' bytes
(:func:`parse_prompt_logprobs`). Tokens that do not spell it exactly give a reason,
never a guess. The whole output is scored in one forward pass: the shape of a
speculative verify pass, not of one-token decode.

Bounded: the answer is read as a stream and dropped past ``max_bytes``; the request, body
included, has the deadline ``timeout_s``; either, an HTTP error, a transport failure or
an answer that cannot be read is returned as the reason (a string), never raised.
Which engines can: :attr:`~deepseekbench._dialects.EngineDialect.teacher_forcing`
(``docs/rows-and-gate.md``, "Teacher forcing").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final, cast

import anyio
import httpx
import orjson

from deepseekbench._errors import LiveGateError
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._types._margin import TopLogprob
from deepseekbench._types._request import ChatRequest
from deepseekbench._types._scored import LogprobsKind, ScoredOutput, ScoredPosition

__all__ = [
    "MAX_TOP_K",
    "VLLM_PROMPT_LOGPROBS",
    "Reason",
    "ask_json",
    "parse_prompt_logprobs",
    "position_of",
    "score_output",
    "teacher_force_body",
    "teacher_force_reason",
]

VLLM_PROMPT_LOGPROBS: Final[str] = "vllm_prompt_logprobs"
"""The wire name of vLLM's chat ``prompt_logprobs`` (``EngineDialect.teacher_forcing``)."""

MAX_TOP_K: Final[int] = 20
"""Most alternatives asked per position (vLLM's default ``--max-logprobs``)."""

_DROPPED: Final[tuple[str, ...]] = (
    "stream_options",
    "logprobs",
    "top_logprobs",
    "ignore_eos",
    "min_tokens",
    "max_completion_tokens",
)


def teacher_force_reason(route: EngineRoute) -> str | None:
    """``None`` when ``route``'s engine can score a given output in one pass, else why not
    (its dialect's ``teacher_forcing_refusal``, e.g. "llama.cpp serves no prompt logprobs ...")."""
    adapter = route.adapter
    if adapter.teacher_forcing == VLLM_PROMPT_LOGPROBS:
        return None
    return adapter.teacher_forcing_refusal


def teacher_force_body(
    route: EngineRoute, request: ChatRequest, output_text: str, *, top_k: int
) -> dict[str, Any]:
    """The scoring request's JSON body (module docstring): ``route.build_body`` of
    ``request`` with ``output_text`` as a final assistant message, one output token,
    neutral sampling, ``prompt_logprobs: top_k``, non-streamed.

    Raises:
        ValueError: ``top_k`` outside 0..:data:`MAX_TOP_K`.
    """
    if not 0 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k must be in 0..{MAX_TOP_K}, got {top_k}")
    forced = request.model_copy(
        update={
            "messages": (*request.messages, {"role": "assistant", "content": output_text}),
            "max_tokens": 1,
            "temperature": 1.0,
            "top_p": 1.0,
            "stop": None,
            "reach_max_tokens": False,
            "pinned_length": False,
        }
    )
    body = route.build_body(forced)
    for key in _DROPPED:
        body.pop(key, None)
    body.update(
        {
            "stream": False,
            "top_k": -1,
            "continue_final_message": True,
            "add_generation_prompt": False,
            "prompt_logprobs": top_k,
            "return_token_ids": True,
        }
    )
    return body


def _logprob(value: Any) -> float | str | None:
    """A wire logprob: the float, ``None`` for ``null``, or why it cannot be one."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"logprob {value!r} is not a number"
    v = float(value)
    if math.isnan(v) or math.isinf(v) or v > 0.0:
        return f"logprob {v!r} is impossible (a logprob is finite and <= 0)"
    return v


def _top(
    entry: Mapping[str, Any], forced_key: str, forced_rank: int | None, top_k: int
) -> tuple[tuple[TopLogprob, ...], tuple[int, ...] | None] | str:
    """The top-``top_k`` alternatives of one prompt entry, most likely first, and their
    ids (``None`` when a key is not an id). The forced token is among them only when it
    ranks within ``top_k`` (vLLM adds it regardless); an alternative whose logprob is
    ``null`` is dropped, an impossible one is a reason."""
    outside = forced_rank > top_k if forced_rank is not None else len(entry) > top_k
    out: list[tuple[TopLogprob, int | None]] = []
    for key, alt in entry.items():
        if key == forced_key and outside:
            continue
        if not isinstance(alt, Mapping):
            return f"alternative {key!r} is not an object"
        lp = _logprob(alt.get("logprob"))
        if isinstance(lp, str):
            return f"alternative {key!r}: {lp}"
        if lp is None:
            continue
        shown = alt.get("decoded_token")
        tid = int(key) if key.isdigit() else None
        out.append((TopLogprob(token=shown if isinstance(shown, str) else "", logprob=lp), tid))
    out.sort(key=lambda t: -t[0].logprob)
    kept = out[:top_k]
    ids = [t for _, t in kept]
    known = None if any(t is None for t in ids) else tuple(cast(list[int], ids))
    return tuple(a for a, _ in kept), known


def position_of(entry: Any, token_id: int | None, top_k: int) -> ScoredPosition | str:
    """One prompt entry (vLLM's ``{token_id: {logprob, rank, decoded_token}}``) as a
    :class:`ScoredPosition` with at most ``top_k`` alternatives, or why not (a string).
    The forced token: ``token_id``'s key when the ids are known (the position then
    records the ids), else the first key, where vLLM puts the prompt token."""
    if not isinstance(entry, Mapping) or not entry:
        return "no logprobs"
    key = str(token_id) if token_id is not None else next(iter(entry))
    forced = entry.get(key)
    if not isinstance(forced, Mapping):
        return f"token id {key} is not among its logprobs"
    lp = _logprob(forced.get("logprob"))
    if not isinstance(lp, float):
        return lp or "the forced token's logprob is null"
    shown = forced.get("decoded_token")
    if not isinstance(shown, str):
        return "the forced token has no decoded_token"
    rank = forced.get("rank")
    rank = rank if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 1 else None
    got = _top(entry, key, rank, top_k)
    if isinstance(got, str):
        return got
    top, top_ids = got
    piece = shown.encode("utf-8")
    if token_id is None:
        return ScoredPosition(token=shown, token_bytes=piece, logprob=lp, rank=rank, top=top)
    return ScoredPosition(
        token=shown, token_bytes=piece, logprob=lp, rank=rank, top=top, token_id=token_id,
        top_ids=top_ids,
    )  # fmt: skip


def _token_ids(body: Mapping[str, Any], n: int) -> list[int] | None:
    ids = body.get("prompt_token_ids")
    if isinstance(ids, list) and len(ids) == n and all(type(i) is int for i in ids):
        return cast(list[int], ids)
    return None


def parse_prompt_logprobs(
    body: Mapping[str, Any], output_text: str, *, top_k: int, kind: LogprobsKind = "unknown"
) -> ScoredOutput | str:
    """The output's positions from a vLLM-shaped answer (module docstring), or the reason.

    Walks back from the last prompt token, prepending each token's UTF-8 bytes, until
    they are exactly ``output_text``'s bytes; a token that does not continue the
    text (a U+FFFD piece of a partial UTF-8 character, a template that altered the
    content), one that straddles the output's start, a ``null`` or impossible logprob
    (NaN, ±inf, > 0) among the output's positions all give a reason naming the position.
    ``prompt_token_ids`` pick each position's forced token when sent (else vLLM's first key).
    """
    entries = body.get("prompt_logprobs")
    if not isinstance(entries, list):
        return "the engine answered no prompt_logprobs"
    ids = _token_ids(body, len(entries))
    target = output_text.encode("utf-8")
    spelled = b""
    positions: list[ScoredPosition] = []
    i = len(entries)
    while len(spelled) < len(target):
        i -= 1
        if i < 0:
            return "the prompt's tokens end before the output is spelled"
        pos = position_of(entries[i], ids[i] if ids is not None else None, top_k)
        if isinstance(pos, str):
            return f"prompt token {i}: {pos}"
        spelled = pos.token_bytes + spelled
        if not target.endswith(spelled):
            hint = " (partial UTF-8 read as U+FFFD)" if "\ufffd" in pos.token else ""
            where = "straddles the output's start" if len(spelled) > len(target) else "differs"
            spell = "the tokens do not spell the output"
            return f"prompt token {i} ({pos.token!r}) {where}: {spell}{hint}"
        positions.append(pos)
    return ScoredOutput(positions=tuple(reversed(positions)), top_k=top_k, logprobs_kind=kind)


async def _post_bounded(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str],
    max_bytes: int,
) -> tuple[int, bytes] | str:  # fmt: skip
    """POST ``body``; the status and at most ``max_bytes`` of the answer, else the reason."""
    async with client.stream(
        "POST", url, content=orjson.dumps(body), headers=headers
    ) as r:  # fmt: skip
        declared = r.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            return f"the answer declares {declared} bytes, over the cap of {max_bytes}"
        buf = bytearray()
        async for chunk in r.aiter_bytes():
            buf += chunk
            if len(buf) > max_bytes:
                return f"the answer passed the cap of {max_bytes} bytes"
        return r.status_code, bytes(buf)


async def ask_json(
    route: EngineRoute, body: dict[str, Any], client: httpx.AsyncClient, timeout_s: float,
    max_bytes: int, *, url: str | None = None,
) -> Any:  # fmt: skip
    """The parsed JSON answer of ``body`` POSTed to ``url`` (default ``route.chat_url``)
    with the route's headers, or the reason (a :class:`Reason`, a string) it could not be
    had within ``timeout_s`` seconds and ``max_bytes`` bytes: an HTTP error status, a
    transport failure, a gate refusal, an answer that is not a JSON object. Never raises
    for server misbehaviour."""
    headers = {**route.request_headers(), "accept": "application/json"}
    got: tuple[int, bytes] | str = f"no complete answer within {timeout_s:g} s"
    try:
        with anyio.move_on_after(timeout_s):
            got = await _post_bounded(client, url or route.chat_url, body, headers, max_bytes)
    except httpx.HTTPError as exc:
        return Reason(f"the scoring request failed: {type(exc).__name__}")
    except LiveGateError as exc:
        return Reason(f"the gate refused the scoring request: {exc}")
    if isinstance(got, str):
        return Reason(got)
    status, raw = got
    if status != 200:
        return Reason(f"the scoring request got HTTP {status}")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return Reason("the scoring answer is not JSON")
    return data if isinstance(data, dict) else Reason("the scoring answer is not an object")


class Reason(str):
    """A failure reason (tells it apart from a parsed answer; :func:`ask_json`)."""


async def score_output(
    route: EngineRoute,
    request: ChatRequest,
    output_text: str,
    *,
    top_k: int,
    client: httpx.AsyncClient,
    gate: LiveGate,
    timeout_s: float,
    max_bytes: int,
) -> ScoredOutput | str:
    """``route``'s distribution at every token of ``output_text`` given ``request``'s
    messages, scored in one forward pass (module docstring), or the recorded reason.

    ``route`` should be ``off`` (a speculative route is never asked: some vLLM releases
    turn speculation off for a logprobs request, vLLM #34497). ``top_k``: alternatives
    per position (0..:data:`MAX_TOP_K`). ``client``: the run's (gated) HTTP client;
    ``gate`` is charged the one output token the request generates. ``timeout_s``: the
    deadline of the whole request, body included (seconds); ``max_bytes``: the answer's
    size cap (bytes). An empty output gives no positions and a note.

    Returns:
        :class:`~deepseekbench._types._scored.ScoredOutput` (logprobs kind from the
        dialect's ``prompt_logprobs_kind``), or a string saying why none: the engine
        cannot (:func:`teacher_force_reason`), the deadline or cap passed, an HTTP
        error, a transport failure, or an answer whose tokens do not spell the output.

    Raises:
        ValueError: ``top_k`` outside 0..:data:`MAX_TOP_K`, or a non-positive
            ``timeout_s`` or ``max_bytes`` (caller errors; server misbehaviour never raises).
    """
    if timeout_s <= 0 or max_bytes <= 0:
        raise ValueError("timeout_s and max_bytes must be positive")
    body = teacher_force_body(route, request, output_text, top_k=top_k)
    kind = cast(LogprobsKind, route.adapter.prompt_logprobs_kind)
    reason = teacher_force_reason(route)
    if reason is not None:
        return reason
    if not output_text:
        return ScoredOutput(
            positions=(), note="the output is empty", top_k=top_k, logprobs_kind=kind
        )
    data = await ask_json(route, body, client, timeout_s, max_bytes)
    if isinstance(data, Reason):
        return str(data)
    usage = data.get("usage")
    if isinstance(usage, dict) and type(usage.get("completion_tokens")) is int:
        gate.charge_output_tokens(max(0, usage["completion_tokens"]))
    return parse_prompt_logprobs(data, output_text, top_k=top_k, kind=kind)
