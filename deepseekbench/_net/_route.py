"""``EngineRoute``: where a request goes and what engine-scoped extras it carries.

The route is the only place for engine-specific body fields: the extras a dialect
needs to report acceptance (SGLang ``return_spec_tokens_details``, vLLM continuous usage)
and any per-request speculative settings an engine accepts
(``request_extras``). It also maps :class:`~deepseekbench.ReasoningMode` to each
dialect's DeepSeek V4 thinking controls; the table and its sources are in
``docs/measurement.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from deepseekbench._dialects import EngineDialect, dialect_for
from deepseekbench._plan._route_checks import check_base_url, check_request_extras
from deepseekbench._types._axes import (
    Dialect,
    DialectName,
    ReasoningMode,
    Speculative,
    SpeculativeName,
)
from deepseekbench._types._request import ChatRequest
from deepseekbench._types._secrets import checked_key

__all__ = ["EngineRoute", "eos_controls", "reasoning_controls"]

_SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "proxy-authorization"})
_ADAPTER = "_held_adapter"  # where a route holds its dialect's adapter (EngineRoute.adapter)


def reasoning_controls(dialect: Dialect, mode: ReasoningMode) -> dict[str, Any]:
    """Return the body fields that select ``mode`` on DeepSeek V4 for ``dialect``.

    Asked of the dialect's adapter (``deepseekbench/_dialects/``):

    * ``vllm``, ``sglang``, ``auto``: ``chat_template_kwargs`` =
      ``{"thinking": bool}`` plus ``"reasoning_effort": "high"|"max"`` when
      thinking (read by the DeepSeek V4 chat encoder).
    * ``llamacpp``: the same ``chat_template_kwargs``, plus
      ``reasoning_format: "deepseek"`` when thinking so the thoughts arrive as
      ``reasoning_content``.
    * ``deepseek`` (DeepSeek API): ``thinking: {"type": "enabled"|"disabled"}``
      plus top-level ``reasoning_effort: "high"|"max"`` when enabled.
    * ``openai`` (other OpenAI-compatible hosts): top-level
      ``reasoning_effort`` = ``"high"`` or ``"max"`` when thinking, and nothing
      for ``non_think`` (the host's default applies): ``reasoning_effort:
      "none"`` is answered HTTP 400 by hosts that do not accept that value or
      the field for the model (Kilo-Org/cloud PR #3807), and a dialect never
      sends a field the caller did not ask for that a host may refuse. Send it
      explicitly with ``EngineRoute.request_extras`` where a host needs it.
    """
    return dialect_for(dialect).reasoning_controls(mode)


def eos_controls(dialect: Dialect, max_tokens: int | None) -> dict[str, Any]:
    """Body fields that make ``dialect`` generate ``max_tokens`` tokens, past EOS.

    Asked of the dialect's adapter:

    * ``vllm``, ``sglang``, ``auto``: ``ignore_eos: true`` and ``min_tokens:
      max_tokens`` (both sampling extensions of their chat endpoints);
    * ``llamacpp``: ``ignore_eos: true`` (llama-server has no ``min_tokens``);
    * ``openai``, ``deepseek``: nothing — hosted APIs offer neither, so their
      outputs may fall short of the target (the row says so).
    """
    return dialect_for(dialect).eos_controls(max_tokens)


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, Mapping):
            out[key] = _deep_merge(old, value)
        else:
            out[key] = value
    return out


class EngineRoute(BaseModel):
    """One serving endpoint: OpenAI base URL, model, dialect and engine-scoped extras.

    ``api_key`` is a ``SecretStr`` excluded from ``repr``, ``model_dump`` and
    JSON; it is sent only as ``Authorization: Bearer``.

    Raises:
        pydantic.ValidationError: a base URL that is not http(s), an unknown
            dialect, a secret header in ``headers`` (use ``api_key``), an
            ``api_key`` with a character an HTTP header cannot carry (CR/LF,
            another control character, non-ASCII), or
            ``request_extras`` that set ``model``, ``messages`` or ``stream``.
            Its message names the field, never the refused value (which may
            be a secret).
    """

    # hide_input_in_errors: a refused value may be a secret (a key in headers).
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    base_url: str = Field(description="OpenAI base URL, e.g. 'http://127.0.0.1:8000/v1'.")
    model: str = Field(min_length=1, description="The 'model' body field.")
    api_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    dialect: Dialect = Field(default=Dialect.auto)
    speculative: Speculative = Field(
        default=Speculative.off, description="Speculative method this route serves."
    )
    label: str | None = Field(default=None, description="Free-form route name for reports.")
    request_extras: dict[str, Any] = Field(
        default_factory=dict,
        description="Engine-scoped body fields deep-merged into every request body "
        "(e.g. per-request speculative settings an engine accepts).",
    )
    continuous_usage: bool = Field(
        default=False,
        description="Ask for usage on every chunk (stream_options.continuous_usage_stats; "
        "vLLM, SGLang, auto) so tokens per chunk are known.",
    )
    headers: dict[str, str] = Field(default_factory=dict, description="Extra HTTP headers.")
    served_spec_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Speculative depth (draft tokens per verify step) the server said it "
        "serves (llama.cpp /props, SGLang /get_server_info), set by the run before "
        "measuring; measurements carry it where no per-request depth is reported.",
    )

    if TYPE_CHECKING:
        # The signature type checkers see: enum fields also take their documented
        # string values (validated into the enum). Kept equal to the fields by
        # tests/test_typing_for_users.py.
        def __init__(
            self,
            *,
            base_url: str,
            model: str,
            api_key: SecretStr | str | None = None,
            dialect: Dialect | DialectName = Dialect.auto,
            speculative: Speculative | SpeculativeName = Speculative.off,
            label: str | None = None,
            request_extras: dict[str, Any] = ...,
            continuous_usage: bool = False,
            headers: dict[str, str] = ...,
            served_spec_tokens: int | None = None,
        ) -> None: ...

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        return check_base_url(v)

    @field_validator("api_key", mode="before")
    @classmethod
    def _blank_key_is_none(cls, v: Any) -> Any:
        # a whitespace-only key is no key (it would send "Bearer " and redact spaces);
        # a key a header cannot carry (CR/LF, non-ASCII) is refused here, not mid-send
        return checked_key(v, "api_key") if isinstance(v, str | SecretStr) else v

    @field_validator("headers")
    @classmethod
    def _no_secret_headers(cls, v: dict[str, str]) -> dict[str, str]:
        bad = sorted(k for k in v if k.lower() in _SECRET_HEADERS)
        if bad:
            raise ValueError(f"headers {bad} carry credentials: pass the key as api_key")
        return v

    @field_validator("request_extras")
    @classmethod
    def _extras_not_owned(cls, v: dict[str, Any]) -> dict[str, Any]:
        return check_request_extras(v)

    @property
    def adapter(self) -> EngineDialect:
        """The dialect's adapter (:func:`~deepseekbench._dialects.dialect_for`), looked
        up once and held by the route (a copy with another dialect looks again)."""
        held = self.__dict__.get(_ADAPTER)
        if not isinstance(held, EngineDialect) or held.name != self.dialect:
            held = dialect_for(self.dialect)
            self.__dict__[_ADAPTER] = held  # not a field: not dumped, compared or validated
        return held

    @property
    def chat_url(self) -> str:
        """``{base_url}/chat/completions``."""
        return f"{self.base_url}/chat/completions"

    @property
    def metrics_url(self) -> str:
        """The Prometheus endpoint: the base URL without a trailing ``/v1``, plus ``/metrics``."""
        base = self.base_url
        if base.endswith("/v1"):
            base = base[: -len("/v1")]
        return f"{base}/metrics"

    @property
    def has_api_key(self) -> bool:
        """Whether an API key is set (the key itself is never shown)."""
        return self.api_key is not None

    def request_headers(self) -> dict[str, str]:
        """Headers for a streamed chat request (Accept, identity encoding, auth if set)."""
        headers = {
            "accept": "text/event-stream",
            "accept-encoding": "identity",
            "content-type": "application/json",
        }
        headers.update(self.headers)
        if self.api_key is not None:
            headers["authorization"] = f"Bearer {self.api_key.get_secret_value()}"
        return headers

    def build_body(self, request: ChatRequest) -> dict[str, Any]:
        """Return the JSON body for ``request`` on this route.

        Order: the request's fields, the dialect's reasoning controls, its
        :func:`eos_controls` when ``request.reach_max_tokens`` (its
        ``pinned_controls`` when the request's ``pinned_length`` too), the
        dialect's reporting extras (its ``token_id_controls`` on a sampled
        request, temperature > 0: vLLM ``return_token_ids: true``; SGLang/auto
        ``return_spec_tokens_details: true``, answered by a trailing ``sglext``
        chunk; never ``return_meta_info``, which current SGLang refuses with HTTP
        400 on a streamed request;
        ``stream_options.continuous_usage_stats`` when ``continuous_usage`` on
        vLLM/SGLang/auto), then ``request_extras`` deep-merged; finally
        ``model``, ``stream: true`` and ``stream_options.include_usage: true``
        are forced.
        """
        body = request.body_fields()
        adapter = self.adapter
        body.update(adapter.reasoning_controls(request.reasoning_mode))
        if request.reach_max_tokens and request.pinned_length:
            body.update(adapter.pinned_controls(request.max_tokens))
        elif request.reach_max_tokens:
            body.update(adapter.eos_controls(request.max_tokens))
        stream_options: dict[str, Any] = {}
        body.update(adapter.report_extras())
        if (request.temperature or 0.0) > 0:  # sampled: the witness scores the ids
            body.update(adapter.token_id_controls())
        if self.continuous_usage and adapter.continuous_usage:
            stream_options["continuous_usage_stats"] = True
        body["stream_options"] = stream_options
        body = _deep_merge(body, self.request_extras)
        body["model"] = self.model
        body["stream"] = True
        so = body.get("stream_options")
        body["stream_options"] = {**(so if isinstance(so, dict) else {}), "include_usage": True}
        return body
