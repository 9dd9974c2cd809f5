"""Tasks, graders, user task files, the smoke set and task-score parity."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from scipy.stats import binomtest

from deepseekbench import (
    Grader,
    ParityOutput,
    QualityParity,
    Task,
    TaskFormatError,
    all_reference_tasks,
    load_tasks,
    smoke_tasks,
    task_parity,
)
from deepseekbench._engine._model import greedy_answer
from deepseekbench._plan._tasks import parse_tasks


def g(kind: str, expected: str, **kw: object) -> Grader:
    return Grader.model_validate({"kind": kind, "expected": expected, **kw})


def test_graders() -> None:
    assert g("exact", "42").grade("  42\n") and not g("exact", "42").grade("42.")
    assert g("numeric", "42").grade("17 + 25 = 42") and not g("numeric", "42").grade("42 + 1")
    assert g("numeric", "0.5", abs_tol=0.01).grade("about 0.505")
    assert not g("numeric", "3").grade("no number here")
    assert g("regex", r"^\D*5\D+6$").grade("5, 6") and not g("regex", "^a").grade("ba")
    assert g("contains", "ruziz").grade("zizur → ruziz") and not g("contains", "X").grade("x")
    assert g("contains", "X", case_sensitive=False).grade("x")


@pytest.mark.parametrize(
    "kind,expected", [("regex", "("), ("numeric", "forty"), ("numeric", "inf")]
)
def test_invalid_graders_fail_validation(kind: str, expected: str) -> None:
    with pytest.raises(ValidationError):
        g(kind, expected)


def test_user_task_file_with_shorthand_and_full_graders(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        "# my tasks\n"
        '{"id": "a", "prompt": "What is 2+2?", "grader": "numeric", "expected": "4"}\n\n'
        '{"id": "b", "prompt": "Say hi", "grader": {"kind": "contains", "expected": "hi"},'
        ' "category": "chat", "max_tokens": 8}\n',
        encoding="utf-8",
    )
    tasks = load_tasks(path)
    assert [t.id for t in tasks] == ["a", "b"]
    assert tasks[0].grade("it is 4") and tasks[1].max_tokens == 8


@pytest.mark.parametrize(
    "text,line",
    [
        ('{"id": "a", "prompt": "p", "grader": "numeric", "expected": "1"}\nnot json\n', 2),
        ('{"id": "a", "prompt": "p", "grader": "nope", "expected": "1"}\n', 1),
        ('{"id": "a", "prompt": "p", "grader": "exact", "expected": "1", "extra": 1}\n', 1),
        (
            '{"id": "a", "prompt": "p", "grader": "exact", "expected": "1"}\n'
            '{"id": "a", "prompt": "q", "grader": "exact", "expected": "1"}\n',
            2,
        ),
    ],
)
def test_bad_task_lines_name_their_line(text: str, line: int) -> None:
    with pytest.raises(TaskFormatError) as info:
        parse_tasks(text.splitlines())
    assert info.value.line_number == line


def test_empty_or_missing_task_file(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError):
        parse_tasks([])
    with pytest.raises(TaskFormatError):
        load_tasks(tmp_path / "absent.jsonl")


def test_smoke_set_is_answerable_by_the_embedded_engine() -> None:
    tasks = smoke_tasks()
    assert 10 <= len(tasks) <= 20
    assert {t.category for t in tasks} == {"coding", "reasoning"}
    reference = {t.prompt: t.answer for t in all_reference_tasks()}
    for task in tasks:
        assert task.prompt in reference, task.id
        assert task.grade(reference[task.prompt]), task.id
        assert task.grade(greedy_answer(task.prompt)), task.id


def _outs(results: dict[str, str | None]) -> dict[str, ParityOutput]:
    return {
        k: ParityOutput(prompt_id=k, text=v or "", error=None if v is not None else "connect: x")
        for k, v in results.items()
    }


def _tasks(n: int) -> list[Task]:
    return [Task(id=f"t{i}", prompt="q", grader=g("exact", "ok")) for i in range(n)]


def test_strict_parity_lists_every_flip() -> None:
    tasks = _tasks(4)
    base = _outs({"t0": "ok", "t1": "ok", "t2": "no", "t3": "ok"})
    cand = _outs({"t0": "ok", "t1": "no", "t2": "ok", "t3": "no"})
    res = task_parity(tasks, base, cand)
    assert res.parity is QualityParity.differs
    assert [f.task_id for f in res.flips] == ["t1", "t3"]
    assert [f.task_id for f in res.improvements] == ["t2"]
    assert res.flips[0].direction == "pass_to_fail"


def test_improvements_alone_keep_parity_and_missing_outputs_make_it_unknown() -> None:
    tasks = _tasks(2)
    assert (
        task_parity(tasks, _outs({"t0": "no", "t1": "ok"}), _outs({"t0": "ok", "t1": "ok"})).parity
        is QualityParity.verified
    )
    res = task_parity(tasks, _outs({"t0": "ok", "t1": "ok"}), _outs({"t0": "ok", "t1": None}))
    assert res.parity is QualityParity.unknown and res.n_missing == 1 and not res.flips
    assert task_parity([], {}, {}).parity is QualityParity.unknown


def test_lenient_mode_bounds_degradation_with_exact_mcnemar() -> None:
    many = _tasks(200)
    base = _outs({t.id: "ok" for t in many})
    cand = dict(base)
    cand["t0"] = ParityOutput(prompt_id="t0", text="no")
    strict = task_parity(many, base, cand)
    assert strict.parity is QualityParity.differs
    lenient = task_parity(many, base, cand, mode="lenient", tolerance=0.05)
    assert lenient.parity is QualityParity.verified and len(lenient.flips) == 1
    assert lenient.mcnemar_p == pytest.approx(binomtest(1, 1, 0.5, alternative="greater").pvalue)
    assert lenient.flip_rate_upper is not None and lenient.flip_rate_upper <= 0.05
    # the same single flip among 16 tasks is not bounded within 5 %
    few = many[:16]
    small = task_parity(few, base, cand, mode="lenient", tolerance=0.05)
    assert small.parity is QualityParity.differs
    # many flips are significant whatever the tolerance
    worse = {**base, **{f"t{i}": ParityOutput(prompt_id=f"t{i}", text="no") for i in range(20)}}
    assert task_parity(many, base, worse, mode="lenient", tolerance=0.5).parity is (
        QualityParity.differs
    )


def test_custom_grade_function_replaces_graders() -> None:
    tasks = _tasks(1)
    res = task_parity(tasks, _outs({"t0": "A"}), _outs({"t0": "a"}), grade=lambda t, s: s.isupper())
    assert res.parity is QualityParity.differs


def test_bad_modes_raise() -> None:
    with pytest.raises(ValueError):
        task_parity([], {}, {}, mode="loose")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        task_parity([], {}, {}, tolerance=1.0)
