"""``ChatRequest``: a provider-neutral chat request.

A request says *what* to ask (messages, sampling, reasoning mode). It never says
*how* an engine should speculate: engine-specific speculative settings belong on
:class:`~deepseekbench.EngineRoute` (``request_extras``), so the same request can
be replayed unchanged against a baseline route and a speculative one.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from deepseekbench._types._axes import ReasoningMode, ReasoningModeName

__all__ = ["PASSTHROUGH_FIELDS", "ChatRequest", "coerce_request"]

# Keys (at any depth of ``extra_body``) that configure speculative decoding or ask
# an engine for its speculation side channel. Matched case-insensitively.
_SPECULATIVE_KEY = re.compile(
    r"^(speculative.*|spec_.*|num_speculative_tokens|n_draft|draft_.*|"
    r"return_meta_info|lookahead.*|ngram_.*|prompt_lookup.*|mtp.*|eagle.*|dspark.*)$",
    re.IGNORECASE,
)

# Body fields ChatRequest models itself, or that the route owns; they may not be
# smuggled in through ``extra_body``.
_OWNED_FIELDS = frozenset(
    {
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "reasoning_mode",
        "model",
        "stream",
        "stream_options",
        "chat_template_kwargs",
        "thinking",
        "reasoning_effort",
        "reasoning_format",
        "enable_thinking",
    }
)


# Top-level keys of a plain request dict that :func:`coerce_request` passes through
# into ``extra_body``: the other standard OpenAI Chat Completions body fields
# (OpenAI API reference, "Create chat completion") plus the common sampling
# extensions that vLLM, SGLang and llama.cpp accept on the same endpoint. Any other
# key is refused as a likely typo; truly custom fields go in ``extra_body``.
PASSTHROUGH_FIELDS: frozenset[str] = frozenset(
    {
        # OpenAI Chat Completions
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "metadata",
        "modalities",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "response_format",
        "service_tier",
        "store",
        "tool_choice",
        "tools",
        "top_logprobs",
        "user",
        "web_search_options",
        # engine sampling extensions (vLLM / SGLang / llama.cpp)
        "top_k",
        "min_p",
        "repetition_penalty",
        "min_tokens",
        "ignore_eos",
    }
)
"""Top-level keys of a plain request dict that :func:`coerce_request` moves into
``extra_body``: the other standard OpenAI Chat Completions body fields (OpenAI API
reference) plus the vLLM/SGLang/llama.cpp sampling extensions listed above."""


def _find_speculative_keys(value: Any, path: str = "") -> list[str]:
    found: list[str] = []
    if isinstance(value, Mapping):
        for key, sub in value.items():
            here = f"{path}.{key}" if path else str(key)
            if _SPECULATIVE_KEY.match(str(key)):
                found.append(here)
            found.extend(_find_speculative_keys(sub, here))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            found.extend(_find_speculative_keys(sub, f"{path}[{i}]"))
    return found


class ChatRequest(BaseModel):
    """One chat request, independent of engine and speculative method.

    Fields map to the OpenAI Chat Completions body; ``reasoning_mode`` is turned
    into each dialect's DeepSeek V4 controls by the route (see
    ``docs/measurement.md``). ``stream`` and ``stream_options`` are always set by
    the route and are not fields here.

    ``extra_body`` is the explicit way to send any other body field, including
    custom ones (``ChatRequest(messages=..., extra_body={"my_field": 1})``); it is
    merged into the body as given.

    Raises:
        pydantic.ValidationError: an unknown field, a value out of range, a
            ChatRequest field or thinking control repeated in ``extra_body``, or an
            engine-specific speculative setting (e.g. ``speculative_config``,
            ``num_speculative_tokens``, ``return_meta_info``, ``n_draft``,
            ``spec_*``) in ``extra_body``; those belong on
            ``EngineRoute.request_extras``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    messages: tuple[dict[str, Any], ...] = Field(
        min_length=1, description="OpenAI chat messages, each with at least a 'role'."
    )
    max_tokens: int | None = Field(
        default=None, ge=1, description="Upper bound on generated tokens (tokens)."
    )
    temperature: float | None = Field(
        default=None, ge=0.0, le=2.0, description="Sampling temperature."
    )
    top_p: float | None = Field(default=None, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    seed: int | None = Field(
        default=None, description="Sampling seed, where the engine honours it."
    )
    reasoning_mode: ReasoningMode = Field(
        default=ReasoningMode.non_think, description="DeepSeek V4 reasoning mode."
    )
    stop: tuple[str, ...] | None = Field(default=None, description="Stop strings.")
    reach_max_tokens: bool = Field(
        default=False,
        description="Ask the engine to keep generating past end-of-sequence up to max_tokens, "
        "where its dialect can (see EngineRoute.build_body); parity requests never set it.",
    )
    pinned_length: bool = Field(
        default=False,
        description="With reach_max_tokens: max_tokens is the prompt's natural length "
        "(workload.output_length = 'pinned'), so end-of-sequence stays allowed at that last "
        "token (EngineDialect.pinned_controls) instead of being masked past it.",
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="Other body fields, merged as given (e.g. 'tools', 'logprobs', "
        "'prediction', or custom engine fields); never engine speculative settings.",
    )

    if TYPE_CHECKING:
        # The signature type checkers see: lists where tuples are stored, and the
        # reasoning mode's string values (validated into the enum). Kept equal to
        # the fields by tests/test_typing_for_users.py.
        def __init__(
            self,
            *,
            messages: Sequence[dict[str, Any]],
            max_tokens: int | None = None,
            temperature: float | None = None,
            top_p: float | None = None,
            seed: int | None = None,
            reasoning_mode: ReasoningMode | ReasoningModeName = ReasoningMode.non_think,
            stop: Sequence[str] | None = None,
            reach_max_tokens: bool = False,
            pinned_length: bool = False,
            extra_body: dict[str, Any] = ...,
        ) -> None: ...

    @field_validator("messages")
    @classmethod
    def _messages_have_roles(cls, v: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        for i, msg in enumerate(v):
            if not isinstance(msg.get("role"), str):
                raise ValueError(f"messages[{i}] has no string 'role'")
        return v

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_as_tuple(cls, v: Any) -> Any:
        return (v,) if isinstance(v, str) else v

    @field_validator("extra_body")
    @classmethod
    def _no_speculative_or_owned(cls, v: dict[str, Any]) -> dict[str, Any]:
        spec = _find_speculative_keys(v)
        if spec:
            raise ValueError(
                f"engine-specific speculative settings {sorted(spec)} do not belong on a "
                "ChatRequest; put them on EngineRoute.request_extras"
            )
        owned = sorted(k for k in v if k in _OWNED_FIELDS)
        if owned:
            raise ValueError(
                f"extra_body may not set {owned}: use the ChatRequest field "
                "(reasoning_mode for thinking controls) or EngineRoute.request_extras"
            )
        return v

    def body_fields(self) -> dict[str, Any]:
        """Return the OpenAI body fields this request sets (no model/stream/reasoning).

        Shape: ``{"messages": [...], "max_tokens": int, ...}`` plus ``extra_body``
        merged at the top level. ``None`` fields are omitted.
        """
        body: dict[str, Any] = {"messages": [dict(m) for m in self.messages]}
        for name in ("max_tokens", "temperature", "top_p", "seed"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        if self.stop is not None:
            body["stop"] = list(self.stop)
        body.update(self.extra_body)
        return body


_DICT_FIELDS = frozenset(ChatRequest.model_fields) - {"extra_body"}
_ROUTE_FIELDS = frozenset({"model", "stream", "stream_options", "extra_body"})
# Every key a plain request dict may carry; the vocabulary for "did you mean".
_KNOWN_DICT_KEYS = _DICT_FIELDS | _ROUTE_FIELDS | _OWNED_FIELDS | PASSTHROUGH_FIELDS


def _unknown_key_error(key: str, value: Any) -> InitErrorDetails:
    near = difflib.get_close_matches(key, sorted(_KNOWN_DICT_KEYS), n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    message = (
        f"unknown request field {key!r}: {hint}a custom body field must be passed "
        f"explicitly in extra_body, e.g. {{'extra_body': {{{key!r}: ...}}}} or "
        f"ChatRequest(..., extra_body={{{key!r}: ...}})"
    )
    return InitErrorDetails(
        type=PydanticCustomError("unknown_request_field", message),
        loc=(key,),
        input=value,
    )


def coerce_request(request: ChatRequest | Mapping[str, Any]) -> ChatRequest:
    """Return ``request`` as a validated :class:`ChatRequest`.

    A plain dict of OpenAI body fields is accepted: the fields ChatRequest models
    are taken as such (``max_completion_tokens`` as ``max_tokens``), the standard
    body fields in :data:`PASSTHROUGH_FIELDS` and the dict's own ``extra_body``
    mapping go to ``extra_body`` (validated the same way), and ``model``,
    ``stream`` and ``stream_options`` are ignored: the route owns them. Any other
    key is refused, so a typo such as ``max_token`` cannot silently drop the token
    cap; put custom fields in ``extra_body`` explicitly.

    Raises:
        pydantic.ValidationError: the dict is not a valid request, including an
            unknown key (the error names the nearest known field) or an
            engine-specific speculative setting (which belongs on
            ``EngineRoute.request_extras``).
        TypeError: ``request`` is neither a ChatRequest nor a mapping.
    """
    if isinstance(request, ChatRequest):
        return request
    if not isinstance(request, Mapping):
        raise TypeError(f"request must be a ChatRequest or a dict, not {type(request).__name__}")
    known: dict[str, Any] = {}
    extra: dict[str, Any] = dict(request.get("extra_body") or {})
    unknown: list[InitErrorDetails] = []
    for key, value in request.items():
        if key in _ROUTE_FIELDS:
            continue
        if key == "max_completion_tokens" and "max_tokens" not in request:
            known["max_tokens"] = value
        elif key in _DICT_FIELDS:
            known[key] = value
        elif (
            key in PASSTHROUGH_FIELDS
            or key in _OWNED_FIELDS
            or _find_speculative_keys({key: value})
        ):
            # Owned and speculative keys are refused by the extra_body validator
            # with a message that says where they belong.
            extra[key] = value
        else:
            unknown.append(_unknown_key_error(str(key), value))
    if unknown:
        raise ValidationError.from_exception_data(ChatRequest.__name__, unknown)
    return ChatRequest.model_validate({**known, "extra_body": extra})
