"""Task-score parity: graded tasks run on the ``off`` route and a speculative route.

A :class:`Task` is a prompt with a declarative :class:`Grader` (``exact``,
``numeric``, ``regex`` or ``contains``). Graders only read the output text:
model-written code is never executed. Users bring their own tasks as JSONL
(:func:`load_tasks`) and, from Python, may pass any grading function.

:func:`task_parity` grades both routes task by task. A *flip* is a task that
passes on ``off`` and fails on the speculative route (pass → fail); the reverse
is an *improvement*. Strict mode (the default) verifies parity only when no
task flips. The opt-in lenient mode also verifies parity when the exact
McNemar test (``scipy.stats.binomtest`` on the discordant pairs; McNemar 1947,
"Note on the sampling error of the difference between correlated proportions",
Psychometrika 12(2)) finds no significant degradation at level ``alpha`` *and*
the one-sided 95 % Clopper–Pearson upper bound on the per-task pass → fail rate
is at most ``tolerance`` (so the pass-rate loss is bounded by ``tolerance`` with
95 % confidence). Every flip is listed either way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from deepseekbench._errors import TaskFormatError
from deepseekbench._types._axes import QualityParity
from deepseekbench._types._fraction import parse_fraction
from deepseekbench._types._parity import ParityOutput
from deepseekbench._userfile import read_user_text

__all__ = [
    "DEFAULT_TOLERANCE",
    "GradeFn",
    "Grader",
    "GraderKind",
    "Task",
    "TaskFlip",
    "TaskFormatError",
    "TaskOutcome",
    "TaskParityMode",
    "TaskParityResult",
    "load_tasks",
    "parse_tasks",
    "smoke_tasks",
    "task_parity",
]

DEFAULT_TOLERANCE = 0.05
"""Lenient mode's default bound on the pass → fail flip rate (fraction of tasks, 0..1)."""

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


class GraderKind(StrEnum):
    """How an output is graded (text only; nothing is executed).

    ``exact``: stripped output equals ``expected``; ``numeric``: the last number
    in the output is within tolerance of ``expected``; ``regex``: ``re.search``
    of the pattern ``expected`` finds a match; ``contains``: ``expected`` is a
    substring of the output.
    """

    exact = "exact"
    numeric = "numeric"
    regex = "regex"
    contains = "contains"


class Grader(BaseModel):
    """A declarative grader: pass/fail from the output text alone.

    Attributes:
        kind: :class:`GraderKind`.
        expected: the reference answer (``exact``/``contains``), the pattern
            (``regex``, Python ``re`` syntax) or a number (``numeric``).
        case_sensitive: for ``exact``, ``contains`` and ``regex`` (default True).
        abs_tol, rel_tol: ``numeric`` passes when
            ``|x - expected| <= abs_tol + rel_tol * |expected|`` (same unit as the answer).

    Raises:
        pydantic.ValidationError: an invalid regex, a non-numeric ``expected`` for
            ``numeric``, a negative tolerance, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: GraderKind
    expected: str
    case_sensitive: bool = True
    abs_tol: float = Field(default=1e-9, ge=0)
    rel_tol: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _check_expected(self) -> Grader:
        if self.kind is GraderKind.regex:
            try:
                re.compile(self.expected)
            except re.error as exc:
                raise ValueError(f"invalid regex {self.expected!r}: {exc}") from exc
        elif self.kind is GraderKind.numeric:
            try:
                value = float(self.expected)
            except ValueError as exc:
                raise ValueError(f"numeric grader needs a number, got {self.expected!r}") from exc
            if not math.isfinite(value):
                raise ValueError("numeric grader needs a finite number")
        return self

    def grade(self, output: str) -> bool:
        """True when ``output`` (the answer text) passes; never raises for any ``str``."""
        if self.kind is GraderKind.numeric:
            numbers = _NUMBER.findall(output)
            if not numbers:
                return False
            try:
                got = float(numbers[-1])
            except ValueError:
                return False
            want = float(self.expected)
            return abs(got - want) <= self.abs_tol + self.rel_tol * abs(want)
        if self.kind is GraderKind.regex:
            flags = 0 if self.case_sensitive else re.IGNORECASE
            return re.search(self.expected, output, flags) is not None
        out, exp = output, self.expected
        if not self.case_sensitive:
            out, exp = out.casefold(), exp.casefold()
        if self.kind is GraderKind.exact:
            return out.strip() == exp.strip()
        return exp in out


class Task(BaseModel):
    """One graded task.

    Attributes:
        id: unique within a task set.
        prompt: the user message sent (one turn).
        grader: the :class:`Grader`.
        category: free label, e.g. ``coding`` or ``reasoning``.
        max_tokens: output bound for this task (tokens); ``None`` = the plan's.

    JSON shape: ``{"id", "prompt", "grader": {"kind", "expected", ...}}``, or the
    shorthand ``{"id", "prompt", "grader": "numeric", "expected": "42"}``.

    Raises:
        pydantic.ValidationError: a missing or unknown field or an invalid grader.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    grader: Grader
    category: str = "reasoning"
    max_tokens: int | None = Field(default=None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and isinstance(data.get("grader"), str):
            data = dict(data)
            grader: dict[str, Any] = {"kind": data.pop("grader")}
            for key in ("expected", "case_sensitive", "abs_tol", "rel_tol"):
                if key in data:
                    grader[key] = data.pop(key)
            data["grader"] = grader
        return data

    def grade(self, output: str) -> bool:
        """True when ``output`` passes this task's grader."""
        return self.grader.grade(output)


GradeFn = Callable[[Task, str], bool]
"""A user grading function: ``(task, output_text) -> passed``. It must not execute output."""


def parse_tasks(lines: Iterable[str | bytes], *, source: str = "<tasks>") -> tuple[Task, ...]:
    """Parse task JSONL lines (blank lines and lines starting with ``#`` skipped).

    Raises:
        TaskFormatError: a line is not JSON, not a valid :class:`Task`, a task id
            repeats, or there is no task at all.
    """
    tasks: list[Task] = []
    seen: set[str] = set()
    for number, raw in enumerate(lines, start=1):
        line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            task = Task.model_validate(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            raise TaskFormatError(
                f"{source}: line {number} is not JSON: {exc}", line_number=number
            ) from exc
        except ValidationError as exc:
            raise TaskFormatError(
                f"{source}: line {number} is not a valid task: {exc}", line_number=number
            ) from exc
        if task.id in seen:
            raise TaskFormatError(
                f"{source}: line {number} repeats task id {task.id!r}", line_number=number
            )
        seen.add(task.id)
        tasks.append(task)
    if not tasks:
        raise TaskFormatError(f"{source}: no tasks")
    return tuple(tasks)


def load_tasks(path: str | Path) -> tuple[Task, ...]:
    """Load a user task set from a JSONL file (one :class:`Task` a line).

    Raises:
        TaskFormatError: the file cannot be read, is not UTF-8, or a line is invalid.
    """
    p = Path(path)
    text = read_user_text(p, what="task file", fail=TaskFormatError)
    return parse_tasks(text.split("\n"), source=str(p))  # not splitlines (U+2028, U+0085)


def smoke_tasks() -> tuple[Task, ...]:
    """The built-in smoke set (``deepseekbench/data/smoke_tasks.jsonl``).

    Short coding and reasoning tasks the embedded engine answers correctly at
    temperature 0; the graders also accept a general chat model's usual answer
    forms (the last number, a regex over the expected code).

    Raises:
        TaskFormatError: the packaged file is invalid (only on a broken install).
        OSError: the packaged file is missing (only on a broken install).
    """
    text = resources.files("deepseekbench").joinpath("data/smoke_tasks.jsonl").read_text("utf-8")
    return parse_tasks(text.splitlines(), source="smoke_tasks.jsonl")


TaskParityMode = Literal["strict", "lenient"]


def _excerpt(text: str | None, limit: int = 80) -> str | None:
    if text is None:
        return None
    return text if len(text) <= limit else text[: limit - 1] + "…"


class TaskOutcome(BaseModel):
    """One task on both routes: ``None`` = no gradable output (missing or errored)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    baseline_pass: bool | None
    candidate_pass: bool | None


class TaskFlip(BaseModel):
    """A task whose grade changed between the routes.

    ``direction``: ``pass_to_fail`` (a flip: the speculative route lost it) or
    ``fail_to_pass``. Outputs are excerpts (at most 80 characters).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    direction: Literal["pass_to_fail", "fail_to_pass"]
    prompt: str
    expected: str
    baseline_output: str | None
    candidate_output: str | None

    def describe(self, baseline_name: str = "off", candidate_name: str = "spec") -> str:
        """One line: ``task_id: pass→fail: off '…' vs spec '…'`` (outputs cut to 48 chars)."""
        arrow = "pass→fail" if self.direction == "pass_to_fail" else "fail→pass"
        return (
            f"{self.task_id}: {arrow}: {baseline_name} {_excerpt(self.baseline_output, 48)!r} "
            f"vs {candidate_name} {_excerpt(self.candidate_output, 48)!r}"
        )


class TaskParityResult(BaseModel):
    """Task-score parity between the ``off`` route and a speculative route.

    Attributes:
        parity: ``verified`` (no flip, or lenient test passed), ``differs`` (a flip
            and the test, if any, did not clear it) or ``unknown`` (no tasks, or
            an output missing/errored on either side).
        mode, tolerance, alpha: the rule applied (tolerance is a fraction of tasks).
        n_tasks: tasks graded; baseline_passed / candidate_passed: passes (tasks).
        flips: every pass → fail; improvements: every fail → pass.
        mcnemar_p: one-sided exact McNemar p-value (None when not computed).
        flip_rate_upper: one-sided 95 % Clopper–Pearson upper bound on the
            pass → fail rate (fraction; None when not computed).
        reason: one sentence.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    parity: QualityParity
    mode: TaskParityMode
    tolerance: float
    alpha: float
    n_tasks: int
    n_missing: int
    baseline_passed: int
    candidate_passed: int
    outcomes: tuple[TaskOutcome, ...]
    flips: tuple[TaskFlip, ...]
    improvements: tuple[TaskFlip, ...]
    mcnemar_p: float | None = None
    flip_rate_upper: float | None = None
    reason: str


def _pass(task: Task, out: ParityOutput | None, grade: GradeFn | None) -> bool | None:
    if out is None or not out.complete:
        return None
    return grade(task, out.text) if grade is not None else task.grade(out.text)


def task_parity(
    tasks: Sequence[Task],
    baseline: Mapping[str, ParityOutput],
    candidate: Mapping[str, ParityOutput],
    *,
    mode: TaskParityMode = "strict",
    tolerance: float | str = DEFAULT_TOLERANCE,
    alpha: float = 0.05,
    grade: GradeFn | None = None,
) -> TaskParityResult:
    """Grade every task on both routes and decide task-score parity.

    Args:
        tasks: the task set.
        baseline, candidate: outputs keyed by task id (``off`` and speculative route).
        mode: ``strict`` (no pass → fail flip allowed) or ``lenient`` (see the module).
        tolerance: lenient bound on the pass → fail rate, in [0, 1): a fraction
            (``0.05``) or a percent string (``"5%"``).
        alpha: lenient McNemar significance level, in (0, 1).
        grade: optional ``(task, text) -> bool`` replacing each task's grader.

    Returns:
        :class:`TaskParityResult`. A missing or errored output is never a pass
        and never a flip: it makes parity ``unknown`` unless a flip was seen.

    Raises:
        ValueError: ``mode`` or ``alpha`` out of range.
        FractionFormatError: ``tolerance`` in neither form or out of range (a ValueError).
    """
    tolerance = parse_fraction(tolerance, name="tolerance")
    _check_parity_args(mode, tolerance, alpha)
    g = _grade_all(tasks, baseline, candidate, grade)
    common: dict[str, Any] = {
        "mode": mode,
        "tolerance": tolerance,
        "alpha": alpha,
        "n_tasks": len(tasks),
        "n_missing": g.n_missing,
        "baseline_passed": g.b_pass,
        "candidate_passed": g.c_pass,
        "outcomes": tuple(g.outcomes),
        "flips": tuple(g.flips),
        "improvements": tuple(g.improvements),
    }
    if not tasks:
        return TaskParityResult(parity=QualityParity.unknown, reason="no tasks", **common)
    if not g.flips:
        if g.n_missing:
            return TaskParityResult(
                parity=QualityParity.unknown,
                reason=f"no flip, but {g.n_missing} of {len(tasks)} tasks have no gradable output",
                **common,
            )
        return TaskParityResult(
            parity=QualityParity.verified,
            reason=f"no task flips ({g.c_pass}/{len(tasks)} pass on both)",
            **common,
        )
    if mode == "strict":
        return TaskParityResult(
            parity=QualityParity.differs,
            reason=f"{len(g.flips)} of {len(tasks)} tasks flip pass→fail (strict)",
            **common,
        )
    return _lenient(g, len(tasks), tolerance, alpha, common)


def _check_parity_args(mode: str, tolerance: float, alpha: float) -> None:
    if mode not in ("strict", "lenient"):
        raise ValueError(f"mode must be 'strict' or 'lenient', got {mode!r}")
    if not 0 <= tolerance < 1:
        raise ValueError("tolerance must be in [0, 1)")
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")


@dataclass
class _Graded:
    """Both routes' grades of one task set: outcomes, flips each way, tasks not graded."""

    outcomes: list[TaskOutcome] = field(default_factory=list)
    flips: list[TaskFlip] = field(default_factory=list)
    improvements: list[TaskFlip] = field(default_factory=list)
    n_missing: int = 0
    b_pass: int = 0
    c_pass: int = 0


def _grade_all(
    tasks: Sequence[Task],
    baseline: Mapping[str, ParityOutput],
    candidate: Mapping[str, ParityOutput],
    grade: GradeFn | None,
) -> _Graded:
    """Grade every task on both routes; a pass on one and a fail on the other is a flip."""
    g = _Graded()
    for task in tasks:
        b_out, c_out = baseline.get(task.id), candidate.get(task.id)
        b, c = _pass(task, b_out, grade), _pass(task, c_out, grade)
        g.outcomes.append(TaskOutcome(task_id=task.id, baseline_pass=b, candidate_pass=c))
        if b is None or c is None:
            g.n_missing += 1
            continue
        g.b_pass += b
        g.c_pass += c
        if b != c:
            flip = TaskFlip(
                task_id=task.id,
                direction="pass_to_fail" if b else "fail_to_pass",
                prompt=task.prompt,
                expected=task.grader.expected,
                baseline_output=_excerpt(b_out.text if b_out else None),
                candidate_output=_excerpt(c_out.text if c_out else None),
            )
            (g.flips if b else g.improvements).append(flip)
    return g


def _lenient(
    g: _Graded, n_tasks: int, tolerance: float, alpha: float, common: dict[str, Any]
) -> TaskParityResult:
    """The lenient verdict on flips seen: McNemar's test on the discordant pairs, and the
    pass → fail rate's 95 % upper bound against ``tolerance``."""
    from scipy.stats import binomtest

    n_graded = n_tasks - g.n_missing
    b_n, c_n = len(g.flips), len(g.improvements)
    p_value = float(binomtest(b_n, b_n + c_n, 0.5, alternative="greater").pvalue)
    upper = float(
        binomtest(b_n, max(n_graded, 1), alternative="less")
        .proportion_ci(confidence_level=0.95)
        .high
    )
    ok = p_value >= alpha and upper <= tolerance and g.n_missing == 0
    if ok:
        parity, why = QualityParity.verified, "within tolerance"
    elif p_value >= alpha and upper <= tolerance:
        parity, why = QualityParity.unknown, "within tolerance but outputs missing"
    else:
        parity, why = QualityParity.differs, "degradation not bounded"
    return TaskParityResult(
        parity=parity,
        reason=(
            f"{b_n} pass→fail, {c_n} fail→pass of {n_tasks} tasks; lenient: McNemar "
            f"p={p_value:.3g} (alpha {alpha:g}), flip-rate 95% upper bound "
            f"{upper:.3g} vs tolerance {tolerance:g}: {why}"
        ),
        mcnemar_p=p_value,
        flip_rate_upper=upper,
        **common,
    )
