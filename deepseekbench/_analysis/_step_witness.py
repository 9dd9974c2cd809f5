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
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._analysis._decompose import SpeedupDecomposition

__all__ = ["StepCostWitness", "StepCosts", "witness_step_costs"]


class StepCosts(BaseModel):
    """Step costs of one load obtained independently of the row judged (ms).

    ``verify_step_ms``: one verify step of the speculative route at that batch;
    ``decode_step_ms``: one decode step of ``off`` at the same batch; ``source``:
    where they come from, in words (e.g. "cost model", "vLLM
    model_execute_time_milliseconds", "synthetic acceptance run").

    Raises:
        pydantic.ValidationError: a cost not finite or not > 0, an empty
            ``source``, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    verify_step_ms: float = Field(gt=0, description="one verify step, ms")
    decode_step_ms: float = Field(gt=0, description="one decode step of off, ms")
    source: str = Field(min_length=1)

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
            predicted one: the parts add up.
        unexplained_ms: measured verify step − predicted verify step (ms; both on
            ``off``'s measured decode step), ``unexplained_ms_ci`` its interval (from
            the measured verify step's); negative: cheaper than predicted.
        source: where the independent costs came from.

    Raises:
        pydantic.ValidationError: a figure not finite, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    predicted_speedup: float = Field(gt=0)
    predicted_speedup_ci: tuple[float, float] | None = None
    measured_speedup: float = Field(gt=0)
    measured_speedup_ci: tuple[float, float] | None = None
    agrees: bool
    unexplained_ms: float
    unexplained_ms_ci: tuple[float, float] | None = None
    source: str

    def text(self) -> str:
        """The witness in words: "predicted 1.70× (1.66–1.73) from cost model, measured
        1.68×: the parts add up", or "... unexplained per-step overhead 18.0 ms (CI
        12.0–24.0)"."""
        pci = self.predicted_speedup_ci
        pred = f"predicted {self.predicted_speedup:.2f}×" + (
            f" ({pci[0]:.2f}–{pci[1]:.2f})" if pci is not None else ""
        )
        head = f"{pred} from {self.source}, measured {self.measured_speedup:.2f}×"
        if self.agrees:
            return f"{head}: the parts add up"
        ci = self.unexplained_ms_ci
        band = f" (CI {ci[0]:.1f}–{ci[1]:.1f})" if ci is not None else ""
        word = "overhead" if self.unexplained_ms >= 0 else "saving"
        return f"{head}: unexplained per-step {word} {abs(self.unexplained_ms):.1f} ms{band}"


def witness_step_costs(decomposition: SpeedupDecomposition, costs: StepCosts) -> StepCostWitness:
    """Predict the speedup from ``decomposition``'s acceptance length and the
    independent ``costs``, and name the per-step overhead when the measured figure
    disagrees (module docs for the formulas).

    Raises:
        Nothing beyond pydantic's validation of the figures made.
    """
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
    agrees = not (hi_m < lo_p or hi_p < lo_m)
    predicted_step = ratio * d.decode_step_ms
    v_ci = d.verify_step_ms_ci
    return StepCostWitness(
        predicted_speedup=predicted,
        predicted_speedup_ci=p_ci,
        measured_speedup=d.speedup,
        measured_speedup_ci=m_ci,
        agrees=agrees,
        unexplained_ms=d.verify_step_ms - predicted_step,
        unexplained_ms_ci=(
            (v_ci[0] - predicted_step, v_ci[1] - predicted_step) if v_ci is not None else None
        ),
        source=costs.source,
    )
