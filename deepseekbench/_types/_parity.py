"""Exact acceptance: a speculative route's outputs against the ``off`` route's.

For deterministic requests (temperature 0, fixed seed) lossless speculative
decoding must return exactly what plain decoding returns: greedy verification
keeps a draft token only when it equals the target's own choice (Leviathan et
al. 2023, "Fast Inference from Transformers via Speculative Decoding", ICML).
:class:`ExactAcceptance` checks that prompt by prompt: bit-exact content text,
bit-exact reasoning text, and token ids where both sides expose them. A
mismatch is reported as a :class:`Divergence` (first differing character and
token index, with a short context of both sides). A missing or errored output
never counts as a match.

The **determinism control** runs the ``off`` route twice. Real engines may
differ from themselves (batch-dependent kernels, non-associative float sums),
and when ``off`` does, exact acceptance cannot be established: the result is
``unknown`` with reason "baseline nondeterministic", never ``differs``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from deepseekbench._types._axes import QualityParity

__all__ = [
    "BASELINE_NONDETERMINISTIC",
    "DeterminismControl",
    "Divergence",
    "ExactAcceptance",
    "ParityOutput",
    "ParityResult",
    "PromptComparison",
    "baseline_parity",
    "determinism_control",
    "exact_acceptance",
    "row_parity",
]

BASELINE_NONDETERMINISTIC = "baseline nondeterministic"
"""The reason given when the ``off`` route differed from itself."""

_CONFIG = ConfigDict(frozen=True, extra="forbid")


class ParityOutput(BaseModel):
    """What one deterministic request returned, as parity needs it.

    Attributes:
        prompt_id: the parity prompt or task id.
        text: content text (characters).
        reasoning_text: reasoning text (characters), ``""`` when none.
        token_ids: completion token ids where the engine exposes them, else ``None``.
        finish_reason: as reported (``stop``, ``length``, ...), ``None`` if never seen.
        error: ``"<kind>: <message>"`` when the request failed, else ``None``.
    """

    model_config = _CONFIG

    prompt_id: str
    text: str = ""
    reasoning_text: str = ""
    token_ids: tuple[int, ...] | None = None
    finish_reason: str | None = None
    error: str | None = None

    @property
    def complete(self) -> bool:
        """True when the request ended without error (a comparable output)."""
        return self.error is None

    @classmethod
    def from_measurement(cls, prompt_id: str, measurement: Any) -> ParityOutput:
        """Build from a :class:`~deepseekbench.StreamMeasurement` (read by attribute).

        A measurement with ``error`` set gives an output with ``error`` set.
        """
        err = getattr(measurement, "error", None)
        error: str | None = None
        if err is not None:
            kind = getattr(err, "kind", "error")
            error = f"{getattr(kind, 'value', kind)}: {getattr(err, 'message', err)}"
        ids: Any = None
        for name in ("token_ids", "completion_token_ids", "output_token_ids"):
            ids = getattr(measurement, name, None)
            if ids is not None:
                break
        return cls(
            prompt_id=prompt_id,
            text=getattr(measurement, "text", "") or "",
            reasoning_text=getattr(measurement, "reasoning_text", "") or "",
            token_ids=tuple(int(i) for i in ids) if ids is not None else None,
            finish_reason=getattr(measurement, "finish_reason", None),
            error=error,
        )


DivergenceField = Literal["text", "reasoning_text", "token_ids", "missing"]


class Divergence(BaseModel):
    """The first place two outputs of one prompt differ.

    Attributes:
        prompt_id: the prompt.
        field: ``text``, ``reasoning_text``, ``token_ids`` or ``missing`` (an output
            absent or errored on a side).
        char_index: 0-based index of the first differing character (``None`` for
            ``token_ids``/``missing``).
        token_index: 0-based index of the first differing token id where both
            sides expose ids, else ``None``.
        baseline_context, candidate_context: up to ``2 × context`` characters
            around the divergence on each side (or the error).
    """

    model_config = _CONFIG

    prompt_id: str
    field: DivergenceField
    char_index: int | None = None
    token_index: int | None = None
    baseline_context: str = ""
    candidate_context: str = ""

    def describe(self, baseline_name: str = "off", candidate_name: str = "spec") -> str:
        """One line, e.g. ``p3: text differs at char 5 (token 5): off '…' vs spec '…'``."""
        if self.field == "missing":
            return (
                f"{self.prompt_id}: output missing ({baseline_name} {self.baseline_context!r}; "
                f"{candidate_name} {self.candidate_context!r})"
            )
        where = f"char {self.char_index}" if self.char_index is not None else "ids"
        if self.token_index is not None:
            where += f" (token {self.token_index})"
        return (
            f"{self.prompt_id}: {self.field} differs at {where}: "
            f"{baseline_name} {self.baseline_context!r} vs "
            f"{candidate_name} {self.candidate_context!r}"
        )


class PromptComparison(BaseModel):
    """One prompt: ``match`` True/False, or ``None`` when an output is missing/errored."""

    model_config = _CONFIG

    prompt_id: str
    match: bool | None
    divergence: Divergence | None = None


class DeterminismControl(BaseModel):
    """The ``off`` route run twice on the same prompts.

    ``deterministic``: True (every prompt identical), False (a difference seen),
    ``None`` (no prompts, or an output missing/errored without a difference).
    """

    model_config = _CONFIG

    deterministic: bool | None
    n_prompts: int
    divergences: tuple[Divergence, ...] = ()
    n_missing: int = 0


class ParityResult(BaseModel):
    """Exact acceptance of one speculative route against ``off``.

    Attributes:
        parity: ``verified`` (every prompt matched), ``differs`` (a mismatch seen
            with a deterministic baseline), ``unknown`` (no prompts, an output
            missing/errored, or the baseline nondeterministic).
        reason: one sentence.
        prompts: per-prompt comparisons, in prompt order.
        control: the determinism control, when run.
    """

    model_config = _CONFIG

    parity: QualityParity
    reason: str
    prompts: tuple[PromptComparison, ...] = ()
    control: DeterminismControl | None = None
    n_matched: int = 0
    n_diverged: int = 0
    n_missing: int = 0

    @property
    def divergences(self) -> tuple[Divergence, ...]:
        """Every text/reasoning/token divergence (missing outputs excluded)."""
        return tuple(
            p.divergence for p in self.prompts if p.match is False and p.divergence is not None
        )

    @property
    def first_divergence(self) -> Divergence | None:
        """The first divergent prompt in prompt order, or ``None``."""
        d = self.divergences
        return d[0] if d else None


def _context(text: str, index: int, width: int) -> str:
    lo = max(0, index - width)
    hi = min(len(text), index + width)
    return ("…" if lo > 0 else "") + text[lo:hi] + ("…" if hi < len(text) else "")


def _first_diff(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class ExactAcceptance:
    """Compares outputs prompt by prompt, bit-exact (the design card's checker).

    Args:
        context: characters of context shown on each side of a divergence (>= 0).

    Raises:
        ValueError: ``context`` is negative.
    """

    def __init__(self, *, context: int = 24) -> None:
        if context < 0:
            raise ValueError("context must be >= 0")
        self.context = context

    def compare_one(
        self, prompt_id: str, baseline: ParityOutput | None, candidate: ParityOutput | None
    ) -> PromptComparison:
        """Compare one prompt's outputs; a missing or errored side gives ``match=None``."""
        if baseline is None or candidate is None or not baseline.complete or not candidate.complete:

            def show(o: ParityOutput | None) -> str:
                return "absent" if o is None else (o.error or "ok")

            return PromptComparison(
                prompt_id=prompt_id,
                match=None,
                divergence=Divergence(
                    prompt_id=prompt_id,
                    field="missing",
                    baseline_context=show(baseline),
                    candidate_context=show(candidate),
                ),
            )
        token_index: int | None = None
        if baseline.token_ids is not None and candidate.token_ids is not None:
            token_index = _first_diff(baseline.token_ids, candidate.token_ids)
        for field in ("reasoning_text", "text"):
            a, b = getattr(baseline, field), getattr(candidate, field)
            i = _first_diff(a, b)
            if i is not None:
                return PromptComparison(
                    prompt_id=prompt_id,
                    match=False,
                    divergence=Divergence(
                        prompt_id=prompt_id,
                        field=field,
                        char_index=i,
                        token_index=token_index,
                        baseline_context=_context(a, i, self.context),
                        candidate_context=_context(b, i, self.context),
                    ),
                )
        if token_index is not None:
            assert baseline.token_ids is not None and candidate.token_ids is not None
            return PromptComparison(
                prompt_id=prompt_id,
                match=False,
                divergence=Divergence(
                    prompt_id=prompt_id,
                    field="token_ids",
                    token_index=token_index,
                    baseline_context=str(baseline.token_ids[token_index : token_index + 4]),
                    candidate_context=str(candidate.token_ids[token_index : token_index + 4]),
                ),
            )
        return PromptComparison(prompt_id=prompt_id, match=True)

    def control(
        self,
        first: Mapping[str, ParityOutput],
        second: Mapping[str, ParityOutput],
        prompt_ids: Sequence[str] | None = None,
    ) -> DeterminismControl:
        """The determinism control: ``off`` run twice (see :class:`DeterminismControl`)."""
        ids = list(prompt_ids) if prompt_ids is not None else list(first)
        comps = [self.compare_one(pid, first.get(pid), second.get(pid)) for pid in ids]
        divs = tuple(c.divergence for c in comps if c.match is False and c.divergence)
        missing = sum(c.match is None for c in comps)
        deterministic: bool | None
        if divs:
            deterministic = False
        elif missing or not ids:
            deterministic = None
        else:
            deterministic = True
        return DeterminismControl(
            deterministic=deterministic, n_prompts=len(ids), divergences=divs, n_missing=missing
        )

    def compare(
        self,
        baseline: Mapping[str, ParityOutput],
        candidate: Mapping[str, ParityOutput],
        *,
        control: DeterminismControl | None = None,
        prompt_ids: Sequence[str] | None = None,
    ) -> ParityResult:
        """Exact acceptance of ``candidate`` against ``baseline`` (both keyed by prompt id).

        Args:
            baseline: ``off`` outputs; candidate: the speculative route's outputs.
            control: the determinism control; when it found ``off`` differing from
                itself the result is ``unknown`` ("baseline nondeterministic").
            prompt_ids: the deterministic prompts to compare (default: baseline's keys).

        Returns:
            :class:`ParityResult`.
        """
        ids = list(prompt_ids) if prompt_ids is not None else list(baseline)
        comps = tuple(self.compare_one(pid, baseline.get(pid), candidate.get(pid)) for pid in ids)
        matched = sum(c.match is True for c in comps)
        diverged = sum(c.match is False for c in comps)
        missing = sum(c.match is None for c in comps)
        counts = {"n_matched": matched, "n_diverged": diverged, "n_missing": missing}
        if not ids:
            parity, reason = QualityParity.unknown, "no deterministic prompts"
        elif control is not None and control.deterministic is False:
            parity = QualityParity.unknown
            reason = (
                f"{BASELINE_NONDETERMINISTIC}: off differed from itself on "
                f"{len(control.divergences)} of {control.n_prompts} prompts"
            )
        elif diverged:
            parity = QualityParity.differs
            reason = f"{diverged} of {len(ids)} prompts diverge from off"
        elif missing:
            parity = QualityParity.unknown
            reason = f"{missing} of {len(ids)} outputs missing or errored"
        else:
            parity = QualityParity.verified
            reason = f"bit-exact on {matched} of {len(ids)} prompts"
        return ParityResult(parity=parity, reason=reason, prompts=comps, control=control, **counts)


def exact_acceptance(
    baseline: Mapping[str, ParityOutput],
    candidate: Mapping[str, ParityOutput],
    *,
    control: DeterminismControl | None = None,
    prompt_ids: Sequence[str] | None = None,
    context: int = 24,
) -> ParityResult:
    """Function form of :meth:`ExactAcceptance.compare` (same arguments and result).

    ``context``: characters shown on each side of a divergence.

    Raises:
        ValueError: ``context`` is negative.
    """
    return ExactAcceptance(context=context).compare(
        baseline, candidate, control=control, prompt_ids=prompt_ids
    )


def determinism_control(
    first: Mapping[str, ParityOutput],
    second: Mapping[str, ParityOutput],
    prompt_ids: Sequence[str] | None = None,
) -> DeterminismControl:
    """Function form of :meth:`ExactAcceptance.control`."""
    return ExactAcceptance().control(first, second, prompt_ids)


def baseline_parity(
    outputs: Mapping[str, ParityOutput],
    control: DeterminismControl | None,
    prompt_ids: Sequence[str] | None = None,
) -> tuple[QualityParity, str]:
    """Parity of the ``off`` row: ``verified`` when the determinism control passed and
    every reference output is complete; ``unknown`` otherwise (never ``differs``).

    Returns:
        ``(parity, reason)``.
    """
    ids = list(prompt_ids) if prompt_ids is not None else list(outputs)
    if not ids:
        return QualityParity.unknown, "no deterministic prompts"
    missing = sum(1 for pid in ids if pid not in outputs or not outputs[pid].complete)
    if missing:
        return QualityParity.unknown, f"{missing} of {len(ids)} reference outputs missing"
    if control is None:
        return QualityParity.unknown, "determinism control not run"
    if control.deterministic is False:
        return (
            QualityParity.unknown,
            f"{BASELINE_NONDETERMINISTIC}: off differed from itself on "
            f"{len(control.divergences)} of {control.n_prompts} prompts",
        )
    if control.deterministic is None:
        return QualityParity.unknown, "determinism control incomplete"
    return QualityParity.verified, f"deterministic on {control.n_prompts} prompts"


class JudgedParity(Protocol):
    """What :func:`row_parity` reads of a task-parity result
    (:class:`~deepseekbench.TaskParityResult` has both attributes)."""

    @property
    def parity(self) -> QualityParity:
        """The task-parity verdict."""
        ...

    @property
    def reason(self) -> str:
        """Why, in one sentence."""
        ...


def row_parity(exact: ParityResult, tasks: JudgedParity | None) -> tuple[QualityParity, str]:
    """Parity of a speculative row from exact acceptance and task parity.

    ``verified`` only when exact acceptance is verified and task parity (when a
    task set was run) is verified; ``differs`` when either saw a mismatch;
    ``unknown`` otherwise.

    Returns:
        ``(parity, reason)``; the reason joins both parts' reasons.
    """
    parts = [f"exact: {exact.reason}"]
    if tasks is not None:
        parts.append(f"tasks: {tasks.reason}")
    reason = "; ".join(parts)
    states = [exact.parity] + ([tasks.parity] if tasks is not None else [])
    if QualityParity.differs in states:
        return QualityParity.differs, reason
    if all(s is QualityParity.verified for s in states):
        return QualityParity.verified, reason
    return QualityParity.unknown, reason
