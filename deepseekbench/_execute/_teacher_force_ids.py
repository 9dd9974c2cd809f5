"""Teacher forcing on the sampled token ids: ``off`` scores the very tokens a route sampled.

Scoring an output's *text* re-tokenizes it, and a route may sample a non-canonical
tokenization (pieces the tokenizer would merge, or split differently): the re-tokenized
positions are then not the sampled ones, and a split that keeps the count still
misaligns them. Where the engine returned the sampled ids (vLLM's request field
``return_token_ids: true``: ``prompt_token_ids`` on the answer and per-choice
``token_ids``, streamed per chunk; vLLM ``entrypoints/openai`` serving; the embedded
engine serves the same), ``off`` scores them directly, two requests per output:

1. the chat request the route was sent, non-streamed, ``max_tokens: 1``, neutral
   sampling, ``return_token_ids: true``: its ``prompt_token_ids`` are the prompt's ids
   exactly as the engine templated them (reasoning controls included);
2. ``POST {base_url}/completions`` with ``prompt`` = those ids + the sampled ids (vLLM's
   completions endpoint takes a list of token ids as the prompt), ``max_tokens: 1``,
   ``prompt_logprobs: K``, neutral sampling: one entry per prompt token (per choice,
   ``choices[0].prompt_logprobs``; the top level is read too), the last ``len(ids)``
   entries being the sampled tokens', each keyed by the forced id. Positions align by
   construction; no spelling check is needed (:func:`parse_id_logprobs`).

Bounded as :func:`~deepseekbench._execute._teacher_force.score_output`: each request has
the deadline ``timeout_s`` and the answer cap ``max_bytes``; a failure is the recorded
reason, never raised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import httpx

from deepseekbench._execute._teacher_force import (
    MAX_TOP_K,
    Reason,
    ask_json,
    position_of,
    teacher_force_body,
    teacher_force_reason,
)
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._types._request import ChatRequest
from deepseekbench._types._scored import LogprobsKind, ScoredOutput, ScoredPosition

__all__ = ["completions_url", "id_scoring_body", "parse_id_logprobs", "score_token_ids"]


def completions_url(route: EngineRoute) -> str:
    """``{base_url}/completions`` (vLLM's legacy completions endpoint)."""
    return f"{route.base_url}/completions"


def _prompt_ids_body(route: EngineRoute, request: ChatRequest) -> dict[str, Any]:
    """The chat request that returns the prompt's ids: ``request`` as the route sends
    it, non-streamed, one output token, neutral sampling, ``return_token_ids``."""
    body = teacher_force_body(route, request, "", top_k=0)
    body["messages"] = body["messages"][:-1]  # no forced assistant message: the prompt
    for key in ("continue_final_message", "add_generation_prompt", "prompt_logprobs"):
        body.pop(key, None)
    return body


def id_scoring_body(
    route: EngineRoute, prompt_ids: Sequence[int], sampled_ids: Sequence[int], *, top_k: int
) -> dict[str, Any]:
    """The completions body scoring ``sampled_ids`` after ``prompt_ids`` in one pass
    (module docstring): token-id prompt, ``max_tokens: 1``, neutral sampling
    (temperature 1, top-p 1, top-k off), ``prompt_logprobs: top_k``, non-streamed.

    Raises:
        ValueError: ``top_k`` outside 0..:data:`MAX_TOP_K`.
    """
    if not 0 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k must be in 0..{MAX_TOP_K}, got {top_k}")
    return {
        "model": route.model,
        "prompt": [*prompt_ids, *sampled_ids],
        "max_tokens": 1,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "prompt_logprobs": top_k,
        "stream": False,
    }


def _ids(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(type(i) is int and i >= 0 for i in value):
        return cast(list[int], value)
    return None


def _entries(body: Mapping[str, Any]) -> Any:
    """``choices[0].prompt_logprobs`` (vLLM completions), else the top-level list."""
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        got = choices[0].get("prompt_logprobs")
        if isinstance(got, list):
            return got
    return body.get("prompt_logprobs")


def parse_id_logprobs(
    body: Mapping[str, Any],
    sent: Sequence[int],
    sampled_ids: Sequence[int],
    *,
    top_k: int,
    kind: LogprobsKind = "unknown",
) -> ScoredOutput | str:
    """The sampled tokens' positions from a completions answer to the token-id prompt
    ``sent`` (ending with ``sampled_ids``), or the reason: the entries must be one per
    sent token, each sampled position keyed by its sampled id with a finite logprob <= 0.
    """
    entries = _entries(body)
    if not isinstance(entries, list):
        return "the engine answered no prompt_logprobs"
    if len(entries) != len(sent):
        return f"{len(entries)} prompt_logprobs entries for {len(sent)} prompt tokens sent"
    start = len(sent) - len(sampled_ids)
    positions: list[ScoredPosition] = []
    for j, tid in enumerate(sampled_ids):
        pos = position_of(entries[start + j], tid, top_k)
        if isinstance(pos, str):
            return f"sampled token {j} (id {tid}): {pos}"
        positions.append(pos)
    return ScoredOutput(
        positions=tuple(positions), top_k=top_k, logprobs_kind=kind, scored_by="token_ids"
    )


def _charge(gate: LiveGate, data: Mapping[str, Any]) -> None:
    usage = data.get("usage")
    if isinstance(usage, dict) and type(usage.get("completion_tokens")) is int:
        gate.charge_output_tokens(max(0, usage["completion_tokens"]))


async def score_token_ids(
    route: EngineRoute,
    request: ChatRequest,
    sampled_ids: Sequence[int],
    *,
    top_k: int,
    client: httpx.AsyncClient,
    gate: LiveGate,
    timeout_s: float,
    max_bytes: int,
) -> ScoredOutput | str:
    """``route``'s distribution at each of ``sampled_ids`` (the tokens a route sampled
    for ``request``), scored in one pass on the ids themselves (module docstring), or
    the recorded reason.

    ``route`` should be ``off``. ``top_k``: alternatives per position
    (0..:data:`MAX_TOP_K`); ``timeout_s`` (seconds) and ``max_bytes`` (bytes) bound each
    of the two requests; ``gate`` is charged the output tokens each generates (one).

    Returns:
        :class:`~deepseekbench._types._scored.ScoredOutput` with ``scored_by
        "token_ids"`` (one position per sampled id, in order), or a string saying why
        none: the engine cannot teacher-force, returned no prompt ids, or either
        request failed (deadline, cap, HTTP error, transport, unreadable answer).

    Raises:
        ValueError: ``top_k`` outside 0..:data:`MAX_TOP_K`, or a non-positive
            ``timeout_s`` or ``max_bytes`` (caller errors).
    """
    if timeout_s <= 0 or max_bytes <= 0:
        raise ValueError("timeout_s and max_bytes must be positive")
    if not 0 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k must be in 0..{MAX_TOP_K}, got {top_k}")
    kind = cast(LogprobsKind, route.adapter.prompt_logprobs_kind)
    reason = teacher_force_reason(route)
    if reason is not None:
        return reason
    if not sampled_ids:
        return ScoredOutput(
            positions=(), note="the output is empty", top_k=top_k, logprobs_kind=kind,
            scored_by="token_ids",
        )  # fmt: skip
    first = await ask_json(route, _prompt_ids_body(route, request), client, timeout_s, max_bytes)
    if isinstance(first, Reason):
        return f"prompt ids: {first}"
    _charge(gate, first)
    prompt_ids = _ids(first.get("prompt_token_ids"))
    if not prompt_ids:
        return "the engine returned no prompt_token_ids (return_token_ids)"
    body = id_scoring_body(route, prompt_ids, sampled_ids, top_k=top_k)
    url = completions_url(route)
    data = await ask_json(route, body, client, timeout_s, max_bytes, url=url)
    if isinstance(data, Reason):
        return str(data)
    _charge(gate, data)
    return parse_id_logprobs(data, body["prompt"], sampled_ids, top_k=top_k, kind=kind)
