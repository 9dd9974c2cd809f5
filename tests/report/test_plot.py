"""Pictures of a sweep: speedup vs load with CI bars, TPOT vs output throughput.

The figures are checked as objects (axes, series, data, error bars), not as
pixels; the files are checked to be PNGs; the HTML page to reference nothing
outside itself. matplotlib is in the ``test`` extra, so CI runs all of this.
"""

from __future__ import annotations

import base64
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from deepseekbench import MissingExtraError, Row, Scorecard, read_rows, write_rows
from deepseekbench._report._scorecard import line_key
from tests._helpers import make_row

matplotlib = pytest.importorskip("matplotlib")  # in the test extra; skip cleanly without it
from matplotlib.container import ErrorbarContainer  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LOADS = (1, 8, 32)
# modelled off / mtp TPOT (ms) and window throughput (tokens/s) per load: mtp pays at 1 and 8
TPOT = {"off": (8.0, 16.6, 48.0), "mtp": (5.0, 14.0, 54.0), "mtp-mistuned": (4.8, 13.0, 50.0)}
THROUGHPUT = {"off": (120.0, 480.0, 650.0), "mtp": (190.0, 560.0, 580.0)}
THROUGHPUT["mtp-mistuned"] = (200.0, 600.0, 620.0)


def _row(route: str, load: int, **kw: Any) -> Row:
    i = LOADS.index(load)
    fields: dict[str, Any] = {
        "speculative": "off" if route == "off" else "mtp",
        "route_label": route,
        "tpot_ms": TPOT[route][i],
        "n_requests": 12,
        "quality_parity": "differs" if route == "mtp-mistuned" else "verified",
        "concurrency": load,
        "arrival": "closed",
        "output_throughput_toks_per_s": THROUGHPUT[route][i],
    }
    return make_row(**{**fields, **kw})


def _data(line: Any, axis: str = "x") -> list[float]:
    """A matplotlib line's x or y data as floats."""
    data = line.get_xdata() if axis == "x" else line.get_ydata()
    return [float(v) for v in np.asarray(data, dtype=float).tolist()]


def _samples(row: Row) -> list[float]:
    t = row.tpot_ms or 1.0
    return [t * f for f in (0.9, 0.95, 1.0, 1.05, 1.1, 0.97, 1.03)]


@pytest.fixture
def sweep_rows(tmp_path: Path) -> list[Row]:
    """A saved sweep (off, mtp, mis-tuned mtp at concurrency 1, 8, 32), read back from disk."""
    rows = [_row(r, c) for c in LOADS for r in ("off", "mtp", "mtp-mistuned")]
    path = write_rows(tmp_path / "rows.jsonl", rows, append=False)
    return read_rows(path)


def _card(rows: list[Row]) -> Scorecard:
    return Scorecard.from_rows(rows)


def test_figure_has_speedup_vs_load_with_ci_and_the_latency_throughput_curve(
    sweep_rows: list[Row],
) -> None:
    card = _card(sweep_rows)
    fig = card.plot()
    speed_ax, curve_ax = fig.axes
    assert "concurrency" in speed_ax.get_xlabel()
    assert "speedup" in speed_ax.get_ylabel()
    # speedup panel: one error-bar series per speculative route, none for off
    bars = [c for c in speed_ax.containers if isinstance(c, ErrorbarContainer)]
    labels = [str(c.get_label()) for c in bars]
    assert len(bars) == 2 and labels[0] == "mtp"
    assert labels[1].startswith("mtp-mistuned: refused (") and "parity" in labels[1]
    mtp_line = bars[0].lines[0]
    assert mtp_line is not None
    xs, ys = _data(mtp_line), _data(mtp_line, "y")
    assert xs == [1.0, 8.0, 32.0]
    printed = {ln.verdict.speedup for ln in card.lines if ln.verdict is not None and ln.printed}
    assert ys[0] == pytest.approx(8.0 / 5.0) and ys[2] == pytest.approx(48.0 / 54.0)
    assert set(ys) <= printed  # a verified slowdown is drawn too (below 1×)
    assert ys[0] > ys[1] > 1.0 > ys[2]  # the crossover is visible
    assert _data(bars[1].lines[0]) == []  # a refused route draws no speedup
    assert speed_ax.get_xscale() == "log"
    # latency-throughput panel: every route, off included, points in load order
    curves = {str(ln.get_label()): ln for ln in curve_ax.get_lines()}
    refused = "mtp-mistuned: refused (candidate_parity_not_verified)"
    assert set(curves) == {"off", "mtp", refused}
    off = curves["off"]
    assert _data(off) == list(THROUGHPUT["off"]) and _data(off, "y") == list(TPOT["off"])
    assert curves[refused].get_linestyle() == "--"
    assert "throughput" in curve_ax.get_xlabel() and "TPOT" in curve_ax.get_ylabel()
    notes = {t.get_text() for t in curve_ax.texts}
    assert {"c=1", "c=8", "c=32", "c=32 (refused)"} <= notes


def test_a_refused_route_is_grey_dashed_and_labelled_never_a_winners_colour(
    sweep_rows: list[Row],
) -> None:
    from matplotlib.colors import to_rgba

    from deepseekbench._report._plot import REFUSED_COLOR

    speed_ax, curve_ax = _card(sweep_rows).plot().axes
    grey = to_rgba(REFUSED_COLOR)
    curves = {str(ln.get_label()).split(":")[0]: ln for ln in curve_ax.get_lines()}
    bad = curves["mtp-mistuned"]
    # the mis-tuned route has the lowest TPOT at the highest throughput: the "best" curve
    assert max(_data(bad)) > max(_data(curves["mtp"]))
    assert to_rgba(bad.get_color()) == grey and bad.get_linestyle() == "--"
    assert to_rgba(bad.get_markerfacecolor()) == to_rgba("white")
    assert bad.get_zorder() < min(curves[n].get_zorder() for n in ("off", "mtp"))
    for name in ("off", "mtp"):  # credited curves: solid, coloured, distinct
        assert curves[name].get_linestyle() == "-" and to_rgba(curves[name].get_color()) != grey
    assert to_rgba(curves["off"].get_color()) != to_rgba(curves["mtp"].get_color())
    bars = [c for c in speed_ax.containers if isinstance(c, ErrorbarContainer)]
    refused_bar = next(c for c in bars if "refused" in str(c.get_label()))
    assert refused_bar.lines[0] is not None
    assert to_rgba(refused_bar.lines[0].get_color()) == grey


def test_labels_and_legends_do_not_overlap(sweep_rows: list[Row]) -> None:
    fig = _card(sweep_rows).plot()
    fig.canvas.draw()  # lays the figure out (its Agg canvas: no GUI)
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.texts]
        for i, a in enumerate(boxes):
            assert not any(a.overlaps(b) for b in boxes[i + 1 :]), [t.get_text() for t in ax.texts]
        legend = ax.get_legend()
        assert legend is not None
        legend_box = legend.get_window_extent(renderer)
        assert not legend_box.overlaps(ax.get_window_extent(renderer))  # under the panel
        for t in ax.texts:  # every label inside its panel
            assert ax.get_window_extent(renderer).contains(*t.get_window_extent(renderer).p1)


def test_ci_bars_span_the_bootstrap_interval() -> None:
    rows = [_row("off", 8), _row("mtp", 8)]
    card = Scorecard.from_rows(
        rows, samples={line_key(r): _samples(r) for r in rows}, n_resamples=200
    )
    verdict = card.lines[1].verdict
    assert verdict is not None and verdict.ci_low is not None and verdict.ci_high is not None
    (bar,) = [c for c in card.plot().axes[0].containers if isinstance(c, ErrorbarContainer)]
    (seg,) = np.asarray(bar.lines[2][0].get_segments(), dtype=float).tolist()  # vertical bar
    assert seg[0][1] == pytest.approx(verdict.ci_low)
    assert seg[1][1] == pytest.approx(verdict.ci_high)


def test_plot_writes_a_png_and_report_plot_flag(tmp_path: Path, sweep_rows: list[Row]) -> None:
    out = tmp_path / "sweep.png"
    fig = _card(sweep_rows).plot(out)
    assert out.read_bytes().startswith(PNG_MAGIC)
    assert fig.get_size_inches()[0] > fig.get_size_inches()[1]
    with pytest.raises(ValueError, match="cannot write"):
        _card(sweep_rows).plot(tmp_path / "sweep.xyz")


def test_open_loop_rows_are_placed_by_rate() -> None:
    rows = [
        _row(r, c, request_rate_per_s=float(c) * 2, arrival="poisson")
        for c in LOADS
        for r in ("off", "mtp")
    ]
    speed_ax = Scorecard.from_rows(rows).plot().axes[0]
    assert "rate" in speed_ax.get_xlabel()
    (bar,) = [c for c in speed_ax.containers if isinstance(c, ErrorbarContainer)]
    assert _data(bar.lines[0]) == [2.0, 16.0, 64.0]


def test_rows_without_a_load_are_not_drawn_and_said_so() -> None:
    rows = [_row("off", 1, concurrency=None, arrival=None), _row("mtp", 1)]
    fig = Scorecard.from_rows(rows).plot()
    assert fig.get_suptitle().startswith("1 line(s) without a recorded load")


def test_html_page_is_self_contained_with_table_and_plot(sweep_rows: list[Row]) -> None:
    page = _card(sweep_rows).render("html")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<table>" in page and "mtp-mistuned" in page
    # nothing outside the page: no URL in any src/href, no script, no link, no @import
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:", page)
    assert not re.search(r"(?:https?:)?//|url\(|@import", text)
    assert not re.search(r"<(?:script|link|iframe|object|embed)\b", text)
    srcs = re.findall(r'src="([^"]+)"', page)
    assert len(srcs) == 1 and srcs[0].startswith("data:image/png;base64,")
    png = base64.b64decode(srcs[0].split(",", 1)[1])
    assert png.startswith(PNG_MAGIC)


def test_without_matplotlib_a_clear_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, sweep_rows: list[Row]
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    card = _card(sweep_rows)
    with pytest.raises(MissingExtraError, match=r"pip install 'deepseekbench\[plot\]'"):
        card.plot()
    # the HTML page still renders its table, and says how to get the plots
    page = card.to_html()
    assert "<table>" in page and "deepseekbench[plot]" in page and "<img" not in page


def test_plot_needs_rows() -> None:
    card = Scorecard(_card([_row("off", 1)]).lines, metric=_card([_row("off", 1)]).metric)
    with pytest.raises(ValueError, match="needs the rows"):
        card.plot()


def test_the_figure_shows_inline_in_a_notebook(sweep_rows: list[Row]) -> None:
    """IPython's rich display calls ``_repr_png_`` on the cell's value (no pyplot)."""
    from matplotlib.figure import Figure

    fig = _card(sweep_rows).plot()
    assert isinstance(fig, Figure)
    png = fig._repr_png_()  # type: ignore[attr-defined]
    assert isinstance(png, bytes) and png.startswith(PNG_MAGIC) and len(png) > 10_000


def test_the_inline_figure_pickles(sweep_rows: list[Row]) -> None:
    import pickle

    fig = pickle.loads(pickle.dumps(_card(sweep_rows).plot()))
    assert fig._repr_png_().startswith(PNG_MAGIC)


def test_a_decomposed_speedup_adds_its_two_factors_against_load() -> None:
    rows = []
    for c, off_tpot, ratio in ((1, 10.0, 1.5), (8, 20.0, 3.6)):
        rows.append(make_row(tpot_ms=off_tpot, concurrency=c))
        rows.append(
            make_row(
                speculative="mtp", route_label="mtp", spec_tokens=3, acceptance_length=3.0,
                tpot_ms=off_tpot * ratio / 3.0, concurrency=c,
            )
        )  # fmt: skip
    fig = Scorecard.from_rows(rows).plot()
    factors = fig.axes[1]
    assert "factors" in factors.get_title()
    by_label = {c.get_label(): c for c in factors.containers if isinstance(c, ErrorbarContainer)}
    acceptance = np.asarray(by_label["mtp: acceptance length"].lines[0].get_ydata()).tolist()
    cost = np.asarray(by_label["mtp: step-cost ratio"].lines[0].get_ydata()).tolist()
    assert acceptance == pytest.approx([3.0, 3.0])  # flat: not the drafter
    assert cost == pytest.approx([1.5, 3.6])  # rising past it: the verify step
    # without a decomposed line (no acceptance length) the figure keeps two panels
    plain = [r.model_copy(update={"acceptance_length": None}) for r in rows]
    assert len(Scorecard.from_rows(plain).plot().axes) == 2
