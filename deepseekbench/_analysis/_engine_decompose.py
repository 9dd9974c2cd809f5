"""Where the speed went when the client clock is refused: the decomposition on the engine's clock.

A TPOT speedup refused for a client-clock reason (``client_starved``: the client was
starved for a core and its chunks bunched; ``clock_disagreement``: the client's ratio
contradicts the engine's) credits nothing, and :func:`~deepseekbench.decompose_speedup`
decomposes nothing. The engine's own per-request decode timings (vLLM's
``metrics.mean_itl_ms``, llama.cpp's ``timings.predicted_per_token_ms``: each row's
``server_tpot_ms``, :mod:`deepseekbench._analysis._clock_witness`) do not depend on the
starved client, so the split into acceptance length and step-cost ratio can still be
**diagnosed** on them:

* ``engine_tpot_ratio`` = ``off``'s ``server_tpot_ms`` ÷ the candidate's (dimensionless):
  the engine-clock TPOT ratio, **not a credited speedup**;
* ``step_cost_ratio`` = acceptance length ÷ ``engine_tpot_ratio``; ``decode_step_ms`` =
  ``off``'s ``server_tpot_ms``; ``verify_step_ms`` = the candidate's ``server_tpot_ms``
  × acceptance length (ms);
* the break-even acceptance length is the step-cost ratio, its rate at the route's depth
  from :func:`~deepseekbench.break_even_acceptance_rate` (Leviathan et al. 2023, eq. 1).

A diagnosis is produced only when the verdict refused the figure for a client-clock
reason and for nothing else the engine's clock cannot answer (its reasons within
:data:`CLIENT_CLOCK_REASONS` plus ``no_significant_difference``), both rows carry an
engine TPOT the witness rules accept on its timing
(:func:`~deepseekbench._analysis._clock_witness.witness_faults` naming no fault; the
count check multiplies each engine's output rate by the span that engine divides it by,
so vLLM's TTFT-inclusive rate is no fault) and the candidate an acceptance length. It
is a separate type from :class:`~deepseekbench.SpeedupDecomposition`, has no
``speedup`` field, and never enters the gate's path or a verdict: the line stays
refused.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._analysis._clock_witness import server_value, witness_faults
from deepseekbench._analysis._decompose import (
    break_even_acceptance_rate,
    printed_ratio,
    rate_words,
)
from deepseekbench._analysis._speedup import RefusalReason, SpeedupMetric, SpeedupVerdict
from deepseekbench._types._row import Row

__all__ = ["CLIENT_CLOCK_REASONS", "EngineClockDiagnosis", "diagnose_on_engine_clock"]

CLIENT_CLOCK_REASONS: Final = frozenset(
    {RefusalReason.client_starved, RefusalReason.clock_disagreement}
)
"""The refusals that mean "the client's clock is no judge here" (one is required)."""

_ANSWERABLE: Final = CLIENT_CLOCK_REASONS | {RefusalReason.no_significant_difference}

ENGINE_CLOCK_LABEL: Final = "on the engine's clock; no speedup credited"
"""The label every diagnosis carries in words."""


class EngineClockDiagnosis(BaseModel):
    """A refused TPOT line's acceptance length ÷ step-cost ratio on the engine's clock.

    Attributes:
        engine_tpot_ratio: ``off``'s engine TPOT ÷ the candidate's (dimensionless; not
            a credited speedup: the line's verdict stays refused).
        acceptance_length: the candidate row's ``L`` (tokens per verify step, bonus
            included; vLLM's counters: 1 + accepted / drafts).
        step_cost_ratio: ``L / engine_tpot_ratio`` (dimensionless).
        decode_step_ms: ``off``'s engine TPOT (ms per decode step).
        verify_step_ms: the candidate's engine TPOT × ``L`` (ms per verify step).
        depth: draft tokens per verify step (``Row.spec_tokens``), ``None`` unknown.
        break_even_length: the acceptance length for an engine-clock ratio of 1 (``= r``).
        break_even_rate: the per-position acceptance reaching it at ``depth``
            (:func:`~deepseekbench.break_even_acceptance_rate`), ``None`` when unknown
            or unreachable (``break_even_reachable`` False).
        refused_for: the verdict's refusal reasons (the line's figure stays refused).

    Raises:
        pydantic.ValidationError: a figure not finite or not > 0, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    engine_tpot_ratio: float = Field(gt=0, description="off / candidate engine TPOT")
    acceptance_length: float = Field(ge=1, description="tokens per verify step")
    step_cost_ratio: float = Field(gt=0, description="verify step / off's decode step")
    decode_step_ms: float = Field(gt=0, description="off's engine time per decode step, ms")
    verify_step_ms: float = Field(gt=0, description="candidate's engine time per verify step")
    depth: int | None = Field(default=None, ge=1)
    break_even_length: float = Field(gt=0, description="acceptance length for ratio 1")
    break_even_rate: float | None = Field(default=None, ge=0, le=1)
    break_even_reachable: bool = True
    refused_for: tuple[RefusalReason, ...] = ()

    @property
    def ratio_text(self) -> str:
        """The step-cost ratio as printed (and the break-even acceptance length, the same
        figure): :func:`~deepseekbench._analysis._decompose.printed_ratio` of the TPOT
        ratio and the acceptance length (each printed to 2 decimals), so the printed
        length ÷ the printed ratio rounds back to the printed TPOT ratio, as the
        credited decomposition's (``docs/scorecard.md``). Dimensionless; raises nothing
        (the model's fields are finite and > 0)."""
        return printed_ratio(self.engine_tpot_ratio, self.acceptance_length)[0]

    def text(self) -> str:
        """The diagnosis in one line, labelled :data:`ENGINE_CLOCK_LABEL`, e.g.
        "on the engine's clock; no speedup credited: TPOT ratio 0.80 = acceptance length
        1.90 ÷ step-cost ratio 2.38: verify step 40.1 ms vs off's 16.90 ms; break-even
        acceptance length 2.38 (break-even unreachable at depth 1 (at most 2); own 0.90 per
        position) (refused: client_starved)"."""
        words = rate_words(self.break_even_length, self.acceptance_length, self.depth)
        rate = f" ({words})" if self.depth is not None else ""
        why = ", ".join(r.value for r in self.refused_for)
        ratio = self.ratio_text  # the break-even length is the step-cost ratio: one figure
        return (
            f"{ENGINE_CLOCK_LABEL}: TPOT ratio {self.engine_tpot_ratio:.2f} = acceptance "
            f"length {self.acceptance_length:.2f} ÷ step-cost ratio "
            f"{ratio}: verify step {self.verify_step_ms:.1f} ms vs off's "
            f"{self.decode_step_ms:.2f} ms; break-even acceptance length "
            f"{ratio}{rate} (refused: {why})"
        )


def diagnose_on_engine_clock(
    baseline: Row, candidate: Row, verdict: SpeedupVerdict
) -> EngineClockDiagnosis | None:
    """The decomposition of a client-clock-refused TPOT line on the engine's clock
    (module docs for every definition and when it is produced).

    Args:
        baseline: the ``off`` row at the same cell and load.
        candidate: the speculative row.
        verdict: their :func:`~deepseekbench.compare_speedup` verdict.

    Returns:
        The :class:`EngineClockDiagnosis`, or ``None``: the verdict printed a figure
        (then :func:`~deepseekbench.decompose_speedup` applies), is not by ``tpot_ms``,
        was refused for no client-clock reason or for one the engine's clock cannot
        answer (parity, too few requests...), an engine TPOT is missing or faulted, or
        the candidate has no acceptance length. Never raises.
    """
    reasons = set(verdict.reasons)
    if (
        verdict.printed
        or verdict.metric is not SpeedupMetric.tpot_ms
        or not reasons & CLIENT_CLOCK_REASONS
        or not reasons <= _ANSWERABLE
    ):
        return None
    decode, cand = server_value(baseline, "tpot_ms"), server_value(candidate, "tpot_ms")
    length = candidate.acceptance_length
    if (
        decode is None
        or cand is None
        or length is None
        or not (decode > 0 and cand > 0 and length >= 1)
        or witness_faults(baseline, "tpot_ms")
        or witness_faults(candidate, "tpot_ms")
    ):
        return None
    ratio = decode / cand
    cost = length / ratio
    depth = candidate.spec_tokens
    return EngineClockDiagnosis(
        engine_tpot_ratio=ratio,
        acceptance_length=length,
        step_cost_ratio=cost,
        decode_step_ms=decode,
        verify_step_ms=cand * length,
        depth=depth,
        break_even_length=cost,
        break_even_rate=break_even_acceptance_rate(cost, depth) if depth is not None else None,
        break_even_reachable=depth is None or cost <= depth + 1,
        refused_for=tuple(verdict.reasons),
    )
