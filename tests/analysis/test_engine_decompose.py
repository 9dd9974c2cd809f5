"""The decomposition on the engine's clock: a TPOT line refused for a client-clock reason
(a starved client, a client ratio the engine contradicts) is diagnosed on the engines'
own per-request TPOT, labelled "no speedup credited", and never credits a figure."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepseekbench import RefusalReason, Scorecard, compare_speedup
from deepseekbench._analysis._engine_decompose import (
    ENGINE_CLOCK_LABEL,
    EngineClockDiagnosis,
    diagnose_on_engine_clock,
)
from deepseekbench._types._row import Row
from tests._helpers import make_row

MTP: dict[str, Any] = {"speculative": "mtp", "route_label": "mtp", "spec_tokens": 1}


def _starved_pair() -> tuple[Row, Row]:
    # the starved client bunched the candidate's chunks: its client TPOT (4 ms) says
    # 2.5x, while the engine's own TPOT (off 10 ms, mtp 8 ms) says 1.25x
    off = make_row(tpot_ms=10.0, server_tpot_ms=10.0)
    mtp = make_row(
        **MTP,
        tpot_ms=4.0,
        e2e_ms=46.0,
        server_tpot_ms=8.0,
        acceptance_length=1.9,
        client_starved=True,
        n_client_starved=5,
    )
    return off, mtp


def test_a_starved_client_is_diagnosed_on_the_engine_clock() -> None:
    off, mtp = _starved_pair()
    card = Scorecard.from_rows([off, mtp])
    line = next(ln for ln in card.lines if ln.route == "mtp")
    assert line.verdict is not None and RefusalReason.client_starved in line.verdict.reasons
    assert not line.credited and line.decomposition is None
    e = line.engine_diagnosis
    assert e is not None
    assert e.engine_tpot_ratio == pytest.approx(10.0 / 8.0)
    assert e.step_cost_ratio == pytest.approx(1.9 / 1.25)  # 1.52
    assert e.decode_step_ms == 10.0 and e.verify_step_ms == pytest.approx(8.0 * 1.9)
    assert e.break_even_length == pytest.approx(1.52)
    # depth 1: 1 + a = 1.52
    assert e.break_even_rate == pytest.approx(0.52, abs=1e-6)
    assert e.refused_for == tuple(line.verdict.reasons)
    text = card.to_text()
    assert f"mtp @ {line.cell} {line.load}: {ENGINE_CLOCK_LABEL}: TPOT ratio 1.25" in text
    assert (
        "break-even acceptance length 1.52 (break-even 0.52 vs own 0.90 per position at depth 1)"
        in text
    )
    # off's step is its engine TPOT, printed as the latency table's server TPOT (2 decimals)
    assert "verify step 15.2 ms vs off's 10.00 ms;" in text
    assert "1.25×" not in text and "2.50×" not in text  # no figure shown as a speedup
    assert ENGINE_CLOCK_LABEL in card.to_markdown()
    assert "on the engine&#x27;s clock; no speedup credited" in card.to_html()


def test_unreachable_break_even_is_named() -> None:
    off, mtp = _starved_pair()
    slow = mtp.model_copy(update={"server_tpot_ms": 16.0})
    e = diagnose_on_engine_clock(off, slow, compare_speedup(off, slow))
    assert e is not None and e.step_cost_ratio == pytest.approx(3.04)
    assert not e.break_even_reachable and e.break_even_rate is None
    assert "(break-even unreachable at depth 1 (at most 2); own 0.90 per position)" in e.text()


@pytest.mark.parametrize(
    ("update", "why"),
    [
        ({"client_starved": False, "n_client_starved": 0, "tpot_ms": 8.0}, "credited"),
        ({"server_tpot_ms": None}, "no engine clock"),
        ({"acceptance_length": None}, "no acceptance length"),
        ({"quality_parity": "differs"}, "parity refuses too"),
        ({"server_clock_faults": ("server_clock_not_positive",)}, "engine clock faulted"),
        ({"server_clock_faults": ("server_clock_contradicts_client",)}, "contradicted"),
    ],
)
def test_no_diagnosis_without_a_client_clock_refusal_and_an_engine_clock(
    update: dict[str, Any], why: str
) -> None:
    off, mtp = _starved_pair()
    mtp = Row.model_validate({**mtp.model_dump(), **update})
    verdict = compare_speedup(off, mtp)
    assert diagnose_on_engine_clock(off, mtp, verdict) is None, why


@pytest.mark.parametrize("which", ["off", "mtp"])
def test_a_count_mismatch_blocks_the_diagnosis_like_any_witness_fault(which: str) -> None:
    # the count check multiplies each engine's rate by the span it divides by, so a
    # mismatch is a real contradiction of the engine's figures, not vLLM's TTFT-inclusive
    # rate: no fault is set aside
    off, mtp = _starved_pair()
    assert diagnose_on_engine_clock(off, mtp, compare_speedup(off, mtp)) is not None
    faults = {"server_clock_faults": ("server_clock_count_mismatch",)}
    if which == "off":
        off = off.model_copy(update=faults)
    else:
        mtp = mtp.model_copy(update=faults)
    assert diagnose_on_engine_clock(off, mtp, compare_speedup(off, mtp)) is None


def test_the_diagnosis_has_no_speedup_field() -> None:
    assert "speedup" not in EngineClockDiagnosis.model_fields


_ms = st.floats(min_value=1.0, max_value=100.0)


@given(
    off_tpot=_ms,
    off_server=st.one_of(st.none(), _ms),
    mtp_tpot=_ms,
    mtp_server=st.one_of(st.none(), _ms),
    length=st.one_of(st.none(), st.floats(min_value=1.0, max_value=4.0)),
    starved=st.tuples(st.booleans(), st.booleans()),
    parity=st.sampled_from(["verified", "differs", "unknown"]),
)
def test_the_engine_clock_path_never_credits_a_speedup(
    off_tpot: float,
    off_server: float | None,
    mtp_tpot: float,
    mtp_server: float | None,
    length: float | None,
    starved: tuple[bool, bool],
    parity: str,
) -> None:
    off = make_row(
        tpot_ms=off_tpot,
        e2e_ms=10.0 + 9 * off_tpot,
        server_tpot_ms=off_server,
        client_starved=starved[0],
    )
    mtp = make_row(
        **{**MTP, "spec_tokens": 2},
        tpot_ms=mtp_tpot,
        e2e_ms=10.0 + 9 * mtp_tpot,
        server_tpot_ms=mtp_server,
        acceptance_length=length,
        client_starved=starved[1],
        quality_parity=parity,
    )
    line = next(ln for ln in Scorecard.from_rows([off, mtp]).lines if ln.route == "mtp")
    # the diagnosis leaves the verdict as the gate judges it from the rows alone
    assert line.verdict == compare_speedup(off, mtp)
    if line.engine_diagnosis is not None:
        assert line.verdict is not None and not line.verdict.printed
        assert not line.credited and line.decomposition is None
        assert parity == "verified" and length is not None
        assert off_server is not None and mtp_server is not None
        assert ENGINE_CLOCK_LABEL in line.engine_diagnosis.text()


_DIAGNOSIS_TEXT = re.compile(
    r"TPOT ratio (?P<ratio>[\d.]+) = acceptance length (?P<length>[\d.]+) ÷ step-cost ratio "
    r"(?P<cost>[\d.]+): .*; break-even acceptance length (?P<even>[\d.]+)"
)


def _printed_parts(e: EngineClockDiagnosis) -> dict[str, str]:
    m = _DIAGNOSIS_TEXT.search(e.text())
    assert m is not None, e.text()
    return m.groupdict()


def test_the_printed_step_cost_ratio_divides_back_to_the_printed_tpot_ratio() -> None:
    # off 5.9 ms, mtp 9.6 ms on the engine's clock, L 1.09: r = 1.7736, printed 1.77 at 2
    # decimals, and 1.09 ÷ 1.77 = 0.616 prints 0.62 beside the TPOT ratio's 0.61
    off, mtp = _starved_pair()
    off = off.model_copy(update={"server_tpot_ms": 5.9})
    mtp = mtp.model_copy(update={"server_tpot_ms": 9.6, "acceptance_length": 1.09})
    e = diagnose_on_engine_clock(off, mtp, compare_speedup(off, mtp))
    assert e is not None
    parts = _printed_parts(e)
    assert parts["ratio"] == "0.61" and parts["length"] == "1.09"
    assert parts["cost"] == e.ratio_text == "1.774"  # 1.09 ÷ 1.774 = 0.614
    assert parts["even"] == parts["cost"]  # one figure, one rounding


@given(
    off_server=st.floats(min_value=0.5, max_value=200.0),
    mtp_server=st.floats(min_value=0.5, max_value=200.0),
    length=st.floats(min_value=1.0, max_value=9.0),
)
def test_the_diagnosis_prints_parts_that_divide_back(
    off_server: float, mtp_server: float, length: float
) -> None:
    """As the credited decomposition's: printed length ÷ printed step-cost ratio rounds to
    the printed TPOT ratio, and the break-even length (the same figure) prints alike."""
    e = EngineClockDiagnosis(
        engine_tpot_ratio=off_server / mtp_server,
        acceptance_length=length,
        step_cost_ratio=length * mtp_server / off_server,
        decode_step_ms=off_server,
        verify_step_ms=mtp_server * length,
        depth=3,
        break_even_length=length * mtp_server / off_server,
        refused_for=(RefusalReason.client_starved,),
    )
    parts = _printed_parts(e)
    assert parts["even"] == parts["cost"]
    if float(parts["ratio"]) > 0:
        assert f"{float(parts['length']) / float(parts['cost']):.2f}" == parts["ratio"]
