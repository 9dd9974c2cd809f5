"""Engine-wide counters, mirrored into a Prometheus registry with vLLM's names.

Names follow vLLM's production metrics (``vllm:spec_decode_num_drafts_total``,
``vllm:spec_decode_num_draft_tokens_total``,
``vllm:spec_decode_num_accepted_tokens_total``,
``vllm:spec_decode_num_accepted_tokens_per_pos_total``,
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
``vllm:request_success_total``; the cache window: ``vllm:prefix_cache_queries_total``,
``vllm:prefix_cache_hits_total`` (tokens), ``vllm:kv_cache_usage_perc`` (fraction),
``vllm:num_requests_waiting`` (requests); the engine steps: the histogram
``vllm:iteration_tokens_total``, observed once per engine step as vLLM V1's
``vllm/v1/metrics/loggers.py`` does, with its iteration's prompt tokens (the full
prompts whose prefill ended in the step) plus its generated tokens), rendered by
``prometheus_client``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field


class EngineCounters(BaseModel):
    """A snapshot of the engine's totals since start-up.

    ``requests``: requests admitted to decoding; ``finished``: requests that
    ended (any reason); ``prompt_tokens`` / ``generated_tokens``: tokens;
    ``num_drafts``: verify steps that checked ≥ 1 draft token;
    ``num_draft_tokens`` / ``num_accepted_tokens``: draft tokens proposed /
    accepted; ``accepted_per_position[i]``: accepted draft tokens at draft
    position ``i`` (0-based). The counters mirror vLLM's ``spec_decode_*``
    Prometheus counters (module docstring); the two derived figures follow the
    definitions in ``docs/measurement.md``.

    Raises:
        pydantic.ValidationError: a negative count or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: int = Field(default=0, ge=0)
    finished: int = Field(default=0, ge=0)
    prompt_tokens: int = Field(default=0, ge=0, description="tokens")
    generated_tokens: int = Field(default=0, ge=0, description="tokens")
    num_drafts: int = Field(default=0, ge=0, description="verify steps with drafts")
    num_draft_tokens: int = Field(default=0, ge=0, description="tokens")
    num_accepted_tokens: int = Field(default=0, ge=0, description="tokens")
    engine_steps: int = Field(default=0, ge=0, description="steps")
    scheduled_tokens: int = Field(default=0, ge=0, description="tokens")
    accepted_per_position: tuple[int, ...] = ()

    @property
    def accepted_token_ratio(self) -> float | None:
        """Accepted / drafted tokens (0..1), ``None`` before any draft."""
        if self.num_draft_tokens == 0:
            return None
        return self.num_accepted_tokens / self.num_draft_tokens

    @property
    def acceptance_length(self) -> float | None:
        """1 + accepted / verify steps (tokens per step), ``None`` before any draft."""
        if self.num_drafts == 0:
            return None
        return 1.0 + self.num_accepted_tokens / self.num_drafts


def _iteration_tokens(reg: CollectorRegistry, labels: dict[str, str]) -> Histogram:
    """vLLM's engine-step histogram (tokens per step, its buckets), labelled."""
    return Histogram(
        "vllm:iteration_tokens_total",
        "Number of tokens per engine_step.",
        list(labels),
        buckets=(1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
        registry=reg,
    ).labels(**labels)


class EngineMetrics:
    """Mutable engine totals; every update goes to the snapshot and to Prometheus."""

    def __init__(self, model_name: str, depth: int) -> None:
        self._labels = {"model_name": model_name, "engine": "0"}
        names = list(self._labels)
        reg = CollectorRegistry(auto_describe=True)
        self.registry = reg
        self._drafts = Counter(
            "vllm:spec_decode_num_drafts", "Verify steps with drafts.", names, registry=reg
        )
        self._draft_tokens = Counter(
            "vllm:spec_decode_num_draft_tokens", "Draft tokens proposed.", names, registry=reg
        )
        self._accepted = Counter(
            "vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted.", names, registry=reg
        )
        self._per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted draft tokens per draft position.",
            [*names, "position"],
            registry=reg,
        )
        self._prompt = Counter("vllm:prompt_tokens", "Prefill tokens.", names, registry=reg)
        self._gen = Counter("vllm:generation_tokens", "Generated tokens.", names, registry=reg)
        self._success = Counter(
            "vllm:request_success", "Finished requests.", [*names, "finished_reason"], registry=reg
        )
        self._running = Gauge(
            "vllm:num_requests_running", "Requests in the batch.", names, registry=reg
        )
        # the cache window: prefix cache, KV-cache usage and queue, with vLLM V1's names
        self._pc_queries = Counter(
            "vllm:prefix_cache_queries", "Prompt tokens looked up.", names, registry=reg
        ).labels(**self._labels)
        self._pc_hits = Counter(
            "vllm:prefix_cache_hits", "Prompt tokens found cached.", names, registry=reg
        ).labels(**self._labels)
        self._kv_usage = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage (1 = 100%).", names, registry=reg
        ).labels(**self._labels)
        self._waiting = Gauge(
            "vllm:num_requests_waiting", "Requests waiting.", names, registry=reg
        ).labels(**self._labels)
        self._iteration = _iteration_tokens(reg, self._labels)
        self._steps_n = self._scheduled_n = 0
        # labelled children, resolved once (also exposes zeros from the start)
        self._drafts_c = self._drafts.labels(**self._labels)
        self._draft_tokens_c = self._draft_tokens.labels(**self._labels)
        self._accepted_c = self._accepted.labels(**self._labels)
        self._prompt_c = self._prompt.labels(**self._labels)
        self._gen_c = self._gen.labels(**self._labels)
        self._running_c = self._running.labels(**self._labels)
        self._requests = 0
        self._finished = 0
        self._prompt_n = 0
        self._gen_n = 0
        self._drafts_n = 0
        self._draft_tokens_n = 0
        self._accepted_n = 0
        self._per_pos_n = [0] * depth
        for pos in range(depth):  # as vLLM does: every position exported from the start
            self._per_pos.labels(**self._labels, position=str(pos))

    def admitted(self, prompt_tokens: int) -> None:
        """Count one admitted request and its prompt tokens."""
        self._requests += 1
        self._prompt_n += prompt_tokens
        self._prompt_c.inc(prompt_tokens)

    def generated(self, tokens: int) -> None:
        """Count generated tokens (tokens)."""
        self._gen_n += tokens
        self._gen_c.inc(tokens)

    def verified(self, drafted: int, accepted: int) -> None:
        """Count one verify step that checked ``drafted`` tokens and kept ``accepted``."""
        if drafted == 0:
            return
        self._drafts_n += 1
        self._draft_tokens_n += drafted
        self._accepted_n += accepted
        self._drafts_c.inc()
        self._draft_tokens_c.inc(drafted)
        self._accepted_c.inc(accepted)
        for pos in range(accepted):
            if pos >= len(self._per_pos_n):
                self._per_pos_n.append(0)
            self._per_pos_n[pos] += 1
            self._per_pos.labels(**self._labels, position=str(pos)).inc()

    def stepped(self, scheduled_tokens: int) -> None:
        """Count one engine step with ``scheduled_tokens`` tokens: the prompt tokens of
        the prefills it ended plus the tokens it generated (vLLM's iteration tokens)."""
        self._steps_n += 1
        self._scheduled_n += scheduled_tokens
        self._iteration.observe(scheduled_tokens)

    def finished(self, reason: str) -> None:
        """Count one finished request (``reason``: stop, length, abort, error)."""
        self._finished += 1
        self._success.labels(**self._labels, finished_reason=reason).inc()

    def running(self, n: int) -> None:
        """Set the number of sequences in the current batch."""
        self._running_c.set(n)

    def prefix_lookup(self, queried: int, hit: int) -> None:
        """Count one prefix-cache lookup: ``queried`` prompt tokens, ``hit`` found (tokens)."""
        self._pc_queries.inc(queried)
        self._pc_hits.inc(hit)

    def kv_usage(self, fraction: float) -> None:
        """Set the KV-cache usage (fraction 0..1)."""
        self._kv_usage.set(fraction)

    def waiting(self, n: int) -> None:
        """Set the number of requests waiting for the next step."""
        self._waiting.set(n)

    def snapshot(self) -> EngineCounters:
        """The current totals as an immutable :class:`EngineCounters`."""
        return EngineCounters(
            requests=self._requests,
            finished=self._finished,
            prompt_tokens=self._prompt_n,
            generated_tokens=self._gen_n,
            num_drafts=self._drafts_n,
            num_draft_tokens=self._draft_tokens_n,
            num_accepted_tokens=self._accepted_n,
            engine_steps=self._steps_n,
            scheduled_tokens=self._scheduled_n,
            accepted_per_position=tuple(self._per_pos_n),
        )

    def exposition(self) -> bytes:
        """Prometheus text exposition (format 0.0.4) of the registry."""
        return bytes(generate_latest(self.registry))
