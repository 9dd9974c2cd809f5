"""The per-request figures are one list: the record, the row's dispersion and every format agree.

``PER_REQUEST_FIGURES`` (beside ``Dispersion``) is what the analysis walks to fill a
row's p50/p90/p99 and what the latency table and the CSV columns walk to show them, so
adding a figure is: compute it in the stream accumulator, add it to the record, add a
``Dispersion`` field and an entry to the list.
"""

from __future__ import annotations

from deepseekbench import Dispersion, Percentiles, StreamMeasurement
from deepseekbench._analysis._rows import dispersion
from deepseekbench._report._formats._csv import CSV_FIELDS
from deepseekbench._report._tables import latency_columns
from deepseekbench._types._row import PER_REQUEST_FIGURES, PerRequestFigure


def test_the_list_and_the_dispersion_name_the_same_figures() -> None:
    assert {f.name for f in PER_REQUEST_FIGURES} == set(Dispersion.model_fields)


def test_every_figure_is_a_field_of_the_record() -> None:
    assert {f.name for f in PER_REQUEST_FIGURES} <= set(StreamMeasurement.model_fields)


def test_every_csv_percentile_has_its_column() -> None:
    columns = [f.column(q) for f in PER_REQUEST_FIGURES for q in f.csv]
    assert len(set(columns)) == len(columns)
    assert set(columns) <= set(CSV_FIELDS)
    assert PerRequestFigure("decode_ms", None, 1).column("p90") == "decode_p90_ms"
    assert PerRequestFigure("toks_per_s", None, 1).column("p50") == "toks_per_s_p50"


def test_the_latency_table_shows_each_headed_figure_in_list_order() -> None:
    heads = [c for c in latency_columns(()) if c not in ("cell", "load", "route")]
    assert heads == [f"{f.head} p50/p90/p99" for f in PER_REQUEST_FIGURES if f.head]


def _measured(ttft: float, itl: list[float]) -> StreamMeasurement:
    return StreamMeasurement(
        ttft_ms=ttft, e2e_ms=ttft + sum(itl), itl_ms=itl, tpot_ms=1.0,
        output_toks_per_s=50.0,
    )  # fmt: skip


def test_the_dispersion_walks_every_figure() -> None:
    d = dispersion([_measured(10.0, [1.0, 3.0]), _measured(30.0, [5.0])])
    assert d.ttft_ms == Percentiles(p50=20.0, p90=28.0, p99=29.8)
    assert d.itl_ms is not None and d.itl_ms.p50 == 3.0  # pooled over all chunks
    for f in PER_REQUEST_FIGURES:
        assert getattr(d, f.name) is not None, f.name
