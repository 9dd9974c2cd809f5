"""The reference engine's HTTP routes: OpenAI-compatible chat completions and friends.

Routes: ``POST /v1/chat/completions`` (stream and non-stream), ``GET /v1/models``,
``GET /health``, ``GET /metrics`` (Prometheus text), ``POST /tokenize``, ``GET /v1/timelines``
(ground truth, with ``record_send_times``), the configuration endpoint of the dialect it
speaks (``GET /props`` as llama.cpp, ``GET /get_server_info`` as SGLang: the draft depth,
as :mod:`deepseekbench._execute._served_config` reads it); ``HEAD`` on any ``GET`` route.
Streaming follows vLLM's layout: a role-only first frame at the first output, one content chunk per
verify step (all tokens the step accepted), a finish chunk, a usage chunk with
``choices: []`` when ``stream_options.include_usage`` is true, then ``[DONE]``.
Bad requests get OpenAI-style ``{"error": {...}}`` bodies: 400 (invalid JSON or
fields, prompt over the context), 404 (unknown model or route), 405, 413.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
from anyio.streams.memory import MemoryObjectReceiveStream
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deepseekbench._engine._completions import CompletionError, completions_answer
from deepseekbench._engine._config import EngineConfig
from deepseekbench._engine._dialects import (
    RequestStats,
    choice_extras,
    sglang_sglext,
    tail_extras,
    usage_block,
)
from deepseekbench._engine._faults import FAULT_HEADER, ActiveFaults, FaultKind, faults_for_request
from deepseekbench._engine._http import Headers, HttpRequest, Responder
from deepseekbench._engine._metrics import EngineMetrics
from deepseekbench._engine._model import EOS_CH, ReferenceLM, context_of
from deepseekbench._engine._numerics import (
    MAX_TOP_LOGPROBS,
    NumericsLM,
    chat_logprobs,
    prompt_logprobs,
)
from deepseekbench._engine._prefix_cache import PrefixCache
from deepseekbench._engine._reasoning import REASONING_PREFIX, ReasoningLM, reasoning_cap
from deepseekbench._engine._scheduler import Emission, Scheduler, Sequence
from deepseekbench._engine._speculative import Decoder, LanguageModel, SamplerFaults
from deepseekbench._engine._tokenizer import EOS as EOS_ID
from deepseekbench._engine._tokenizer import TOKENIZER
from deepseekbench._types._axes import Dialect

_JSON: Headers = [("content-type", "application/json")]
_CONFIG_PATHS: dict[Dialect, str] = {
    Dialect.llamacpp: "/props",
    Dialect.sglang: "/get_server_info",
}
"""The configuration endpoint each dialect's engine serves (the draft depth)."""
MODEL_WINDOW_CHARS = 512
"""The reference model reads the last 512 characters of the question (every corpus
question is shorter); a longer prompt is still prefilled and costed in full."""


@dataclass(frozen=True, slots=True)
class ChunkSend:
    """Ground truth for one write: when the server finished sending it.

    ``index``: 0-based write number in the response; ``kind``: ``role``,
    ``reasoning``, ``content``, ``finish``, ``usage``, ``done``, ``comment`` or
    ``error``; ``t_s``: ``time.perf_counter()`` just before the write that
    completes it was handed to the socket (seconds, same clock as an in-process
    client; no client can receive the bytes earlier); ``tokens``: tokens it carried.
    """

    index: int
    kind: str
    t_s: float
    tokens: int


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class _StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False
    continuous_usage_stats: bool = False


class ChatRequest(BaseModel):
    """The fields of a chat completion request the engine reads (others ignored)."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[_Message] = Field(min_length=1)
    stream: bool = False
    stream_options: _StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)  # -1 or 0: no cut (vLLM)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=1)
    return_meta_info: bool = False
    return_spec_tokens_details: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    thinking: dict[str, Any] | bool | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(default=0, ge=0)
    # OpenAI chat log-probabilities
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    # vLLM's teacher-forcing fields (prompt log-probabilities of a continued final message)
    prompt_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    continue_final_message: bool = False
    add_generation_prompt: bool = True
    return_token_ids: bool = False


class ApiError(Exception):
    """An OpenAI-style error response: HTTP ``status`` and the error object fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _text_of(content: str | list[dict[str, Any]] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")


def render_prompt(
    messages: list[_Message], *, add_generation_prompt: bool = True, continue_final: bool = False
) -> str:
    """The chat template: ``<|role|>content`` lines then ``<|assistant|>`` (chars = tokens).

    ``continue_final``: the last message is left open (no line break) for the model to
    continue, as vLLM's ``continue_final_message``; ``add_generation_prompt=False``
    drops the trailing ``<|assistant|>``."""
    if continue_final:
        *head, last = messages
        return render_prompt(head, add_generation_prompt=False) + (
            f"<|{last.role}|>{_text_of(last.content)}"
        )
    lines = "".join(f"<|{m.role}|>{_text_of(m.content)}\n" for m in messages)
    return lines + ("<|assistant|>" if add_generation_prompt else "")


_CATEGORY_PATTERNS = (
    (re.compile(r"^What is \d+ [+×] \d+\?$"), "arithmetic"),
    (re.compile(r"^Count from \d+ to \d+\.$"), "counting"),
    (re.compile(r"^Reverse the word \w+\.$"), "reversal"),
    (re.compile(r"^Complete the Python function "), "code"),
)


def reasoning_text(question: str, effort: str) -> str:
    """The deterministic reasoning the engine streams when thinking is on."""
    category = next((c for p, c in _CATEGORY_PATTERNS if p.match(question)), "general")
    text = f"Task type: {category}. Answer in the trained format."
    if effort == "max":
        text += " Check each character before answering."
    return text


def thinking_effort(req: ChatRequest) -> str | None:
    """``None`` when thinking is off, else the effort (``high`` or ``max``)."""
    kwargs = req.chat_template_kwargs or {}
    enabled: bool | None = None
    for key in ("thinking", "enable_thinking"):
        if isinstance(kwargs.get(key), bool):
            enabled = bool(kwargs[key])
    if isinstance(req.thinking, bool):
        enabled = req.thinking
    elif isinstance(req.thinking, dict) and req.thinking.get("type") in ("enabled", "disabled"):
        enabled = req.thinking["type"] == "enabled"
    effort = req.reasoning_effort
    if effort is not None and effort not in ("none", "minimal") and enabled is None:
        enabled = True
    if not enabled:
        return None
    return "max" if effort in ("max", "xhigh") else "high"


MAX_TIMELINES = 4096
"""Completions whose chunk timelines are kept (``record_send_times``): the newest;
an older one is dropped and counted (``dropped`` in ``GET /v1/timelines``)."""

MAX_TIMELINE_CHUNKS = 1_000_000
"""Chunks kept over all kept timelines (about 60 MB of ``GET /v1/timelines`` JSON):
past it the oldest other completion's timeline is dropped (counted in
``dropped``); a single completion past it stops recording, its later chunks
counted in its ``chunks_dropped``. Engine memory and the answer stay bounded."""


class EngineState:
    """Everything the routes share: config, model, scheduler, metrics, ground truth."""

    def __init__(self, config: EngineConfig, lm: ReferenceLM) -> None:
        self.config = config
        self.lm = lm
        self.numerics = NumericsLM(lm) if config.numerics else None
        depth = config.effective_draft_depth
        self.metrics = EngineMetrics(config.model_name, depth)
        model_draft = config.speculative.value not in ("off", "ngram")
        self.scheduler = Scheduler(
            config.cost, self.metrics, model_draft=model_draft,
            kv_cache_tokens=config.kv_cache_tokens, eos_counted=config.eos_counted,
        )  # fmt: skip
        self.prefix_cache = PrefixCache(enabled=config.prefix_cache_hits_allowed)
        self.send_times: dict[str, list[ChunkSend]] = {}
        self.arrivals: dict[str, tuple[float, str | None]] = {}
        self.timelines_dropped = 0
        self.chunks_dropped: dict[str, int] = {}
        self._chunks_kept = 0
        self._fault_rng = random.Random(config.seed)
        self._request_rng = random.Random(config.seed ^ 0x5EED)
        self._next_id = 0

    def start_timeline(self, cid: str) -> None:
        """Start completion ``cid``'s chunk record; the oldest record is dropped past
        :data:`MAX_TIMELINES` completions (counted in ``timelines_dropped``)."""
        self.send_times[cid] = []
        while len(self.send_times) > MAX_TIMELINES:
            self._drop_timeline(next(iter(self.send_times)))

    def record_chunk(self, cid: str, chunk: ChunkSend) -> None:
        """Append ``chunk`` to ``cid``'s record within :data:`MAX_TIMELINE_CHUNKS`."""
        record = self.send_times.get(cid)
        if record is None:  # dropped as one of the oldest
            return
        while self._chunks_kept >= MAX_TIMELINE_CHUNKS:
            other = next((k for k in self.send_times if k != cid), None)
            if other is None:
                self.chunks_dropped[cid] = self.chunks_dropped.get(cid, 0) + 1
                return
            self._drop_timeline(other)
        record.append(chunk)
        self._chunks_kept += 1

    def _drop_timeline(self, cid: str) -> None:
        self._chunks_kept -= len(self.send_times.pop(cid, ()))
        self.arrivals.pop(cid, None)
        self.chunks_dropped.pop(cid, None)
        self.timelines_dropped += 1

    def new_id(self) -> str:
        """A fresh completion id (``chatcmpl-<n>``)."""
        self._next_id += 1
        return f"chatcmpl-{self._next_id:08d}"

    async def handle(self, request: HttpRequest, responder: Responder) -> None:
        """Route one request; API errors become JSON error responses."""
        try:
            await self._route(request, responder)
        except ApiError as err:
            if not responder.started:
                headers = list(_JSON)
                if err.status == 429:
                    headers.append(("retry-after", "1"))
                await responder.full(err.status, headers, orjson.dumps(err.body))

    async def _route(self, request: HttpRequest, responder: Responder) -> None:
        path = request.target.split("?", 1)[0]
        routes = {
            "/v1/chat/completions": "POST",
            "/v1/completions": "POST",
            "/v1/models": "GET",
            "/health": "GET",
            "/metrics": "GET",
            "/tokenize": "POST",
            "/v1/timelines": "GET",
        }
        info = _CONFIG_PATHS.get(self.config.dialect)
        if info is not None:
            routes[info] = "GET"
        if path not in routes:
            raise ApiError(404, f"no route {path}", kind="not_found_error", code="not_found")
        method = "GET" if request.method == "HEAD" else request.method  # HEAD: GET minus body
        if method != routes[path]:
            raise ApiError(
                405, f"{request.method} not allowed on {path}", code="method_not_allowed"
            )
        if path == "/health":
            await responder.full(200, _JSON, b'{"status":"ok"}')
        elif path == "/metrics":
            body = self.metrics.exposition()
            await responder.full(200, [("content-type", "text/plain; version=0.0.4")], body)
        elif path == "/v1/models":
            card = {
                "id": self.config.model_name,
                "object": "model",
                "created": 0,
                "owned_by": "deepseekbench",
                "max_model_len": self.config.max_context_tokens,
            }
            await responder.full(200, _JSON, orjson.dumps({"object": "list", "data": [card]}))
        elif path == "/tokenize":
            await responder.full(200, _JSON, orjson.dumps(self._tokenize(request)))
        elif path == "/v1/timelines":
            await responder.full(200, _JSON, self._timelines())
        elif path == info:
            await responder.full(200, _JSON, orjson.dumps(self._server_info()))
        elif path == "/v1/completions":
            await responder.full(200, _JSON, orjson.dumps(self._completions(request)))
        else:
            await self._chat(request, responder)

    def _tokenize(self, request: HttpRequest) -> dict[str, Any]:
        """``/tokenize``: ``{"prompt"}`` (vLLM, SGLang), ``{"content"}`` (llama.cpp) or
        ``{"messages"}`` (rendered with the chat template) → ``{"tokens", "count",
        "max_model_len"}``; one token per character (:mod:`._tokenizer`)."""
        try:
            raw = orjson.loads(request.body)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"invalid JSON body: {exc}", code="invalid_json") from None
        text = raw.get("prompt", raw.get("content")) if isinstance(raw, dict) else None
        if isinstance(raw, dict) and text is None and isinstance(raw.get("messages"), list):
            try:
                msgs = [_Message.model_validate(m) for m in raw["messages"]]
            except ValidationError:
                raise ApiError(400, "invalid messages", param="messages") from None
            text = (
                render_prompt(msgs)
                if raw.get("add_generation_prompt", True)
                else (render_prompt(msgs).removesuffix("<|assistant|>"))
            )
        if not isinstance(text, str):
            raise ApiError(400, "give a string 'prompt', 'content' or a 'messages' list")
        ids = TOKENIZER.encode(text)
        return {"tokens": ids, "count": len(ids), "max_model_len": self.config.max_context_tokens}

    def _completions(self, request: HttpRequest) -> dict[str, Any]:
        """``/v1/completions``: token-id prompt scoring (:mod:`._completions`)."""
        numerics = self.numerics
        try:
            return completions_answer(
                request.body, lm=self.lm, model=self.config.model_name, cid=self.new_id(),
                verify_target=numerics.verify_target if numerics is not None else self.lm.target,
                window=MODEL_WINDOW_CHARS,
            )  # fmt: skip
        except CompletionError as exc:
            raise ApiError(400, str(exc), param=exc.param) from None

    def _server_info(self) -> dict[str, Any]:
        """The draft depth where the dialect's engine says it: llama.cpp ``/props``
        (``speculative.n_max``, ``speculative.types`` ``"none"`` when off), SGLang
        ``/get_server_info`` (``speculative_algorithm``, ``speculative_num_steps``, and
        ``enable_deterministic_inference`` when configured)."""
        cfg = self.config
        depth = cfg.effective_draft_depth
        spec = cfg.speculative.value
        if cfg.dialect is Dialect.llamacpp:
            params = {
                "n_predict": -1,
                "speculative.n_max": depth or 16,  # llama.cpp keeps its default when off
                "speculative.types": spec if depth else "none",
            }
            settings = {"params": params}
            return {"model_alias": cfg.model_name, "default_generation_settings": settings}
        names = {"off": None, "mtp": "EAGLE", "eagle3": "EAGLE3", "draft": "STANDALONE"}
        algorithm = names.get(spec, spec.upper())
        info: dict[str, Any] = {
            "model_path": cfg.model_name,
            "speculative_algorithm": algorithm,
            "speculative_num_steps": depth or None,
        }
        if cfg.deterministic_inference is not None:  # a ServerArgs field
            info["enable_deterministic_inference"] = cfg.deterministic_inference
        return info

    def _timelines(self) -> bytes:
        """Every recorded completion's timeline as JSON (see docs/engine.md)."""
        if not self.config.record_send_times:
            raise ApiError(
                404,
                "timelines are recorded only with --record-send-times",
                kind="not_found_error",
                code="not_recorded",
            )
        data = []
        for cid, sends in list(self.send_times.items()):
            arrival, request_id = self.arrivals.get(cid, (None, None))
            chunks = [
                {"index": c.index, "kind": c.kind, "t_s": c.t_s, "tokens": c.tokens} for c in sends
            ]
            data.append(
                {
                    "id": cid,
                    "request_id": request_id,
                    "arrival_s": arrival,
                    "chunks": chunks,
                    "chunks_dropped": self.chunks_dropped.get(cid, 0),
                }
            )
        clock = time.get_clock_info("perf_counter").implementation
        return orjson.dumps(
            {
                "object": "list",
                "clock": clock,
                "dropped": self.timelines_dropped,
                "data": data,
            }
        )

    # -- chat completions ---------------------------------------------------

    def _parse(self, request: HttpRequest) -> ChatRequest:
        try:
            raw = orjson.loads(request.body)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"invalid JSON body: {exc}", code="invalid_json") from None
        if not isinstance(raw, dict):
            raise ApiError(400, "the body must be a JSON object", code="invalid_json")
        try:
            req = ChatRequest.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            param = ".".join(str(p) for p in first["loc"])
            raise ApiError(400, f"invalid field {param}: {first['msg']}", param=param) from None
        if req.stream and req.return_meta_info and self.config.dialect is Dialect.sglang:
            # current SGLang refuses this combination (shared/cases/requests/01)
            raise ApiError(
                400, "return_meta_info is not supported with streaming", param="return_meta_info"
            )
        if req.top_logprobs is not None and not req.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs = true", param="top_logprobs")
        _check_teacher_forcing(req)
        if req.model is not None and req.model != self.config.model_name:
            raise ApiError(
                404,
                f"The model `{req.model}` does not exist.",
                kind="NotFoundError",
                param="model",
                code="model_not_found",
            )
        return req

    async def _chat(self, request: HttpRequest, responder: Responder) -> None:
        req = self._parse(request)
        faults = self._faults(request)
        if FaultKind.drop in faults and not req.stream:
            await responder.drop()
            return
        prompt = render_prompt(
            req.messages,
            add_generation_prompt=req.add_generation_prompt,
            continue_final=req.continue_final_message,
        )
        seq, receive, stream = self._submit(req, faults, prompt, self._max_tokens(req, prompt))
        if self.config.record_send_times:
            self.arrivals[stream.id] = (request.arrival_s, request.headers.get("x-request-id"))
        try:
            async with receive:
                if req.stream:
                    await stream.stream(receive, responder, seq.cancel)
                else:
                    await stream.whole(receive, responder, seq.cancel)
        finally:
            seq.cancel()

    def _faults(self, request: HttpRequest) -> ActiveFaults:
        """The faults this request gets (the engine's and its header's); an injected
        HTTP error is raised here, before anything is decoded."""
        try:
            faults = faults_for_request(
                self.config.faults, request.headers.get(FAULT_HEADER), self._fault_rng
            )
        except ValueError as exc:
            raise ApiError(400, str(exc), param=FAULT_HEADER) from None
        if FaultKind.http_429 in faults:
            raise ApiError(429, "rate limited (injected)", kind="rate_limit_error", code="429")
        if FaultKind.http_503 in faults:
            raise ApiError(503, "overloaded (injected)", kind="service_unavailable", code="503")
        return faults

    def _max_tokens(self, req: ChatRequest, prompt: str) -> int:
        """The request's output cap (tokens), within the context window; a prompt past
        the window is refused."""
        prompt_tokens = len(prompt)
        limit = self.config.max_context_tokens
        if prompt_tokens > limit:
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens; "
                f"the messages use {prompt_tokens} tokens.",
                param="messages",
                code="context_length_exceeded",
            )
        asked = req.max_completion_tokens or req.max_tokens or self.config.default_max_tokens
        return max(1, min(asked, limit - prompt_tokens))

    def _submit(
        self, req: ChatRequest, faults: ActiveFaults, prompt: str, max_tokens: int
    ) -> tuple[Sequence, MemoryObjectReceiveStream[Emission], _Stream]:
        """The request's sequence queued on the scheduler: its decoder, its reasoning
        (forced text, or decoded with ``decoded_reasoning``) and prefix-cache hit;
        returns the sequence, its emissions and the output."""
        prompt_tokens = len(prompt)
        users = [m for m in req.messages if m.role == "user"]
        question = _text_of(users[-1].content).strip() if users else ""
        effort = thinking_effort(req)
        forced = _forced_text(req)  # a continued answer: its reasoning is over
        reasoning = reasoning_text(question, effort) if effort and not forced else ""
        seed = req.seed if req.seed is not None else self._request_rng.getrandbits(32)
        numerics = self.numerics.verify_argmax if self.numerics is not None else None
        rng = random.Random(seed)
        decoder = _decoder_for(self, self.lm, req, rng, self.config.sampler_faults, numerics)
        think: tuple[Decoder, str, int] | None = None
        if reasoning and self.config.decoded_reasoning:  # its own draws: the answer's stay
            lm, lossy = ReasoningLM(self.lm, reasoning), self.config.faults_for("reasoning")
            think_rng = random.Random(f"{seed}:reasoning")
            think = (_decoder_for(self, lm, req, think_rng, lossy), REASONING_PREFIX,
                     reasoning_cap(reasoning))  # fmt: skip
            reasoning = ""
        cached = self.prefix_cache.lookup(prompt)
        self.metrics.prefix_lookup(prompt_tokens, cached)
        ctx = context_of(question[-MODEL_WINDOW_CHARS:]) + forced
        seq, receive = self.scheduler.submit(
            ctx,
            decoder,
            prompt_tokens=prompt_tokens,
            reasoning=reasoning,
            max_tokens=max_tokens,
            min_tokens=max_tokens if req.ignore_eos else min(req.min_tokens, max_tokens),
            cached_tokens=cached,
            think=think,
        )
        stream = _Stream(self, req, faults, prompt_tokens, len(reasoning), ctx)
        stream.prompt = prompt
        return seq, receive, stream


def _decoder_for(
    state: EngineState, lm: LanguageModel, req: ChatRequest, rng: random.Random,
    faults: SamplerFaults, verify_argmax: Any = None,
) -> Decoder:  # fmt: skip
    """The request's decoder over ``lm`` (its temperature, top-k and top-p)."""
    return Decoder(
        lm,
        state.config.speculative,
        state.config.effective_draft_depth,
        temperature=req.temperature if req.temperature is not None else 0.0,
        rng=rng,
        verify_argmax=verify_argmax,
        top_k=req.top_k or 0,
        top_p=req.top_p if req.top_p is not None else 1.0,
        faults=faults,
    )


def _check_teacher_forcing(req: ChatRequest) -> None:
    """vLLM's refusals of its teacher-forcing fields (HTTP 400)."""
    if req.continue_final_message and req.add_generation_prompt:
        raise ApiError(
            400,
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            param="continue_final_message",
        )
    if req.continue_final_message and req.messages[-1].role != "assistant":
        raise ApiError(
            400, "continue_final_message needs a final assistant message", param="messages"
        )
    if req.prompt_logprobs is not None and req.stream:
        raise ApiError(
            400, "`prompt_logprobs` are not available when `stream=True`.", param="stream"
        )


def _forced_text(req: ChatRequest) -> str:
    """The final assistant message continued (``continue_final_message``), else ``""``."""
    return _text_of(req.messages[-1].content) if req.continue_final_message else ""


def _stops(req: ChatRequest) -> list[str]:
    if req.stop is None:
        return []
    return [s for s in ([req.stop] if isinstance(req.stop, str) else req.stop) if s]


class _Stream:
    """One chat completion's output: stop strings, dialect extras, faults, ground truth."""

    def __init__(
        self,
        state: EngineState,
        req: ChatRequest,
        faults: ActiveFaults,
        prompt_tokens: int,
        reasoning_chars: int,
        ctx: str = "",
    ) -> None:
        self.state = state
        self.ctx = ctx  # the model context the content continues (logprobs)
        self.prompt = ""  # the rendered prompt (prompt logprobs)
        self.eos = False  # the model emitted end-of-sequence (logprobs show it, as vLLM's)
        self.req = req
        self.faults = faults
        self.id = state.new_id()
        self.created = int(time.time())
        self.stats = RequestStats(prompt_tokens, state.config.effective_draft_depth)
        self.stops = _stops(req)
        self.text = ""
        self.held = ""
        self.reasoning = ""
        self.finish: str | None = None
        self.t_submit = time.perf_counter()
        self.t_first: float | None = None
        self.t_last = self.t_submit
        self._writes = 0
        self._recording = state.config.record_send_times
        if self._recording:
            state.start_timeline(self.id)

    def _release(self, new: str, *, final: bool, cancel: Any) -> str:
        """Content safe to send: cut at a stop string, holding back a possible stop prefix."""
        if not self.stops:
            return new
        buf = self.held + new
        hits = [i for s in self.stops if (i := buf.find(s)) >= 0]
        if hits:
            self.held = ""
            self.finish = "stop"
            cancel()
            return buf[: min(hits)]
        keep = 0
        if not final:
            for stop in self.stops:
                for n in range(min(len(stop) - 1, len(buf)), keep, -1):
                    if buf.endswith(stop[:n]):
                        keep = n
                        break
        self.held = buf[len(buf) - keep :]
        return buf[: len(buf) - keep]

    def _absorb(self, em: Emission, cancel: Any) -> tuple[str, str]:
        """Update stats from one emission; returns (reasoning, content) to send."""
        now = time.perf_counter()
        if self.t_first is None:
            self.t_first = now
        self.t_last = now
        st = self.stats
        st.add_step(em.drafted, em.accepted)
        st.completion_tokens += em.tokens
        if em.reasoning:
            st.reasoning_tokens += len(em.reasoning)
            self.reasoning += em.reasoning
        content = self._release(em.content, final=em.finish_reason is not None, cancel=cancel)
        self.text += content
        if em.finish_reason is not None and self.finish is None:
            self.finish = em.finish_reason
            self.eos = em.finish_reason == "stop"
        if em.admitted_s is not None:  # waited for the running step to end
            st.queue_ms = max(0.0, (em.admitted_s - self.t_submit) * 1000.0)
        st.prompt_ms = (self.t_first - self.t_submit) * 1000.0
        st.predicted_ms = (self.t_last - self.t_first) * 1000.0
        return em.reasoning, content

    def _logprobs(self, start: int, text: str) -> dict[str, Any]:
        """OpenAI ``logprobs`` for ``text``, the content from character ``start`` on."""
        numerics = self.state.numerics
        dist_of = numerics.target if numerics is not None else self.state.lm.target
        ctx = self.ctx + self.text[:start]
        return chat_logprobs(dist_of, ctx, text, self.req.top_logprobs or 0)

    def _prompt_extras(self) -> dict[str, Any]:
        """vLLM's top-level ``prompt_logprobs`` (asked) and ``prompt_token_ids``
        (``return_token_ids``): one pass over the prompt, the forced output scored as a
        verify pass scores it (:func:`~deepseekbench._engine._numerics.prompt_logprobs`)."""
        out: dict[str, Any] = {}
        if self.req.prompt_logprobs is not None:
            state, forced = self.state, _forced_text(self.req)
            numerics = state.numerics
            out["prompt_logprobs"] = prompt_logprobs(
                self.prompt,
                forced_from=len(self.prompt) - len(forced),
                model_ctx=self.ctx[: len(self.ctx) - len(forced)],
                template_dist=state.lm.target,
                forced_dist=numerics.verify_target if numerics is not None else state.lm.target,
                top_k=self.req.prompt_logprobs,
            )
        if self.req.return_token_ids:
            out["prompt_token_ids"] = TOKENIZER.encode(self.prompt)
        return out

    # -- non-stream ---------------------------------------------------------

    async def whole(self, receive: Any, responder: Responder, cancel: Any) -> None:
        async for em in receive:
            self._absorb(em, cancel)
            if self.finish is not None:
                break
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": self.finish or "stop",
        }
        if self.req.logprobs:
            choice["logprobs"] = self._logprobs(0, self.text + (EOS_CH if self.eos else ""))
        if self.req.return_token_ids:
            ids = TOKENIZER.encode(self.reasoning + self.text)
            choice["token_ids"] = ids + ([EOS_ID] if self.eos else [])
        dialect = self.state.config.dialect
        choice.update(
            choice_extras(dialect, self.stats, return_meta_info=self.req.return_meta_info)
        )
        body: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.state.config.model_name,
            "choices": [choice],
            "usage": usage_block(self.stats),
        }
        body.update(tail_extras(dialect, self.stats))
        body.update(self._prompt_extras())
        sglext = sglang_sglext(self.stats) if dialect is Dialect.sglang else None
        if sglext is not None and self.req.return_spec_tokens_details:
            body["sglext"] = sglext
        if FaultKind.error_event in self.faults:
            raise ApiError(500, "internal engine error (injected)", kind="InternalServerError")
        await responder.full(200, [*_JSON, ("x-request-id", self.id)], orjson.dumps(body))

    # -- stream -------------------------------------------------------------

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        obj: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.state.config.model_name,
            "choices": choices,
        }
        obj.update(extra)
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    async def _write(self, responder: Responder, data: bytes, kind: str, tokens: int = 0) -> None:
        faults = self.faults
        if kind != "comment" and FaultKind.keepalive in faults:
            await self._write(responder, b": keep-alive\n\n", "comment")
        pieces = [data]
        if FaultKind.split_utf8 in faults:
            pos = next((i for i, b in enumerate(data) if b >= 0xC0), -1)
            if pos >= 0:
                pieces = [data[: pos + 1], data[pos + 1 :]]
        if len(pieces) == 1 and FaultKind.split_writes in faults and len(data) > 2:
            mid = len(data) // 2
            pieces = [data[:mid], data[mid:]]
        t_s = 0.0
        for i, piece in enumerate(pieces):
            if i:
                await anyio.sleep(faults.config.split_pause_ms / 1000.0)
            # stamped before the send: anyio/trio may yield after the syscall, letting an
            # in-process client read the bytes before a stamp taken afterwards
            t_s = time.perf_counter()
            await responder.write(piece)
        if self._recording:
            self.state.record_chunk(self.id, ChunkSend(self._writes, kind, t_s, tokens))
        self._writes += 1

    async def stream(self, receive: Any, responder: Responder, cancel: Any) -> None:
        faults = self.faults
        await responder.start(
            200,
            [
                ("content-type", "text/event-stream"),
                ("cache-control", "no-cache"),
                ("x-request-id", self.id),
            ],
        )
        if FaultKind.keepalive in faults:
            await self._write(responder, b": keep-alive\n\n", "comment")
        opts = self.req.stream_options or _StreamOptions()
        content_chunks = 0
        stalled = False
        async for em in receive:
            content_chunks += await self._emit(responder, em, cancel, opts)
            if content_chunks >= faults.config.after_chunks:
                if FaultKind.stall in faults and not stalled:
                    stalled = True
                    await anyio.sleep(faults.config.stall_ms / 1000.0)
                if await self._mid_stream_fault(responder, cancel):
                    return
            if self.finish is not None:
                break
        await self._tail(responder, opts)

    async def _emit(
        self, responder: Responder, em: Emission, cancel: Any, opts: _StreamOptions
    ) -> int:
        """One emission's chunks (the role chunk before the first); returns 1 when it
        sent a reasoning or content chunk, else 0."""
        first = self.t_first is None
        reasoning, content = self._absorb(em, cancel)
        if first:
            role = {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "finish_reason": None,
            }
            zero = {
                "prompt_tokens": self.stats.prompt_tokens,
                "completion_tokens": 0,
                "total_tokens": self.stats.prompt_tokens,
            }
            role_usage = {"usage": zero} if opts.continuous_usage_stats else {}
            await self._write(responder, self._chunk([role], **role_usage), "role")
        usage = {"usage": usage_block(self.stats)} if opts.continuous_usage_stats else {}
        if not (reasoning or content):
            return 0
        delta: dict[str, Any] = (
            {"reasoning_content": reasoning} if reasoning else {"content": content}
        )
        choice = {"index": 0, "delta": delta, "finish_reason": None}
        if self.req.return_token_ids:  # vLLM: the chunk's sampled ids, per choice
            choice["token_ids"] = TOKENIZER.encode(reasoning or content)
        if content and self.req.logprobs:
            choice["logprobs"] = self._logprobs(len(self.text) - len(content), content)
        kind = "reasoning" if reasoning else "content"
        await self._write(responder, self._chunk([choice], **usage), kind, em.tokens)
        return 1

    async def _mid_stream_fault(self, responder: Responder, cancel: Any) -> bool:
        """An ``error_event`` or ``drop`` fault, fired: True when it ended the stream."""
        if FaultKind.error_event in self.faults:
            cancel()
            err = {
                "error": {
                    "message": "internal engine error (injected)",
                    "type": "InternalServerError",
                    "code": 500,
                }
            }
            await self._write(responder, b"data: " + orjson.dumps(err) + b"\n\n", "error")
            await responder.end()
            return True
        if FaultKind.drop in self.faults:
            cancel()
            await responder.drop()
            return True
        return False

    async def _tail(self, responder: Responder, opts: _StreamOptions) -> None:
        dialect = self.state.config.dialect
        finish_choice: dict[str, Any] = {
            "index": 0,
            "delta": {},
            "finish_reason": self.finish or "stop",
        }
        finish_choice.update(
            choice_extras(dialect, self.stats, return_meta_info=self.req.return_meta_info)
        )
        if self.eos and self.req.logprobs:
            finish_choice["logprobs"] = self._logprobs(len(self.text), EOS_CH)
        if self.eos and self.req.return_token_ids:  # the end token is sampled too
            finish_choice["token_ids"] = [EOS_ID]
        send_usage = opts.include_usage and FaultKind.no_usage not in self.faults
        extras = tail_extras(dialect, self.stats)
        finish_extra: dict[str, Any] = {} if send_usage else dict(extras)
        if opts.continuous_usage_stats:
            finish_extra["usage"] = usage_block(self.stats)
        await self._write(responder, self._chunk([finish_choice], **finish_extra), "finish")
        sglext = sglang_sglext(self.stats) if dialect is Dialect.sglang else None
        if sglext is not None and self.req.return_spec_tokens_details:
            await self._write(responder, self._chunk([], sglext=sglext), "spec")
        if send_usage:
            data = self._chunk([], usage=usage_block(self.stats), **extras)
            await self._write(responder, data, "usage")
        await self._write(responder, b"data: [DONE]\n\n", "done")
        await responder.end()
