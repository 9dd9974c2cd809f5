"""A bad metric name raises the package's typed error naming the valid names.

:class:`~deepseekbench.UnknownMetricError` is also a ``KeyError`` (as
:class:`~deepseekbench.UnknownKeyError`), a ``ValueError`` (a bad speedup metric raised
that before) and an ``AttributeError`` (a bad figure of a result raised that before),
so existing ``except`` clauses keep working.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deepseekbench import (
    DeepseekBenchError,
    Scorecard,
    SpeedupMetric,
    UnknownKeyError,
    UnknownMetricError,
    bootstrap_speedup_ci,
    compare_speedup,
    load_results,
)
from tests.test_foundation import make_row

DEMO = Path(__file__).resolve().parent.parent / "data" / "render" / "demo.jsonl"


def _is_typed(err: BaseException) -> None:
    assert isinstance(err, UnknownMetricError) and isinstance(err, UnknownKeyError)
    assert isinstance(err, DeepseekBenchError)
    assert isinstance(err, (KeyError)) and isinstance(err, ValueError)
    assert isinstance(err, AttributeError)


def test_a_bad_speedup_metric_names_the_valid_ones() -> None:
    base, cand = make_row(), make_row(speculative="mtp", tpot_ms=10.0)
    for call in (
        lambda: compare_speedup(base, cand, metric="tpot"),
        lambda: Scorecard.from_rows([base, cand], metric="tpot"),
        lambda: bootstrap_speedup_ci([1.0, 2.0], [1.0, 2.0], metric="tpot"),
        lambda: SpeedupMetric("tpot"),
    ):
        with pytest.raises(UnknownMetricError) as info:
            call()
        _is_typed(info.value)
        text = str(info.value)
        assert text.startswith("'tpot' is not a valid speedup metric; allowed: 'tpot_ms'")
        assert all(m.value in text for m in SpeedupMetric)
        assert info.value.known == tuple(m.value for m in SpeedupMetric)


def test_a_bad_figure_of_a_result_names_the_valid_ones() -> None:
    result = load_results(DEMO)
    route, cell, load = result.row_keys[0]
    row = result.rows[0]
    for call in (
        lambda: result.samples(route, cell, "tpot", load),
        lambda: result.round_values(route, cell, "tpot", load),
        lambda: result.speedup_evidence(row, "tpot"),
        lambda: result.prompt_evidence(row, "tpot"),
    ):
        with pytest.raises(UnknownMetricError, match="'tpot' is not a valid per-request figure"):
            call()
    with pytest.raises(AttributeError, match="tpot_ms"):  # the old except clause, the names
        result.samples(route, cell, "text", load)  # a field, but not a figure
    with pytest.raises(KeyError, match="goodput_req_per_s"):
        result.round_values(route, cell, "goodput", load)
    assert result.round_values(route, cell, "tpot_ms", load)  # the valid names still read
