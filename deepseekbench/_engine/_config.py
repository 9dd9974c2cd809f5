"""The embedded engine's start-up configuration."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepseekbench._engine._costs import CostModel
from deepseekbench._engine._faults import FaultConfig
from deepseekbench._engine._speculative import DEFAULT_DEPTH, SamplerFaults
from deepseekbench._types._axes import Dialect, Speculative

SERVED_DIALECTS: frozenset[Dialect] = frozenset(
    {Dialect.vllm, Dialect.sglang, Dialect.llamacpp, Dialect.openai}
)
"""Dialects the embedded engine can speak (``auto`` and ``deepseek`` are client-side)."""


class EngineConfig(BaseModel):
    """How the embedded reference engine decodes, reports and misbehaves.

    ``speculative``: decoding method (``eagle3`` uses an EAGLE-style draft head).
    ``draft_depth``: draft tokens per verify step ``k`` (tokens); ``None`` picks
    the method's default (mtp 1 as in DeepSeek V4 Pro, dspark 4, eagle3/draft/
    ngram 3, off 0). ``dialect``: how per-request acceptance is reported.
    ``mistuned_draft``: the lossy-verify fault. ``relaxed_acceptance``: TensorRT-LLM's
    MTP relaxed acceptance as a fault (accept a draft token among the target's
    ``relaxed_topk`` within ``relaxed_delta`` nats of its top-1; greedy and sampled).
    ``argmax_acceptance``: the verify accepts and emits the target's argmax at
    temperature > 0 (mistral.rs PR #2424). ``draft_ignores_temperature``: the draft
    samples at temperature 1 while the verify's ratio assumes the tempered draft
    (z-lab/dflash issue #74). ``relaxed_scope``: ``"answer"`` applies relaxed acceptance
    to the answer; ``"reasoning"`` only to the reasoning, which then must be decoded
    (``decoded_reasoning``: the reasoning text is decoded by the model, speculatively
    for a speculative method, instead of streamed as fixed text; greedy exact decoding
    gives the same text, :mod:`deepseekbench._engine._reasoning`). The sampler faults are defined in
    :mod:`deepseekbench._engine._speculative`. ``cost``: step costs (ms).
    ``faults``: injected faults. ``seed``: sampling and fault draws.
    ``max_context_tokens``: prompt + output limit (tokens).
    ``default_max_tokens``: output cap when a request gives none (tokens).
    ``record_send_times``: keep the server-side send time of every chunk.
    ``prefix_cache``: keep prompt blocks across requests (cached tokens skip
    prefill; exported as ``vllm:prefix_cache_queries`` / ``..._hits``).
    ``speculation_disables_prefix_cache``: with a speculative method, lookups
    never hit (vLLM #54360: MTP drops prefix-cache hits to 0 on hybrid models).
    ``kv_cache_tokens``: KV-cache capacity (tokens) behind ``vllm:kv_cache_usage_perc``.
    ``numerics``: the numerics mode (:mod:`deepseekbench._engine._numerics`):
    hashed near-ties in the target, and verify passes that flip exactly them.
    ``deterministic_inference``: what the SGLang dialect's ``/get_server_info``
    reports as ``enable_deterministic_inference`` (``None``: the field is absent, as
    on SGLang releases before the flag); it changes no decoding.
    ``eos_counted``: count the end-of-sequence token as an output token, as vLLM
    does (its ``usage.completion_tokens`` and ``max_tokens`` / ``min_tokens``
    include it; it is streamed as an empty delta with the ``finish_reason``).

    Raises:
        pydantic.ValidationError: an unknown field, a dialect the engine cannot
            speak (``auto``, ``deepseek``), a ``draft_depth`` on ``off`` or outside
            1..16, ``max_context_tokens`` below 16, ``default_max_tokens`` below 1, or
            ``relaxed_scope="reasoning"`` without ``decoded_reasoning``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    speculative: Speculative = Speculative.off
    draft_depth: int | None = Field(default=None, ge=1, le=16, description="Draft tokens per step.")
    dialect: Dialect = Dialect.vllm
    mistuned_draft: bool = False
    # lossy sampler faults (deepseekbench/_engine/_speculative.py, SamplerFaults)
    relaxed_acceptance: bool = False
    relaxed_topk: int = Field(default=3, ge=1, le=20, description="Relaxed top-k (tokens).")
    relaxed_delta: float = Field(default=1.0, ge=0, description="Relaxed bound (nats).")
    relaxed_scope: Literal["answer", "reasoning"] = "answer"
    argmax_acceptance: bool = False
    draft_ignores_temperature: bool = False
    decoded_reasoning: bool = False
    cost: CostModel = CostModel()
    faults: FaultConfig = FaultConfig()
    seed: int = 0
    model_name: str = Field(default="deepseekbench-ref", min_length=1)
    max_context_tokens: int = Field(default=8192, ge=16, description="Context window (tokens).")
    default_max_tokens: int = Field(
        default=512, ge=1, description="Output cap if none given (tokens)."
    )
    record_send_times: bool = False
    # the cache window: the prefix cache and the KV/queue gauges
    prefix_cache: bool = True
    speculation_disables_prefix_cache: bool = False
    kv_cache_tokens: int = Field(default=65536, ge=1, description="KV-cache capacity (tokens).")
    # numerics mode (verify rounds differently from one-token decode)
    numerics: bool = False
    deterministic_inference: bool | None = None
    eos_counted: bool = False

    @property
    def prefix_cache_hits_allowed(self) -> bool:
        """Whether prefix-cache lookups may hit."""
        if not self.prefix_cache:
            return False
        return not (
            self.speculation_disables_prefix_cache and self.speculative is not Speculative.off
        )

    @model_validator(mode="after")
    def _check(self) -> EngineConfig:
        if self.dialect not in SERVED_DIALECTS:
            allowed = ", ".join(sorted(d.value for d in SERVED_DIALECTS))
            raise ValueError(f"the engine cannot serve dialect {self.dialect.value!r}; {allowed}")
        if self.speculative is Speculative.off and self.draft_depth is not None:
            raise ValueError("draft_depth is meaningless with speculative='off'")
        if self.relaxed_scope == "reasoning" and not self.decoded_reasoning:
            raise ValueError("relaxed_scope='reasoning' needs decoded_reasoning=True")
        return self

    @property
    def sampler_faults(self) -> SamplerFaults:
        """The answer decoder's lossy verify faults from these switches."""
        return self.faults_for("answer")

    def faults_for(self, phase: Literal["answer", "reasoning"]) -> SamplerFaults:
        """The lossy verify faults of the ``phase`` decoder: relaxed acceptance only in
        its ``relaxed_scope``, the other faults in both phases."""
        relaxed = self.relaxed_acceptance and self.relaxed_scope == phase
        return SamplerFaults(
            mistuned=self.mistuned_draft,
            relaxed_topk=self.relaxed_topk if relaxed else 0,
            relaxed_delta=self.relaxed_delta,
            argmax_acceptance=self.argmax_acceptance,
            draft_ignores_temperature=self.draft_ignores_temperature,
        )

    @property
    def deterministic_mode(self) -> bool:
        """The engine's deterministic mode, as an engine with one declares it (SGLang's
        ``--enable-deterministic-inference``, vLLM's ``VLLM_BATCH_INVARIANT=1``): ``True``
        when its numerics do not change with batch shape, so ``off`` repeats itself and a
        verify pass scores exactly as one-token decode does. By construction that holds
        here (one target distribution per context, whatever the batch: the scheduler
        changes only timing, :mod:`deepseekbench._engine._scheduler`), except in the
        numerics mode, whose verify passes round differently from decode on purpose
        (:mod:`deepseekbench._engine._numerics`, after vLLM RFC #54506): ``False`` there.
        Sampling (temperature > 0) draws from a per-request generator, seeded by the
        request's ``seed`` when it gives one. Deterministic is not lossless: a lossy
        draft rule (``mistuned_draft``, relaxed acceptance) still changes outputs, and
        parity still judges them. The demos declare this on their routes (``[[routes]]
        deterministic``), as docs/engines.md asks of engines that do not report it."""
        return not self.numerics

    @property
    def effective_draft_depth(self) -> int:
        """The draft depth ``k`` in use (tokens; 0 for ``off``)."""
        if self.draft_depth is not None:
            return self.draft_depth
        return DEFAULT_DEPTH[self.speculative]
