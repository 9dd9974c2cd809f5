"""How each engine dialect reports per-request speculative acceptance.

Wire shapes (see ``shared/cases/sse/14``–``18`` and ``21``):

* ``vllm``: a ``metrics`` object (vLLM ``--enable-per-request-metrics``) on the
  final usage chunk (or on the finish chunk when no usage chunk is sent; top
  level of a non-stream body): the engine's own ``time_to_first_token_ms``,
  ``generation_time_ms``, ``queue_time_ms``, ``mean_itl_ms``,
  ``tokens_per_second``, and, when anything was drafted, ``speculative_decoding``
  with the counts, ``acceptance_histogram`` and the per-step lists
  ``per_step_accepted`` / ``per_step_drafted`` (``--per-request-spec-decode-metrics
  detailed``).
* ``sglang``: current SGLang: a trailing ``choices: []`` chunk holding
  ``sglext.spec_tokens_details`` after the finish chunk (top-level ``sglext`` in
  a non-stream body), when the request set ``return_spec_tokens_details: true``;
  older SGLang: ``meta_info`` on the finish choice of a non-stream response when
  the request set ``return_meta_info: true`` (a streamed request carrying it is
  refused with HTTP 400, as current SGLang does).
* ``llamacpp``: ``timings`` on the final usage chunk (or finish chunk / top
  level); ``draft_n`` and ``draft_n_accepted`` are absent when nothing was drafted.
* ``openai``: nothing beyond ``usage``.

Definitions: acceptance rate = accepted / drafted tokens; acceptance length =
1 + accepted / verify steps (steps that checked ≥ 1 draft token).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deepseekbench._types._axes import Dialect


@dataclass(slots=True)
class RequestStats:
    """Per-request counts the dialects report.

    Token counts in tokens; ``prompt_ms``: submission to first token (ms, the queue included);
    ``predicted_ms``: first to last token (ms); ``queue_ms``: submission to
    admission (ms); ``histogram[j]``: verify steps that accepted exactly ``j``
    draft tokens; ``per_step_accepted`` / ``per_step_drafted``: each verify
    step's counts, in order.
    """

    prompt_tokens: int
    depth: int
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    spec_steps: int = 0
    histogram: list[int] = field(default_factory=list)
    prompt_ms: float = 0.0
    predicted_ms: float = 0.0
    queue_ms: float = 0.0
    per_step_accepted: list[int] = field(default_factory=list)
    per_step_drafted: list[int] = field(default_factory=list)

    def add_step(self, drafted: int, accepted: int) -> None:
        """Record one step's verify counts (no-op for a step without drafts)."""
        if drafted == 0:
            return
        self.drafted += drafted
        self.accepted += accepted
        self.spec_steps += 1
        self.per_step_accepted.append(accepted)
        self.per_step_drafted.append(drafted)
        while len(self.histogram) <= max(accepted, self.depth):
            self.histogram.append(0)
        self.histogram[accepted] += 1


def usage_block(stats: RequestStats) -> dict[str, Any]:
    """OpenAI ``usage`` object (tokens); reasoning tokens in ``completion_tokens_details``."""
    usage: dict[str, Any] = {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "total_tokens": stats.prompt_tokens + stats.completion_tokens,
    }
    if stats.reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": stats.reasoning_tokens}
    return usage


def _vllm(stats: RequestStats) -> dict[str, Any]:
    n = stats.completion_tokens
    gen_ms = stats.predicted_ms
    span_ms = stats.prompt_ms + gen_ms
    metrics: dict[str, Any] = {
        "time_to_first_token_ms": stats.prompt_ms,
        "generation_time_ms": gen_ms,
        "queue_time_ms": stats.queue_ms,
        "mean_itl_ms": gen_ms / (n - 1) if n > 1 else 0.0,
        # vLLM 0.32: over TTFT + generation time (shared case sse/21)
        "tokens_per_second": 1000.0 * n / span_ms if span_ms > 0 else 0.0,
    }
    if stats.drafted:
        metrics["speculative_decoding"] = {
            "mean_acceptance_length": 1.0 + stats.accepted / stats.spec_steps,
            "draft_acceptance_rate": stats.accepted / stats.drafted,
            "acceptance_histogram": list(stats.histogram),
            "num_spec_steps": stats.spec_steps,
            "num_accepted_draft_tokens": stats.accepted,
            "num_draft_tokens": stats.drafted,
            "num_spec_tokens": stats.depth,
            "per_step_accepted": list(stats.per_step_accepted),
            "per_step_drafted": list(stats.per_step_drafted),
        }
    return {"metrics": metrics}


def _llamacpp(stats: RequestStats) -> dict[str, Any]:
    n_prompt, n_pred = stats.prompt_tokens, stats.completion_tokens
    timings: dict[str, Any] = {
        "cache_n": 0,
        "prompt_n": n_prompt,
        "prompt_ms": round(stats.prompt_ms, 3),
        "prompt_per_token_ms": round(stats.prompt_ms / n_prompt, 3) if n_prompt else 0.0,
        "prompt_per_second": round(1000.0 * n_prompt / stats.prompt_ms, 3)
        if stats.prompt_ms > 0
        else 0.0,
        "predicted_n": n_pred,
        "predicted_ms": round(stats.predicted_ms, 3),
        "predicted_per_token_ms": round(stats.predicted_ms / n_pred, 3) if n_pred else 0.0,
        "predicted_per_second": round(1000.0 * n_pred / stats.predicted_ms, 3)
        if stats.predicted_ms > 0
        else 0.0,
    }
    if stats.drafted:
        timings["draft_n"] = stats.drafted
        timings["draft_n_accepted"] = stats.accepted
    return {"timings": timings}


def _sglang_spec(stats: RequestStats) -> dict[str, Any]:
    return {
        "spec_verify_ct": stats.spec_steps,
        "spec_accept_rate": stats.accepted / stats.drafted,
        "spec_accept_length": 1.0 + stats.accepted / stats.spec_steps,
        "spec_num_correct_drafts": stats.accepted,
        "spec_num_proposed_drafts": stats.drafted,
    }


def sglang_sglext(stats: RequestStats) -> dict[str, Any] | None:
    """Current SGLang's ``sglext`` block (``spec_tokens_details``), ``None`` when undrafted."""
    if not stats.drafted:
        return None
    return {"spec_tokens_details": _sglang_spec(stats)}


def sglang_meta_info(stats: RequestStats) -> dict[str, Any]:
    """SGLang ``meta_info`` for the finish choice (spec fields only when drafted)."""
    meta: dict[str, Any] = {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
    }
    if stats.drafted:
        meta.update(_sglang_spec(stats))
    return meta


def tail_extras(dialect: Dialect, stats: RequestStats) -> dict[str, Any]:
    """Top-level fields for the last chunk (usage chunk or finish chunk) or a body."""
    if dialect is Dialect.vllm:
        return _vllm(stats)
    if dialect is Dialect.llamacpp:
        return _llamacpp(stats)
    return {}


def choice_extras(
    dialect: Dialect, stats: RequestStats, *, return_meta_info: bool
) -> dict[str, Any]:
    """Fields for the finish choice (SGLang ``meta_info`` when requested)."""
    if dialect is Dialect.sglang and return_meta_info:
        return {"meta_info": sglang_meta_info(stats)}
    return {}
