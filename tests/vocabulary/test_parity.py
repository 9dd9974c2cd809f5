"""Exact acceptance, the determinism control and row parity."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from deepseekbench import (
    BASELINE_NONDETERMINISTIC,
    ErrorKind,
    ExactAcceptance,
    Grader,
    GraderKind,
    ParityOutput,
    QualityParity,
    StreamError,
    StreamMeasurement,
    Task,
    determinism_control,
    exact_acceptance,
    task_parity,
)
from deepseekbench._types._parity import baseline_parity, row_parity


def outs(**texts: str | None) -> dict[str, ParityOutput]:
    return {
        pid: ParityOutput(
            prompt_id=pid, text=t or "", error=None if t is not None else "timeout: x"
        )
        for pid, t in texts.items()
    }


def test_identical_outputs_are_verified() -> None:
    base = outs(a="17 + 25 = 42", b="def f(x):\n    return x")
    res = exact_acceptance(base, dict(base))
    assert res.parity is QualityParity.verified
    assert res.n_matched == 2 and res.first_divergence is None


def test_first_divergence_has_char_and_token_index_and_context() -> None:
    base = {"p": ParityOutput(prompt_id="p", text="12 × 12 = 144", token_ids=(1, 2, 3, 4, 5))}
    cand = {"p": ParityOutput(prompt_id="p", text="12 + 12 = 48", token_ids=(1, 2, 3, 9, 5))}
    res = ExactAcceptance(context=4).compare(base, cand)
    assert res.parity is QualityParity.differs
    d = res.first_divergence
    assert d is not None
    assert (d.field, d.char_index, d.token_index) == ("text", 3, 3)
    assert "×" in d.baseline_context and "+" in d.candidate_context
    assert "char 3" in d.describe() and "token 3" in d.describe()


def test_token_ids_alone_can_diverge() -> None:
    base = {"p": ParityOutput(prompt_id="p", text="ab", token_ids=(7, 8))}
    cand = {"p": ParityOutput(prompt_id="p", text="ab", token_ids=(7, 9))}
    d = exact_acceptance(base, cand).first_divergence
    assert d is not None and d.field == "token_ids" and d.token_index == 1


def test_reasoning_text_is_compared() -> None:
    base = {"p": ParityOutput(prompt_id="p", text="x", reasoning_text="think a")}
    cand = {"p": ParityOutput(prompt_id="p", text="x", reasoning_text="think b")}
    d = exact_acceptance(base, cand).first_divergence
    assert d is not None and d.field == "reasoning_text" and d.char_index == 6


def test_missing_or_errored_output_never_matches() -> None:
    base = outs(a="x", b="y")
    for cand in (outs(a="x"), outs(a="x", b=None)):
        res = exact_acceptance(base, cand)
        assert res.parity is QualityParity.unknown
        assert res.n_missing == 1 and res.n_matched == 1
        assert res.prompts[1].match is None
    # an errored baseline is no reference either
    res = exact_acceptance(outs(a=None), outs(a=""))
    assert res.parity is QualityParity.unknown


def test_nondeterministic_baseline_makes_parity_unknown_not_differs() -> None:
    run1, run2 = outs(a="x", b="y"), outs(a="x", b="z")
    control = determinism_control(run1, run2)
    assert control.deterministic is False and control.divergences[0].prompt_id == "b"
    res = exact_acceptance(run1, outs(a="DIFFERENT", b="y"), control=control)
    assert res.parity is QualityParity.unknown
    assert BASELINE_NONDETERMINISTIC in res.reason
    parity, reason = baseline_parity(run1, control)
    assert parity is QualityParity.unknown and BASELINE_NONDETERMINISTIC in reason


def test_baseline_parity_needs_a_passing_control_and_complete_outputs() -> None:
    run1 = outs(a="x", b="y")
    ok = determinism_control(run1, dict(run1))
    assert baseline_parity(run1, ok)[0] is QualityParity.verified
    assert baseline_parity(run1, None)[0] is QualityParity.unknown
    assert baseline_parity(outs(a="x", b=None), ok)[0] is QualityParity.unknown
    assert baseline_parity({}, ok)[0] is QualityParity.unknown
    incomplete = determinism_control(run1, outs(a="x", b=None))
    assert incomplete.deterministic is None
    assert baseline_parity(run1, incomplete)[0] is QualityParity.unknown


def test_no_prompts_is_unknown() -> None:
    assert exact_acceptance({}, {}).parity is QualityParity.unknown


def test_row_parity_combines_exact_and_tasks() -> None:
    task = Task(id="a", prompt="q", grader=Grader(kind=GraderKind.numeric, expected="42"))
    good, bad = outs(a="= 42"), outs(a="= 41")
    exact_ok = exact_acceptance(good, dict(good))
    assert row_parity(exact_ok, None)[0] is QualityParity.verified
    assert row_parity(exact_ok, task_parity([task], good, good))[0] is QualityParity.verified
    flips = task_parity([task], good, bad)
    assert row_parity(exact_ok, flips)[0] is QualityParity.differs
    unknown = exact_acceptance(good, outs(a=None))
    assert row_parity(unknown, task_parity([task], good, good))[0] is QualityParity.unknown


def test_from_measurement_reads_text_ids_and_errors() -> None:
    m = StreamMeasurement(text="hi", reasoning_text=None, token_ids=[3, 4], finish_reason="stop")
    o = ParityOutput.from_measurement("p", m)
    assert (o.text, o.reasoning_text, o.token_ids, o.complete) == ("hi", "", (3, 4), True)
    bad = StreamMeasurement(text="h", error=StreamError(kind=ErrorKind.truncated, message="cut"))
    ob = ParityOutput.from_measurement("p", bad)
    assert not ob.complete and ob.error is not None and ob.error.startswith("truncated")


@given(st.text(max_size=30), st.text(max_size=30))
def test_verified_iff_bit_exact_and_index_is_first_difference(a: str, b: str) -> None:
    res = exact_acceptance(
        {"p": ParityOutput(prompt_id="p", text=a)}, {"p": ParityOutput(prompt_id="p", text=b)}
    )
    assert (res.parity is QualityParity.verified) == (a == b)
    if a != b:
        d = res.first_divergence
        assert d is not None and d.char_index is not None
        i = d.char_index
        assert a[:i] == b[:i]
        assert i == min(len(a), len(b)) or a[i] != b[i]
