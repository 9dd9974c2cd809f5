"""``EngineDialect``: everything that differs between serving engines, in one place.

An engine's adapter subclasses :class:`EngineDialect` and overrides what its
wire format does differently; the defaults describe a plain OpenAI-compatible
host that reports nothing beyond the chat stream. The stages ask the adapter
(through :func:`deepseekbench._dialects.dialect_for`) and never test a dialect
name themselves:

* ``_net/_route.py``: :meth:`~EngineDialect.reasoning_controls`,
  :meth:`~EngineDialect.eos_controls`, :meth:`~EngineDialect.pinned_controls`,
  :meth:`~EngineDialect.report_extras`, :meth:`~EngineDialect.token_id_controls`,
  :attr:`~EngineDialect.continuous_usage`;
* ``_net/_probe.py``: :meth:`~EngineDialect.answers_any_model`;
* ``_measure/_accumulator.py``: :attr:`~EngineDialect.spec_keys`,
  :meth:`~EngineDialect.read_acceptance`, :meth:`~EngineDialect.server_times`;
* ``_measure/_server_metrics.py``: :attr:`~EngineDialect.counter_sets`,
  :attr:`~EngineDialect.gauge_sets`, :attr:`~EngineDialect.cache_sets`,
  :meth:`~EngineDialect.metrics_query`;
* ``_measure/_tokens.py``: :meth:`~EngineDialect.tokenize_body`;
* ``_execute/_served_config.py``: :attr:`~EngineDialect.depth_paths`,
  :meth:`~EngineDialect.spec_tokens_from_info`;
* ``_execute/_served_config.py``: :meth:`~EngineDialect.deterministic_from_info`;
* ``_execute/_teacher_force.py``: :attr:`~EngineDialect.teacher_forcing`,
  :attr:`~EngineDialect.teacher_forcing_refusal`, :attr:`~EngineDialect.prompt_logprobs_kind`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import Dialect, ReasoningMode
from deepseekbench._types._clock import ServerRateSpan

__all__ = [
    "SERVER_TIME_FIELDS",
    "CacheSet",
    "CounterSet",
    "EngineDialect",
    "GaugeSet",
    "depth",
    "effort",
    "ignore_eos_min_tokens",
    "min_tokens_before_end",
    "thinking",
]

SERVER_TIME_FIELDS: tuple[str, ...] = (
    "server_ttft_ms",
    "server_queue_ms",
    "server_generation_ms",
    "server_mean_itl_ms",
    "server_toks_per_s",
)
"""The engine-reported per-request times a measurement keeps (ms; the last in tokens/s)."""


@dataclass(frozen=True)
class CounterSet:
    """One engine's Prometheus speculative counters (monotonic, summed over the run).

    ``drafts``: verify steps (``None`` for an engine that exports none, e.g.
    TensorRT-LLM: acceptance length then stays unknown); ``draft_tokens`` and
    ``accepted``: tokens; ``per_position``: the family of accepted tokens per
    draft position (label ``position``; ``None`` when not exported); ``source``:
    the record's ``source`` text. Names are written without ``_total``.
    """

    source: str
    drafts: str | None
    draft_tokens: str
    accepted: str
    per_position: str | None

    @property
    def names(self) -> tuple[str, ...]:
        """The exported counter families: ``drafts`` (when set), ``draft_tokens``, ``accepted``."""
        return tuple(n for n in (self.drafts, self.draft_tokens, self.accepted) if n is not None)


@dataclass(frozen=True)
class GaugeSet:
    """One engine's Prometheus speculative gauges (a current figure, never summed).

    ``rate``: acceptance rate (accepted / drafted draft tokens); ``length``:
    acceptance length (tokens per verify step, bonus token included).
    """

    source: str
    rate: str
    length: str


# The cache window: the server's side of a window (prefix cache, KV cache, queue)
@dataclass(frozen=True)
class CacheSet:
    """One engine's Prometheus cache and queue families (names without ``_total``).

    ``queries`` / ``hits``: monotonic counters of prompt tokens looked up in /
    found in the prefix cache (vLLM V1); their window delta gives the hit rate.
    ``misses``: a counter of prompt tokens not found (processed), for an engine
    that counts hits and misses instead of queries (llama.cpp): queries are then
    hits + misses.
    ``hit_rate``: a gauge holding the engine's own recent hit rate (0..1; SGLang),
    used where no counters are exported. ``kv_usage``: gauges of the KV-cache
    fraction in use (0..1), the first one exported wins (a new name, then the
    older one). ``queue``: a gauge of requests waiting to be scheduled
    (requests). Any of them may be ``None``/empty where the engine exports none.

    The engine's own step count (the batch it ran): ``steps``: a counter of engine
    steps (vLLM ``vllm:iteration_tokens_total_count``, llama.cpp
    ``llamacpp:n_decode``, steps); ``step_tokens``: a counter of tokens over those steps
    (vLLM's ``_sum``: prompt tokens of the prefills ended + generated tokens); ``prompt_tokens``:
    a counter of prompt tokens (vLLM ``vllm:prompt_tokens``); ``cached_prompt_tokens``: a
    counter of the prompt tokens among those found cached, not computed (vLLM
    ``vllm:prompt_tokens_cached``: where it is exported, the histogram's ``_sum`` holds only
    computed prompt tokens, ``PromptTokenStats.computed`` in ``vllm/v1/metrics/stats.py``);
    ``busy_per_step``: a
    gauge of busy sequences per step averaged since start (llama.cpp
    ``llamacpp:n_busy_slots_per_decode``).
    """

    source: str
    queries: str | None = None
    hits: str | None = None
    hit_rate: str | None = None
    kv_usage: tuple[str, ...] = ()
    queue: str | None = None
    misses: str | None = None
    steps: str | None = None
    step_tokens: str | None = None
    prompt_tokens: str | None = None
    cached_prompt_tokens: str | None = None
    busy_per_step: str | None = None

    @property
    def step_families(self) -> tuple[str, ...]:
        """The engine-step families (counters and gauge) that are set."""
        names = (
            self.steps,
            self.step_tokens,
            self.prompt_tokens,
            self.cached_prompt_tokens,
            self.busy_per_step,
        )
        return tuple(n for n in names if n is not None)

    @property
    def counters(self) -> tuple[str, ...]:
        """The counter families: ``queries``, ``hits`` and ``misses`` (when set)."""
        return tuple(n for n in (self.queries, self.hits, self.misses) if n is not None)

    @property
    def gauges(self) -> tuple[str, ...]:
        """The gauge families: ``hit_rate``, every ``kv_usage`` name, ``queue``."""
        return tuple(n for n in (self.hit_rate, *self.kv_usage, self.queue) if n is not None)


def ignore_eos_min_tokens(max_tokens: int | None) -> dict[str, Any]:
    """``{"ignore_eos": true, "min_tokens": max_tokens}`` (``min_tokens`` only when
    given): the EOS controls vLLM, SGLang and TensorRT-LLM share (their sampling
    params' ``ignore_eos`` / ``min_tokens``)."""
    body: dict[str, Any] = {"ignore_eos": True}
    if max_tokens is not None:
        body["min_tokens"] = max_tokens
    return body


def min_tokens_before_end(max_tokens: int | None) -> dict[str, Any]:
    """``{"min_tokens": max_tokens - 1}`` (nothing for 1 token or none): the pinned
    length's controls of an engine with ``min_tokens``.

    A pinned ``max_tokens`` is the natural length, which counts the end-of-sequence
    token where the engine counts it (vLLM). ``min_tokens`` masks the stop tokens
    below it (vLLM ``SamplingParams.min_tokens``), so ``min_tokens = max_tokens``
    would mask that very end and decode one token past it; one less keeps every
    earlier end masked and the natural one allowed. No ``ignore_eos``: the request
    ends at the natural end or at ``max_tokens``, whichever comes first.
    """
    return {"min_tokens": max_tokens - 1} if max_tokens is not None and max_tokens > 1 else {}


class EngineDialect:
    """One engine's wire extras; subclass it to add an engine (``docs/engines.md``).

    Class attributes:
        name: the dialect name routes give (``EngineRoute.dialect``), the registry key.
        continuous_usage: whether ``stream_options.continuous_usage_stats`` is
            understood (sent only when the route asks for continuous usage).
        spec_keys: top-level chunk keys that may carry acceptance or server times;
            chunks with none of them (nor a choice with one of
            ``choice_spec_keys``) are not read for them.
        counter_sets / gauge_sets: the engine's ``/metrics`` families
            (:class:`CounterSet`, :class:`GaugeSet`).
        cache_sets: the engine's prefix-cache, KV-cache and queue families
            (:class:`CacheSet`).
        depth_paths: GET paths, relative to the server origin, of an endpoint
            that reports the served speculative depth, tried in order (a 404
            moves to the next).
        teacher_forcing: the wire that scores a given output in one forward pass
            (``"vllm_prompt_logprobs"``: chat completions with ``prompt_logprobs``
            and ``continue_final_message``; request and response shapes in
            ``docs/rows-and-gate.md``, "Teacher forcing"), or ``None`` when the
            engine cannot; then ``teacher_forcing_refusal`` says why.
        prompt_logprobs_kind: whether those logprobs are the model's raw ones
            (``"raw"``), processed, or ``"unknown"``.
        server_rate_span: the span (:class:`~deepseekbench.ServerRateSpan`) the
            engine divides its output rate (``server_toks_per_s``, tokens/s) by, or
            ``None`` when not known: the witness's count check is then skipped.
        server_rate_source: where :attr:`server_rate_span` comes from (the engine's
            source or a shared case), or why it is not known.

    The defaults fit a plain OpenAI-compatible host: no reasoning controls
    beyond ``chat_template_kwargs``, no EOS override, no acceptance figures,
    no server times, no metrics, no depth endpoint. No method raises on wire data.
    """

    name: ClassVar[str] = ""
    continuous_usage: ClassVar[bool] = False
    spec_keys: ClassVar[frozenset[str]] = frozenset()
    choice_spec_keys: ClassVar[frozenset[str]] = frozenset()
    counter_sets: ClassVar[tuple[CounterSet, ...]] = ()
    gauge_sets: ClassVar[tuple[GaugeSet, ...]] = ()
    cache_sets: ClassVar[tuple[CacheSet, ...]] = ()  # the cache window
    depth_paths: ClassVar[tuple[str, ...]] = ()
    reports_determinism: ClassVar[bool] = False  # deterministic_from_info says
    teacher_forcing: ClassVar[str | None] = None
    teacher_forcing_refusal: ClassVar[str] = "the engine serves no prompt log-probabilities"
    prompt_logprobs_kind: ClassVar[str] = "unknown"
    server_rate_span: ClassVar[ServerRateSpan | None] = None
    server_rate_source: ClassVar[str] = "the engine reports no per-request output rate"

    @property
    def engine(self) -> Dialect:
        """The :class:`~deepseekbench.Dialect` the records of this adapter carry
        (``AcceptanceRecord.engine``): the member named :attr:`name`, else
        ``auto`` (an engine registered without an enum value)."""
        return Dialect(self.name) if self.name in Dialect.__members__ else Dialect.auto

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    # --- request body -------------------------------------------------------
    def reasoning_controls(self, mode: ReasoningMode) -> dict[str, Any]:
        """Body fields selecting ``mode`` on DeepSeek V4: by default the chat
        encoder's ``chat_template_kwargs`` = ``{"thinking": bool}`` plus
        ``"reasoning_effort": "high"|"max"`` when thinking (vLLM, SGLang)."""
        kwargs: dict[str, Any] = {"thinking": thinking(mode)}
        level = effort(mode)
        if level is not None:
            kwargs["reasoning_effort"] = level
        return {"chat_template_kwargs": kwargs}

    def eos_controls(self, max_tokens: int | None) -> dict[str, Any]:
        """Body fields that make the engine generate ``max_tokens`` tokens past
        EOS; ``{}`` (the default) where it has none."""
        return {}

    def pinned_controls(self, max_tokens: int | None) -> dict[str, Any]:
        """Body fields that make the engine decode ``max_tokens`` tokens when that is
        the prompt's natural length (``workload.output_length = "pinned"``): by default
        :meth:`eos_controls` (an engine without ``min_tokens`` may then decode past its
        natural end; the row's ``tokens_past_eos`` counts it); engines with
        ``min_tokens`` use :func:`min_tokens_before_end`."""
        return self.eos_controls(max_tokens)

    def report_extras(self) -> dict[str, Any]:
        """Body fields asking the engine to report per-request acceptance."""
        return {}

    def token_id_controls(self) -> dict[str, Any]:
        """Body fields asking the engine to stream the sampled token ids (sent on sampled
        requests, temperature > 0, so the distribution witness scores the sampled tokens,
        not the re-tokenized text); ``{}`` (the default) where it has none."""
        return {}

    # --- response ------------------------------------------------------------
    def read_acceptance(self, chunk: Mapping[str, Any]) -> AcceptanceRecord | None:
        """Per-request acceptance from one parsed chunk (or response), or ``None``."""
        return None

    def server_times(self, chunk: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The engine's own per-request times in one chunk, keyed by
        :data:`SERVER_TIME_FIELDS` (raw values; the measurement keeps finite,
        non-negative numbers), or ``None`` when the chunk carries none."""
        return None

    # --- side endpoints ------------------------------------------------------
    def spec_tokens_from_info(self, info: Any) -> int | None:
        """Draft tokens per verify step in one parsed :attr:`depth_paths` body."""
        return None

    def deterministic_from_info(self, info: Any) -> bool | None:
        """Whether the engine's deterministic mode is on, from one parsed
        :attr:`depth_paths` body; ``None`` when the engine does not say."""
        return None

    def tokenize_body(self, model: str, text: str) -> dict[str, Any]:
        """JSON body of ``POST /tokenize`` counting ``text`` without special
        tokens (vLLM/SGLang shape by default)."""
        return {"model": model, "prompt": text, "add_special_tokens": False}

    def metrics_query(self, model: str) -> dict[str, str]:
        """Query parameters of a ``GET /metrics`` scrape for the route's ``model``;
        none by default (a server that needs one answers 400 and the scrape is
        sent once more with ``?model=``; ``_measure/_server_metrics.py``)."""
        return {}

    def answers_any_model(self, models: Any) -> bool:
        """Whether a server whose ``GET /v1/models`` body is ``models`` answers
        any ``model`` name. By default: when an entry is ``owned_by: "llamacpp"``
        (llama-server behind a route of another dialect)."""
        data = models.get("data") if isinstance(models, Mapping) else None
        return isinstance(data, list) and any(
            isinstance(e, Mapping) and e.get("owned_by") == "llamacpp" for e in data
        )


def thinking(mode: ReasoningMode) -> bool:
    """Whether ``mode`` thinks (everything but ``non_think``)."""
    return mode is not ReasoningMode.non_think


def effort(mode: ReasoningMode) -> str | None:
    """``"high"``/``"max"`` for the thinking modes that set an effort, else ``None``."""
    return {ReasoningMode.think_high: "high", ReasoningMode.think_max: "max"}.get(mode)


def depth(value: Any) -> int | None:
    """A speculative depth (draft tokens per verify step, >= 1) from a wire value, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    n = int(value)
    return n if n >= 1 else None
