"""A prediction of a load's speedup and the witness that checks it against the measured one.

Acceptance depends on content, not load; step costs depend on the engine and the
batch. So a load's speedup is predicted from the acceptance length measured and
step costs obtained **independently of the row judged**
(:class:`StepCosts`): the engine's own per-step figures where it exports them
(vLLM v0's ``vllm:model_forward_time_milliseconds`` /
``vllm:model_execute_time_milliseconds`` with ``--collect-detailed-traces``,
SGLang's speculative profiler), a synthetic-acceptance run of the route (vLLM's
synthetic acceptance sampler, llama.cpp's draft at a synthetic rate), or a
published cost model (the embedded engine's closed form,
:meth:`~deepseekbench.CostModel.step_costs`).

    predicted speedup = L / (verify_step_ms / decode_step_ms)   (independent costs)

When the measured figure falls outside the prediction's interval, the difference
is named as a per-step overhead: the measured verify step (``r × off's decode
step``, :class:`~deepseekbench.SpeedupDecomposition`) minus the predicted one
(the independent ratio × the same decode step), in ms with its interval —
"unexplained per-step overhead 18 ms (CI 12–24)".

A witness needs an interval on at least one side: two bare figures (a decomposition
built from rows alone, without per-request acceptance or a verdict's interval) differ
by some noise always, so such a witness is **not judged** (``agrees`` is ``None``) and
names no overhead. Nor is one whose speedup intervals are apart while the per-step gap's
own interval holds 0 (the verify step's interval also carries the acceptance length's):
an overhead is named only when both say it is there. The costs must be those of the batch
the engine actually ran: under
closed-loop load whose requests end at different lengths (the demo's pinned answers)
the mean batch is below the client's concurrency, and lower for the route whose
requests end sooner, so the closed form at batch = concurrency is not that load's cost
(docs/scorecard.md, "A prediction and its witness"); ``output_length = "forced"`` keeps
the batch full, as ``benchmarks/bench_speedup_witness.py`` does. Where the engine
counts its own steps (a row's ``engine_batch_mean``: vLLM's
``vllm:iteration_tokens_total``, llama.cpp's ``llamacpp:n_decode_total``, the embedded
engine's vLLM-named histogram; docs/engines.md, "Engine steps"), :func:`witness_batch`
takes each route's batch from its row, else batch = concurrency, and says which;
:func:`cost_model_step_costs` reads a cost model there. That batch is a mean over the
engine's steps; a request's TPOT weighs steps by the sequences in them, so where the
batch varies (prefill-only steps, a round's tail) the step mean is below the batch a
token sees (docs/scorecard.md, "A prediction and its witness": on the demo it agrees
at c=1 and c=2 and names a false 7.6 ms saving at c=8, where batch = concurrency agrees).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deepseekbench._analysis._decompose import SpeedupDecomposition
from deepseekbench._engine._costs import CostModel
from deepseekbench._errors import StepCostsError
from deepseekbench._types._row import Row

__all__ = [
    "StepCostWitness",
    "StepCosts",
    "WitnessBatch",
    "cost_model_step_costs",
    "witness_batch",
    "witness_step_costs",
]

_FIELDS: dict[str, str] = {
    "verify_step_ms": "one verify step of the speculative route at that batch, a finite "
    "number > 0 (ms)",
    "decode_step_ms": "one decode step of off at the same batch, a finite number > 0 (ms)",
    "source": "where the costs come from, in words (e.g. 'cost model')",
}


def _explain(exc: ValidationError) -> str:
    """``StepCosts``' validation errors in words: each field, what it must be, what came."""
    parts: list[str] = []
    for e in exc.errors():
        name = str(e["loc"][0]) if e["loc"] else "?"
        got = "missing" if e["type"] == "missing" else f"got {e['input']!r}"
        if name in _FIELDS:
            parts.append(f"{name} must be {_FIELDS[name]}; {got}")
        else:
            parts.append(f"{name} is not a field (known: {', '.join(_FIELDS)}); {got}")
    return "StepCosts: " + "; ".join(parts)


class StepCosts(BaseModel):
    """Step costs of one load obtained independently of the row judged (ms).

    ``verify_step_ms``: one verify step of the speculative route at that batch;
    ``decode_step_ms``: one decode step of ``off`` at the same batch; ``source``:
    where they come from, in words (e.g. "cost model", "vLLM
    model_execute_time_milliseconds", "synthetic acceptance run"). Positional or by
    keyword: ``StepCosts(22.0, 16.0, "cost model")``. The batch is the number of
    sequences the engine actually ran per step, not the client's concurrency: a load
    whose requests end at different lengths runs fewer (docs/scorecard.md, "A
    prediction and its witness").

    Raises:
        StepCostsError: a cost not a finite number > 0, an empty ``source``, an
            unknown field, or more than three positional arguments (a ``ValueError``;
            the message names each field, what it must be and what came).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    verify_step_ms: float = Field(gt=0, description="one verify step, ms")
    decode_step_ms: float = Field(gt=0, description="one decode step of off, ms")
    source: str = Field(min_length=1)

    if TYPE_CHECKING:

        def __init__(self, verify_step_ms: float, decode_step_ms: float, source: str) -> None:
            """The signature type checkers see (positional or keyword)."""

    else:

        def __init__(self, *args: Any, **data: Any) -> None:
            if len(args) > len(_FIELDS):
                raise StepCostsError(
                    f"StepCosts takes at most {len(_FIELDS)} positional arguments "
                    f"({', '.join(_FIELDS)}), got {len(args)}"
                )
            for name, value in zip(_FIELDS, args, strict=False):
                if name in data:
                    raise StepCostsError(f"StepCosts: {name} given twice")
                data[name] = value
            try:
                super().__init__(**data)
            except ValidationError as exc:
                raise StepCostsError(_explain(exc)) from None

    @property
    def ratio(self) -> float:
        """The independent step-cost ratio (dimensionless)."""
        return self.verify_step_ms / self.decode_step_ms


class StepCostWitness(BaseModel):
    """A measured decomposition held against a prediction from independent step costs.

    Attributes:
        predicted_speedup: ``L / costs.ratio`` (times faster);
            ``predicted_speedup_ci``: from ``L``'s interval (``None`` without one).
        measured_speedup: the credited figure; ``measured_speedup_ci`` its interval.
        agrees: the measured interval (the figure when it has none) overlaps the
            predicted one (the figure when it has none): the parts add up; ``None``
            when neither figure has an interval, so no difference can be told from
            noise and none is named (not judged: a decomposition built from rows
            alone, :func:`~deepseekbench.decompose_speedup` without ``verdict`` and
            ``acceptance_samples``, has none; a scorecard line's has both), or when
            the speedup intervals are apart but ``unexplained_ms_ci`` holds 0
            (``undecided`` says why).
        predicted_verify_step_ms: the independent ratio × ``off``'s measured decode
            step (ms); ``measured_verify_step_ms``: the decomposition's (ms).
        unexplained_ms: measured verify step − predicted verify step (ms; both on
            ``off``'s measured decode step), ``unexplained_ms_ci`` its interval (from
            the measured verify step's); negative: cheaper than predicted.
        detectable_ms: the smallest per-step overhead the witness would
            have named had the measurement sat exactly on the prediction (ms): the
            two intervals' widths in ms of the predicted verify step; ``None`` when
            not judged.
        source: where the independent costs came from.
        undecided: why a witness with intervals was not judged (``None`` otherwise).

    Raises:
        pydantic.ValidationError: a figure not finite, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    predicted_speedup: float = Field(gt=0)
    predicted_speedup_ci: tuple[float, float] | None = None
    measured_speedup: float = Field(gt=0)
    measured_speedup_ci: tuple[float, float] | None = None
    agrees: bool | None
    predicted_verify_step_ms: float = Field(gt=0)
    measured_verify_step_ms: float = Field(gt=0)
    unexplained_ms: float
    unexplained_ms_ci: tuple[float, float] | None = None
    detectable_ms: float | None = Field(default=None, ge=0)
    source: str
    undecided: str | None = None

    def text(self) -> str:
        """The witness in words: "predicted 1.70× (1.66–1.73) from cost model, measured
        1.68×: the parts add up", or "... unexplained per-step overhead 18.0 ms (CI
        12.0–24.0)", or "... not judged (neither figure has an interval); measured
        verify step 0.2 ms above the prediction"."""
        pci = self.predicted_speedup_ci
        pred = f"predicted {self.predicted_speedup:.2f}×" + (
            f" ({pci[0]:.2f}–{pci[1]:.2f})" if pci is not None else ""
        )
        head = f"{pred} from {self.source}, measured {self.measured_speedup:.2f}×"
        if self.agrees is None:
            why = self.undecided or "neither figure has an interval"
            return f"{head}: not judged ({why}); {self._gap()}"
        if self.agrees:
            return f"{head}: the parts add up"
        ci = self.unexplained_ms_ci
        band = f" (CI {ci[0]:.1f}–{ci[1]:.1f})" if ci is not None else ""
        word = "overhead" if self.unexplained_ms >= 0 else "saving"
        return f"{head}: unexplained per-step {word} {abs(self.unexplained_ms):.1f} ms{band}"

    def __str__(self) -> str:
        """The witness as sentences: both speedups with their intervals, both verify
        steps in ms, the verdict, and the smallest overhead it could have named."""
        mci = self.measured_speedup_ci
        measured = f"measured {self.measured_speedup:.2f}×" + (
            f" (95 % CI {mci[0]:.2f}–{mci[1]:.2f})" if mci is not None else " (no interval)"
        )
        pci = self.predicted_speedup_ci
        predicted = f"predicted {self.predicted_speedup:.2f}×" + (
            f" (95 % CI {pci[0]:.2f}–{pci[1]:.2f})" if pci is not None else " (no interval)"
        )
        steps = (
            f"verify step {self.measured_verify_step_ms:.1f} ms measured vs "
            f"{self.predicted_verify_step_ms:.1f} ms predicted"
        )
        if self.agrees is None:
            why = (
                self.undecided
                or "neither figure has an interval, so no difference can be told "
                "from noise (a scorecard line's decomposition carries both)"
            )
            verdict = f"not judged: {why}; {self._gap()}"
        elif self.agrees:
            verdict = "the parts add up (the intervals overlap)"
        else:
            word = "overhead" if self.unexplained_ms >= 0 else "saving"
            ci = self.unexplained_ms_ci
            band = f" (95 % CI {ci[0]:.1f}–{ci[1]:.1f} ms)" if ci is not None else ""
            verdict = f"unexplained per-step {word} {abs(self.unexplained_ms):.1f} ms{band}"
        if self.detectable_ms is None:
            reach = "Without intervals it could have detected no overhead, however large."
        else:
            reach = (
                f"At these intervals it would have named a per-step overhead of "
                f"{self.detectable_ms:.1f} ms or more."
            )
        return f"Speedup {measured}, {predicted} from {self.source}; {steps}: {verdict}. {reach}"

    def _gap(self) -> str:
        side = "above" if self.unexplained_ms >= 0 else "below"
        return f"measured verify step {abs(self.unexplained_ms):.1f} ms {side} the prediction"


def witness_step_costs(decomposition: SpeedupDecomposition, costs: StepCosts) -> StepCostWitness:
    """Predict the speedup from ``decomposition``'s acceptance length and the
    independent ``costs``, and name the per-step overhead when the measured figure
    disagrees (module docs for the formulas).

    ``decomposition``: a scorecard line's ``decomposition`` (``None`` there when no
    speedup is credited: nothing to witness). ``costs``: the load's step costs at the
    batch the engine actually ran (``StepCosts``' docstring).

    Raises:
        StepCostsError: ``decomposition`` is not a :class:`SpeedupDecomposition`
            (e.g. ``None``) or ``costs`` not :class:`StepCosts` (a ``ValueError``).
    """
    if not isinstance(decomposition, SpeedupDecomposition):
        why = "; a line's decomposition is None where no speedup is credited"
        raise StepCostsError(
            "witness_step_costs needs a SpeedupDecomposition (a scorecard line's "
            f"decomposition), got {decomposition!r}{why if decomposition is None else ''}"
        )
    if not isinstance(costs, StepCosts):
        raise StepCostsError(f"witness_step_costs needs StepCosts as costs, got {costs!r}")
    d = decomposition
    ratio = costs.ratio
    predicted = d.acceptance_length / ratio
    p_ci = (
        (d.acceptance_length_ci[0] / ratio, d.acceptance_length_ci[1] / ratio)
        if d.acceptance_length_ci is not None
        else None
    )
    m_ci = d.speedup_ci
    lo_m, hi_m = m_ci if m_ci is not None else (d.speedup, d.speedup)
    lo_p, hi_p = p_ci if p_ci is not None else (predicted, predicted)
    judged = m_ci is not None or p_ci is not None
    agrees = not (hi_m < lo_p or hi_p < lo_m) if judged else None
    predicted_step = ratio * d.decode_step_ms
    v_ci = d.verify_step_ms_ci
    gap_ci = (v_ci[0] - predicted_step, v_ci[1] - predicted_step) if v_ci is not None else None
    undecided = None
    if agrees is False and gap_ci is not None and gap_ci[0] <= 0.0 <= gap_ci[1]:
        agrees = None  # the two intervals disagree on whether there is a gap
        undecided = (
            "the speedups' intervals are apart, but the per-step gap's interval "
            f"({gap_ci[0]:.1f}–{gap_ci[1]:.1f} ms) holds 0: too uncertain to name an overhead"
        )
    return StepCostWitness(
        predicted_speedup=predicted,
        predicted_speedup_ci=p_ci,
        measured_speedup=d.speedup,
        measured_speedup_ci=m_ci,
        agrees=agrees,
        predicted_verify_step_ms=predicted_step,
        measured_verify_step_ms=d.verify_step_ms,
        unexplained_ms=d.verify_step_ms - predicted_step,
        unexplained_ms_ci=gap_ci,
        detectable_ms=(
            _detectable_ms(predicted_step, hi_m / d.speedup, lo_p / predicted) if judged else None
        ),
        source=costs.source,
        undecided=undecided,
    )


def _detectable_ms(step_ms: float, hi_m: float, lo_p: float) -> float:
    """The smallest per-step overhead (ms) that would put the intervals apart, had the
    measurement sat on the prediction: the measured speedup scales as
    ``step / (step + δ)``, so an overhead is named once ``hi_m·step/(step+δ) < lo_p``
    (``hi_m``: the measured interval's top over its figure; ``lo_p``: the predicted
    interval's bottom over its figure; ``step_ms``: the predicted verify step)."""
    return max(0.0, step_ms * (hi_m / lo_p - 1.0))


class WitnessBatch(BaseModel):
    """The batch each route's step costs are read at (sequences per engine step).

    Attributes:
        candidate / off: mean sequences decoded per engine step of the speculative
            route and of ``off`` (sequences; the rows' ``engine_batch_mean``, or the
            client's concurrency for both).
        basis: ``"engine"``: both from the engine's own step counters;
            ``"concurrency"``: batch = concurrency (a row lacks the figure).
        source: the rows' ``engine_steps_source``, or why concurrency was used.

    Raises:
        pydantic.ValidationError: a batch not a finite number > 0.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    candidate: float = Field(gt=0, description="sequences per step")
    off: float = Field(gt=0, description="sequences per step")
    basis: Literal["engine", "concurrency"]
    source: str

    def __str__(self) -> str:
        """The batch in words: "the batch the engine ran (candidate 4.69, off 4.58
        sequences per step; prometheus:...)" or "batch = concurrency 8 (...)"."""
        if self.basis == "engine":
            return (
                f"the batch the engine ran (candidate {self.candidate:.2f}, off "
                f"{self.off:.2f} sequences per step; {self.source})"
            )
        return f"batch = concurrency {self.candidate:g} ({self.source})"


def witness_batch(candidate: Row, off: Row, concurrency: int) -> WitnessBatch:
    """Each route's batch for its step costs: the rows' ``engine_batch_mean`` (the
    engine's own step counters over the rows' windows) when both have it, else
    ``concurrency`` for both (closed-loop streams), saying which.

    Raises:
        StepCostsError: ``concurrency`` below 1 (a ``ValueError``).
    """
    if concurrency < 1:
        raise StepCostsError(f"witness_batch: concurrency must be >= 1, got {concurrency!r}")
    c, o = candidate.engine_batch_mean, off.engine_batch_mean
    if c is not None and o is not None:
        source = candidate.engine_steps_source or off.engine_steps_source or "engine steps"
        return WitnessBatch(candidate=c, off=o, basis="engine", source=source)
    missing = candidate.route_label if c is None else off.route_label
    why = f"row {missing!r} has no engine_batch_mean: the engine exports no step count"
    return WitnessBatch(candidate=concurrency, off=concurrency, basis="concurrency", source=why)


def cost_model_step_costs(
    model: CostModel, batch: WitnessBatch, draft_tokens: int, *, model_draft: bool
) -> StepCosts:
    """``model``'s closed-form step costs (:meth:`~deepseekbench.CostModel.step_costs`)
    at ``batch``: the verify step at the candidate's batch, ``off``'s decode step at
    ``off``'s (ms), the source naming the batch used.

    ``draft_tokens``: draft tokens per verify step (tokens); ``model_draft``: drafts
    from a model head (``False`` for prompt lookup).

    Raises:
        StepCostsError: a cost that is not > 0 (a model of zero costs).
    """
    verify, _ = model.step_costs(batch.candidate, draft_tokens, model_draft=model_draft)
    _, decode = model.step_costs(batch.off, draft_tokens, model_draft=model_draft)
    return StepCosts(verify, decode, f"cost model at {batch}")
