"""The engine's own clock as a witness of the client's speed figures."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepseekbench import (
    CLOCK_TOLERANCE,
    BenchmarkPlan,
    Clock,
    RefusalReason,
    Scorecard,
    StreamMeasurement,
    compare_speedup,
)
from deepseekbench._analysis._clock_witness import clock_disagrees, server_clock_fields
from deepseekbench._dialects.llamacpp import DIALECT as LLAMACPP
from tests._helpers import make_row

BASE = {"server_tpot_ms": 10.0, "server_ttft_ms": 8.0}


def _pair(client_cand_tpot: float, server_cand_tpot: float) -> tuple[Any, Any]:
    base = make_row(**BASE)  # client TPOT 10 ms
    cand = make_row(
        speculative="mtp",
        route_label="mtp",
        tpot_ms=client_cand_tpot,
        server_tpot_ms=server_cand_tpot,
        server_ttft_ms=8.0,
    )
    return base, cand


def test_clocks_that_agree_credit_the_client_figure() -> None:
    verdict = compare_speedup(*_pair(5.0, 5.5))  # client 2.0x, server 1.82x: within 25 %
    assert verdict.printed and verdict.clock is Clock.client
    assert verdict.speedup == pytest.approx(2.0) and "server clock" not in str(verdict)


def test_a_client_figure_the_server_contradicts_is_withheld() -> None:
    verdict = compare_speedup(*_pair(0.66, 3.8))  # client 15.1x, server 2.6x (the vLLM case)
    assert not verdict and verdict.reasons == (RefusalReason.clock_disagreement,)
    # a slowdown the server does not see is withheld too
    verdict = compare_speedup(*_pair(60.0, 8.5))
    assert verdict.reasons == (RefusalReason.clock_disagreement,)
    # without the engine's figures there is no witness: the client figure stands
    plain = make_row(), make_row(speculative="mtp", route_label="mtp", tpot_ms=0.66)
    assert compare_speedup(*plain).printed


def test_a_paired_rounds_figure_the_server_contradicts_is_withheld() -> None:
    # row medians agree (client 2.0x, server 1.82x), but the printed figure would be the
    # rounds' geometric mean, 3.0x: 65 % from the server's ratio
    base, cand = _pair(5.0, 5.5)
    rounds = ({1: 10.0, 2: 10.0, 3: 10.0}, {1: 3.3, 2: 3.4, 3: 3.3})
    verdict = compare_speedup(base, cand, rounds=rounds)
    assert not verdict and verdict.reasons == (RefusalReason.clock_disagreement,)
    # rounds that agree with the server keep their figure and interval
    rounds = ({1: 10.0, 2: 10.0, 3: 10.0}, {1: 5.2, 2: 5.4, 3: 5.3})
    verdict = compare_speedup(base, cand, rounds=rounds)
    assert verdict and verdict.rounds == 3
    assert verdict.speedup == pytest.approx(10.0 / 5.3, rel=0.01)


def test_the_server_clock_judges_on_the_engines_figures_and_says_so() -> None:
    base, cand = _pair(0.66, 3.8)
    verdict = compare_speedup(base, cand, clock="server")
    assert verdict.printed and verdict.clock is Clock.server
    assert verdict.speedup == pytest.approx(10.0 / 3.8)
    assert str(verdict).startswith("2.63× by tpot_ms (server clock)")
    # TTFT on the server clock: 8 / 8
    assert compare_speedup(base, cand, clock="server", metric="ttft_ms").speedup == 1.0
    # a starved client does not spoil the server clock
    starved = cand.model_copy(update={"client_starved": True})
    assert not compare_speedup(base, starved)
    assert compare_speedup(base, starved, clock="server").printed
    # no server figure: refused, never silently judged on the client's clock
    missing = compare_speedup(make_row(), make_row(speculative="mtp"), clock="server")
    assert missing.reasons == (RefusalReason.server_clock_missing,)
    e2e = compare_speedup(base, cand, clock="server", metric="e2e_ms")
    assert RefusalReason.server_clock_missing in e2e.reasons
    with pytest.raises(ValueError, match="allowed: 'client', 'server'"):
        compare_speedup(base, cand, clock="wall")


@settings(max_examples=200, deadline=None)
@given(
    client=st.floats(min_value=0.01, max_value=100.0),
    server=st.floats(min_value=0.01, max_value=100.0),
)
def test_a_credited_client_verdict_is_within_the_tolerance_of_the_server_ratio(
    client: float, server: float
) -> None:
    base, cand = _pair(10.0 / client, 10.0 / server)
    verdict = compare_speedup(base, cand)
    if verdict.printed:
        assert verdict.speedup is not None
        assert abs(math.log(verdict.speedup / server)) <= math.log1p(CLOCK_TOLERANCE) + 1e-9
    else:
        assert verdict.reasons == (RefusalReason.clock_disagreement,)


def test_the_disagreement_check_itself() -> None:
    base, cand = _pair(5.0, 5.0)
    assert not clock_disagrees(base, cand, "tpot_ms", 2.0, 0.25)
    assert clock_disagrees(base, cand, "tpot_ms", 2.6, 0.25)
    assert clock_disagrees(base, cand, "tpot_ms", 1.5, 0.25)
    assert not clock_disagrees(base, cand, "e2e_ms", 9.0, 0.25)  # no server figure


def test_rows_carry_the_server_tpot_and_reports_show_both_clocks() -> None:
    ms = [StreamMeasurement(server_mean_itl_ms=v, tokens_estimated=False) for v in (3.0, 4.0, 9.0)]
    assert server_clock_fields(ms) == {"server_tpot_ms": 4.0, "server_clock_faults": ()}
    assert server_clock_fields([StreamMeasurement()]) == {
        "server_tpot_ms": None,
        "server_clock_faults": (),
    }
    card = Scorecard.from_rows(list(_pair(5.0, 5.5)))
    rec = list(csv.DictReader(io.StringIO(card.to_csv())))[1]
    assert rec["server_tpot_ms"] == "5.5" and rec["tpot_ms"] == "5.0"
    assert card.to_dict()["lines"][1]["server_tpot_ms"] == 5.5
    assert "server TPOT ms" not in card.to_text()  # the clocks agree: the text stays short
    refused = Scorecard.from_rows(list(_pair(0.66, 3.8)))
    text = refused.to_text()  # withheld: the text shows both clocks
    assert "clock_disagreement" in text and "server TPOT ms" in text and "3.80" in text
    assert "server TPOT ms" in refused.to_markdown() and "server TPOT ms" in refused._repr_html_()
    server = Scorecard.from_rows(list(_pair(0.66, 3.8)), clock="server")
    assert "2.63× by tpot_ms (server clock)" in server.to_text()


def test_llama_cpp_timings_are_read_as_the_engines_clock() -> None:
    chunk = {"timings": {"prompt_ms": 12.5, "predicted_ms": 310.0, "predicted_per_token_ms": 4.8,
                         "predicted_per_second": 208.3}}  # fmt: skip
    times = LLAMACPP.server_times(chunk)
    assert times is not None
    assert times["server_ttft_ms"] == 12.5 and times["server_mean_itl_ms"] == 4.8
    assert LLAMACPP.server_times({"timings": {"draft_n": 3}}) is None


def test_the_plan_takes_a_clock_that_does_not_change_its_hash() -> None:
    data: dict[str, Any] = {
        "model": "m",
        "routes": [
            {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:1/v1"},
            {"label": "mtp", "speculative": "mtp", "base_url": "http://127.0.0.1:2/v1"},
        ],
        "cells": [{}],
    }
    client = BenchmarkPlan.model_validate(data)
    server = BenchmarkPlan.model_validate({**data, "clock": "server"})
    assert client.clock is Clock.client and server.clock is Clock.server
    assert client.plan_hash() == server.plan_hash()
