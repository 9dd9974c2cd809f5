"""The embedded engine's ``POST /v1/completions``: vLLM's token-id prompt scoring.

vLLM's completions endpoint takes a list of token ids as ``prompt`` and, with
``prompt_logprobs: K``, answers one entry per prompt token in
``choices[0].prompt_logprobs`` (the first ``null``; each ``{token_id: {logprob, rank,
decoded_token}}``, the prompt token first). The distribution witness sends the prompt's
ids followed by the ids a route sampled (``_execute/_teacher_force_ids.py``); the
embedded engine serves that request, so the loopback tests cover the wire.

Served: a non-streamed request for one output token (``max_tokens`` 1, the scoring
shape; any other is refused with HTTP 400 rather than decoded off the scheduler). The
ids are decoded with the character tokenizer (id 0, end-of-sequence, is the model's
end character); the chat template (:func:`~deepseekbench._engine._server.render_prompt`)
is read back: the text after the last ``<|assistant|>`` is the forced output, scored
from the model context of the last user message, as the chat path's
``continue_final_message`` scores it. The one output token is the target's most likely
next character (no sampling, no scheduling: a scoring request's token is not read).
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from deepseekbench._engine._model import EOS_CH, argmax, context_of
from deepseekbench._engine._numerics import MAX_TOP_LOGPROBS, prompt_logprobs
from deepseekbench._engine._tokenizer import EOS, TOKENIZER

__all__ = ["ASSISTANT_TAG", "CompletionError", "completions_answer", "forced_split"]

ASSISTANT_TAG = "<|assistant|>"
"""The chat template's assistant header (``render_prompt``): the forced output follows it."""

_USER_TAG = "<|user|>"


class CompletionError(Exception):
    """A refused completions request: HTTP 400 with ``message`` and the field ``param``."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def forced_split(prompt: str) -> tuple[int, str]:
    """Where the forced output starts in ``prompt`` (after the last ``<|assistant|>``;
    ``len(prompt)`` when there is none) and the last user message's text (stripped,
    the model's question)."""
    at = prompt.rfind(ASSISTANT_TAG)
    if at < 0:
        return len(prompt), ""
    head = prompt[:at]
    u = head.rfind(_USER_TAG)
    if u < 0:
        return at + len(ASSISTANT_TAG), ""
    body = head[u + len(_USER_TAG) :]
    end = body.find("\n<|")
    return at + len(ASSISTANT_TAG), (body if end < 0 else body[:end]).strip()


def _ids(raw: dict[str, Any]) -> list[int]:
    prompt = raw.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return TOKENIZER.encode(prompt)
    if (
        isinstance(prompt, list)
        and prompt
        and all(type(i) is int and 0 <= i < TOKENIZER.vocab_size for i in prompt)
    ):
        return list(prompt)
    raise CompletionError("prompt must be a string or a non-empty list of token ids", "prompt")


def _checked(raw: Any) -> tuple[list[int], int | None]:
    """The prompt ids and ``prompt_logprobs`` of a served request, else the refusal."""
    if not isinstance(raw, dict):
        raise CompletionError("the body must be a JSON object")
    if raw.get("stream"):
        raise CompletionError("the embedded engine serves completions non-streamed", "stream")
    if raw.get("max_tokens", 16) != 1:
        raise CompletionError(
            "the embedded engine's completions serve scoring requests only (max_tokens 1)",
            "max_tokens",
        )
    k = raw.get("prompt_logprobs")
    if k is not None and not (type(k) is int and 0 <= k <= MAX_TOP_LOGPROBS):
        raise CompletionError(
            f"prompt_logprobs must be in 0..{MAX_TOP_LOGPROBS}", "prompt_logprobs"
        )
    return _ids(raw), k


def completions_answer(
    body: bytes, *, lm: Any, verify_target: Any, model: str, cid: str, window: int
) -> dict[str, Any]:
    """The completions answer to ``body`` (module docstring): ``lm`` the reference model
    (its ``target``), ``verify_target`` the forced positions' distribution (the numerics
    model's verify pass, else ``lm.target``), ``model`` the served name, ``cid`` the id,
    ``window`` the question characters the model context keeps (as the chat path).

    Raises:
        CompletionError: invalid JSON, a streamed or multi-token request, a prompt that
            is not a string or ids in the vocabulary, ``prompt_logprobs`` out of range.
    """
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise CompletionError(f"invalid JSON body: {exc}") from None
    ids, k = _checked(raw)
    prompt = "".join(EOS_CH if i == EOS else TOKENIZER.decode([i]) for i in ids)
    start, question = forced_split(prompt)
    ctx = context_of(question[-window:])
    nxt = argmax(verify_target(ctx + prompt[start:]))
    choice: dict[str, Any] = {
        "index": 0,
        "text": "" if nxt == EOS_CH else nxt,
        "logprobs": None,
        "finish_reason": "stop" if nxt == EOS_CH else "length",
    }
    if k is not None:
        choice["prompt_logprobs"] = prompt_logprobs(
            prompt, forced_from=start, model_ctx=ctx, template_dist=lm.target,
            forced_dist=verify_target, top_k=k,
        )  # fmt: skip
    if raw.get("return_token_ids"):
        choice["prompt_token_ids"] = ids
        choice["token_ids"] = [EOS if nxt == EOS_CH else TOKENIZER.encode(nxt)[0]]
    usage = {"prompt_tokens": len(ids), "completion_tokens": 1, "total_tokens": len(ids) + 1}
    return {
        "id": cid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage,
    }
