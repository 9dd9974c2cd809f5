"""Pictures of a scorecard: speedup vs load, and the latency–throughput curve.

Needs the ``plot`` extra (matplotlib: ``pip install 'deepseekbench[plot]'``).
Figures are built on :class:`matplotlib.figure.Figure` directly (no pyplot), so
nothing global changes and no GUI backend is needed; a notebook shows the
returned Figure as it is.

Two panels at least:

* **speedup vs load** — per speculative route (and cell), the printed figure
  (dimensionless, times faster by the scorecard's metric: a credited speedup, or a
  verified, significant slowdown below 1) at each load point,
  with its 95 % interval as error bars; the dotted line at 1× is "no gain". A
  refused point is not drawn (its speedup was not earned); the legend says why.
* **TPOT vs output throughput** — per route, including ``off``: median TPOT
  (ms/token) against output throughput over the measurement window
  (tokens/s), one point per load point, joined in load order and labelled with
  the load. Up and to the left is worse; speculation pays where its curve lies
  below ``off``'s at the same throughput. A route with a refused (or unverified)
  line is drawn grey, dashed, with hollow markers, under the credited curves and
  labelled "refused", so a fast but wrong route never looks like the best curve.

When a line's TPOT speedup is decomposed (:func:`~deepseekbench.decompose_speedup`),
a panel between them:

* **the speedup's factors vs load** — per route, acceptance length (solid, circles:
  tokens per verify step) and step-cost ratio (dashed, squares: verify step over
  ``off``'s decode step), 95 % CI bars. The speedup is their quotient: it crosses 1
  where the two lines cross, and the panel shows which one moved.

With ``[search]`` a last panel:

* **capacity under SLO** — per route, a bar at its capacity (the highest load
  meeting the SLO target) with an error bar up to the lowest failing load (the
  bracket ``[low, high)``: the capacity's uncertainty), the attainment's 95 %
  Wilson interval in the bar's label, and each credited ratio to ``off`` in the
  title; a refused ratio's route is drawn grey and hatched.

Point labels sit below-right of their points on a white box; legends sit under
their panels, never over the data.

The load of a point is its row's ``concurrency`` (closed loop, streams) or, for
an open loop, its ``request_rate_per_s`` (requests/s). Rows without a recorded
load (schema 1) are not drawn; the panel says how many.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from deepseekbench._analysis._speedup import SpeedupVerdict
from deepseekbench._errors import MissingExtraError
from deepseekbench._types._axes import Speculative
from deepseekbench._types._row import Row

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from deepseekbench._analysis._capacity import CapacityReport
    from deepseekbench._analysis._decompose import SpeedupDecomposition

__all__ = [
    "INSTALL_HINT",
    "REFUSED_COLOR",
    "LinePoint",
    "figure_png",
    "html_page",
    "line_points",
    "plot_lines",
    "png_data_uri",
    "require_matplotlib",
    "save_figure",
]

INSTALL_HINT = "pip install 'deepseekbench[plot]'"
"""How to install the plotting extra (named in every MissingExtraError)."""


class _Line(Protocol):
    """What the plots read from a scorecard line."""

    @property
    def cell(self) -> str: ...
    @property
    def route(self) -> str: ...
    @property
    def speculative(self) -> Speculative: ...
    @property
    def verdict(self) -> SpeedupVerdict | None: ...


@dataclass(frozen=True, slots=True)
class LinePoint:
    """One scorecard line placed on the plots.

    ``series``: route label (``route @ cell`` when there are several cells);
    ``load``: concurrency (streams) or request rate (requests/s), ``None`` if
    unrecorded; ``open_loop``: the load is a rate; ``tpot_ms`` (ms/token);
    ``throughput_toks_per_s`` (tokens/s over the window); ``speedup``,
    ``ci_low``, ``ci_high``: the credited figure and its 95 % interval
    (dimensionless), ``None`` when not credited; ``refusal``: why not.
    ``acceptance_length`` (tokens per verify step) and ``step_cost_ratio`` (verify
    step over ``off``'s decode step), with their 95 % intervals: the credited TPOT
    speedup's two factors (:func:`~deepseekbench.decompose_speedup`), ``None`` elsewhere.
    """

    series: str
    speculative: Speculative
    load: float | None
    open_loop: bool
    tpot_ms: float | None
    throughput_toks_per_s: float | None
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    refusal: str | None
    acceptance_length: float | None = None
    acceptance_ci: tuple[float, float] | None = None
    step_cost_ratio: float | None = None
    step_cost_ci: tuple[float, float] | None = None


def line_points(lines: Sequence[_Line], rows: Sequence[Row]) -> list[LinePoint]:
    """Pair each scorecard line with its row (same order) into plot points.

    Raises:
        ValueError: ``lines`` and ``rows`` differ in length.
    """
    if len(lines) != len(rows):
        raise ValueError(f"{len(lines)} scorecard lines but {len(rows)} rows")
    several_cells = len({ln.cell for ln in lines}) > 1
    points: list[LinePoint] = []
    for ln, row in zip(lines, rows, strict=True):
        rate = row.request_rate_per_s
        load = rate if rate is not None else row.concurrency
        v = ln.verdict
        shown = v is not None and v.printed
        refusal = None
        if ln.speculative is not Speculative.off and not shown:
            refusal = " ".join(r.value for r in v.reasons) if v is not None else "no off baseline"
        d: SpeedupDecomposition | None = getattr(ln, "decomposition", None)
        points.append(
            LinePoint(
                series=f"{ln.route} @ {ln.cell}" if several_cells else ln.route,
                speculative=ln.speculative,
                load=float(load) if load is not None else None,
                open_loop=rate is not None,
                tpot_ms=row.tpot_ms,
                throughput_toks_per_s=row.output_throughput_toks_per_s,
                speedup=v.speedup if v is not None and shown else None,
                ci_low=v.ci_low if v is not None else None,
                ci_high=v.ci_high if v is not None else None,
                refusal=refusal,
                acceptance_length=d.acceptance_length if d is not None else None,
                acceptance_ci=d.acceptance_length_ci if d is not None else None,
                step_cost_ratio=d.step_cost_ratio if d is not None else None,
                step_cost_ci=d.step_cost_ratio_ci if d is not None else None,
            )
        )
    return points


def _load_label(points: Sequence[LinePoint]) -> str:
    kinds = {p.open_loop for p in points if p.load is not None}
    if kinds == {True}:
        return "request rate (requests/s)"
    if kinds == {False}:
        return "concurrency (streams)"
    return "load (streams, or requests/s for open loops)"


def _series(points: Sequence[LinePoint]) -> dict[str, list[LinePoint]]:
    out: dict[str, list[LinePoint]] = {}
    for p in points:
        out.setdefault(p.series, []).append(p)
    for s in out.values():
        s.sort(key=lambda p: math.inf if p.load is None else p.load)
    return out


def _short_load(p: LinePoint) -> str:
    if p.load is None:
        return "?"
    return f"{p.load:g}/s" if p.open_loop else f"c={p.load:g}"


REFUSED_COLOR = "0.6"
"""The grey of a route with a refused (or unverified) line: never a winner's colour."""


def _refused(ps: Sequence[LinePoint]) -> list[str]:
    """The refusal reasons of a series' lines (empty when every line is credited or off)."""
    return sorted({p.refusal for p in ps if p.refusal})


def _colors(points: Sequence[LinePoint]) -> dict[str, str]:
    """One colour per series, the same on both panels (matplotlib's default cycle for
    credited routes and ``off``; grey for a route with a refused line)."""
    out: dict[str, str] = {}
    n = 0
    for name, ps in _series(points).items():
        if _refused(ps):
            out[name] = REFUSED_COLOR
        else:
            out[name] = f"C{n % 10}"
            n += 1
    return out


def _legend_below(ax: Axes) -> None:
    """The legend under the axes, so it never covers a point or a label."""
    ax.legend(
        fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, ncols=1
    )


def _speedup_panel(ax: Axes, points: Sequence[LinePoint], metric: str) -> None:
    ax.axhline(1.0, color="0.5", linestyle=":", linewidth=1)
    loads = sorted({p.load for p in points if p.load is not None})
    colors = _colors(points)
    for name, ps in _series(points).items():
        if ps[0].speculative is Speculative.off:
            continue
        xs: list[float] = []
        ys: list[float] = []
        lo: list[float] = []
        hi: list[float] = []
        for p in ps:
            if p.load is None or p.speedup is None:
                continue
            xs.append(p.load)
            ys.append(p.speedup)
            lo.append(p.speedup - (p.ci_low if p.ci_low is not None else p.speedup))
            hi.append((p.ci_high if p.ci_high is not None else p.speedup) - p.speedup)
        refused = _refused(ps)
        label = name if not refused else f"{name}: refused ({', '.join(refused)})"
        ax.errorbar(
            xs,
            ys,
            yerr=[lo, hi],
            marker="o" if not refused else "x",
            linestyle="-" if not refused else "--",
            capsize=3,
            label=label,
            color=colors[name],
        )
    if loads and min(loads) > 0 and max(loads) / min(loads) >= 4:
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
    if loads:
        ax.set_xticks(loads, labels=[f"{x:g}" for x in loads])
    ax.set_xlabel(_load_label(points))
    ax.set_ylabel(f"speedup by {metric} (×, 95% CI)")
    ax.set_title("Speedup vs load (verified, significant points only)")
    _legend_below(ax)


def _errorbar(value: float, ci: tuple[float, float] | None) -> tuple[float, float]:
    return (value - ci[0], ci[1] - value) if ci is not None else (0.0, 0.0)


def _factor_panel(ax: Axes, points: Sequence[LinePoint]) -> None:
    """Acceptance length (solid, circles) and step-cost ratio (dashed, squares) vs load
    per route, 95 % CI bars: the speedup is their quotient, so it crosses 1 where the
    two lines cross, and the panel shows which of them moved."""
    colors = _colors(points)
    loads = sorted({p.load for p in points if p.load is not None})
    for name, ps in _series(points).items():
        drawn = [p for p in ps if p.load is not None and p.acceptance_length is not None]
        if not drawn:
            continue
        xs = [p.load for p in drawn if p.load is not None]
        for attr, ci, marker, style, what in (
            ("acceptance_length", "acceptance_ci", "o", "-", "acceptance length"),
            ("step_cost_ratio", "step_cost_ci", "s", "--", "step-cost ratio"),
        ):
            ys = [float(getattr(p, attr)) for p in drawn]
            bars = [_errorbar(y, getattr(p, ci)) for y, p in zip(ys, drawn, strict=True)]
            ax.errorbar(
                xs,
                ys,
                yerr=[[b[0] for b in bars], [b[1] for b in bars]],
                marker=marker,
                linestyle=style,
                capsize=3,
                color=colors[name],
                label=f"{name}: {what}",
            )
    if loads and min(loads) > 0 and max(loads) / min(loads) >= 4:
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
    if loads:
        ax.set_xticks(loads, labels=[f"{x:g}" for x in loads])
    ax.set_xlabel(_load_label(points))
    ax.set_ylabel("tokens per verify step / verify step ÷ off's step")
    ax.set_title("Speedup's factors vs load (pays while acceptance > step cost)")
    _legend_below(ax)


def _curve_panel(ax: Axes, points: Sequence[LinePoint]) -> None:
    colors = _colors(points)
    for name, ps in _series(points).items():
        drawn = [
            (p.throughput_toks_per_s, p.tpot_ms, _short_load(p))
            for p in ps
            if p.load is not None and p.tpot_ms is not None and p.throughput_toks_per_s is not None
        ]
        refused = _refused(ps)
        label = f"{name}: refused ({', '.join(refused)})" if refused else name
        xs = [x for x, _, _ in drawn]
        ys = [y for _, y, _ in drawn]
        ax.plot(
            xs,
            ys,
            marker="o",
            markerfacecolor="white" if refused else colors[name],
            linestyle="--" if refused else "-",
            label=label,
            color=colors[name],
            zorder=1 if refused else 2,  # under every credited curve
        )
        for i, (x, y, text) in enumerate(drawn):
            # below-right of the point on a white box: the curve, which rises to the
            # right, never runs through its own labels; the last point names a refusal
            if refused and i == len(drawn) - 1:
                text += " (refused)"
            ax.annotate(
                text,
                (x, y),
                textcoords="offset points",
                xytext=(7, -7),
                ha="left",
                va="top",
                fontsize="x-small",
                color="0.35" if refused else colors[name],
                bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
                zorder=3,
            )
    ax.set_xlabel("output throughput (tokens/s, measurement window)")
    ax.set_ylabel("median TPOT (ms/token)")
    ax.set_title("Latency vs throughput per route (grey dashed: refused)")
    ax.margins(x=0.12, y=0.1)  # room for the labels right of and below the points
    _legend_below(ax)


def _capacity_panel(ax: Axes, report: CapacityReport) -> None:
    """Capacity per route, a bar with its bracket as the error bar."""
    refused = {r.route for r in report.ratios if not r.credited}
    refused |= {c.route for c in report.routes if c.unverified}
    names = [c.route for c in report.routes]
    heights = [c.capacity or 0.0 for c in report.routes]
    up = [
        (c.high - c.capacity) if c.high is not None and c.capacity else 0.0 for c in report.routes
    ]
    colors = [REFUSED_COLOR if n in refused else f"C{i}" for i, n in enumerate(names)]
    bars = ax.bar(names, heights, color=colors, yerr=[[0.0] * len(up), up], capsize=4)
    for bar, c in zip(bars, report.routes, strict=True):
        if c.route in refused:
            bar.set_hatch("//")
        known = c.ci_low is not None and c.ci_high is not None
        ci = f"{c.ci_low:.0%}–{c.ci_high:.0%}" if known else "—"
        high = f"{c.high:g}" if c.high is not None else "∞"
        low = f"{c.capacity:g}" if c.capacity is not None else "none"
        ax.annotate(
            f"[{low}, {high})\nSLO CI {ci}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height() / 2),
            ha="center",
            va="center" if bar.get_height() else "bottom",
            fontsize="x-small",
            bbox={"boxstyle": "square,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85},
        )
    ratios = "; ".join(f"{r.route}/off {r.figure}" for r in report.ratios)
    ax.set_ylabel(f"capacity ({report.unit}; bar: bracket to the first failing load)")
    ax.set_title(f"Capacity at slo_attainment ≥ {report.target:g}\n{ratios}", fontsize="small")
    ax.margins(y=0.25)


def require_matplotlib() -> None:
    """Check that the ``plot`` extra is installed, before any work that needs it.

    Raises:
        MissingExtraError: matplotlib is not installed (``pip install 'deepseekbench[plot]'``).
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(f"plotting needs matplotlib: {INSTALL_HINT}") from exc


def plot_lines(
    lines: Sequence[_Line],
    rows: Sequence[Row],
    *,
    metric: str,
    capacity: CapacityReport | None = None,
) -> Figure:
    """A Figure of two panels or more: speedup vs load per route; when some line's TPOT
    speedup is decomposed, its two factors vs load (acceptance length and step-cost
    ratio, :func:`~deepseekbench.decompose_speedup`); TPOT vs output throughput per route.

    ``lines``: scorecard lines in row order; ``rows``: their rows; ``metric``:
    the speedup metric's name (axis label); ``capacity``: a run's capacity under
    SLO, drawn as a third panel (bars with the bracket as error bar).
    Figure size 6 × 4.8 inches per panel. The
    Figure has ``_repr_png_``, so a notebook cell ending in ``card.plot()`` shows
    it inline with no pyplot and no ``%matplotlib``.

    Raises:
        MissingExtraError: matplotlib is not installed (``pip install 'deepseekbench[plot]'``).
        ValueError: ``lines`` and ``rows`` differ in length.
    """
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from deepseekbench._report._nbfigure import NotebookFigure

    points = line_points(lines, rows)
    factors = any(p.acceptance_length is not None for p in points)
    panels = 2 + int(factors) + int(capacity is not None)
    fig = NotebookFigure(figsize=(6.0 * panels, 4.8), layout="constrained")
    FigureCanvasAgg(fig)  # a renderer to measure labels with (no GUI)
    axes = fig.subplots(1, panels)
    speed_ax, curve_ax = axes[0], axes[1 + int(factors)]
    _speedup_panel(speed_ax, points, metric)
    if factors:
        _factor_panel(axes[1], points)
    _curve_panel(curve_ax, points)
    if capacity is not None:
        _capacity_panel(axes[-1], capacity)
    unplaced = sum(1 for p in points if p.load is None)
    if unplaced:
        fig.suptitle(f"{unplaced} line(s) without a recorded load are not drawn", fontsize="small")
    _place_labels(fig, curve_ax)
    return fig


# label offsets in points, tried in order: below-right first (clear of a curve that
# rises to the right), then the other corners, then further out
_OFFSETS: tuple[tuple[float, float], ...] = tuple(
    (dx * k, dy * k)
    for k in (1.0, 2.2, 3.4)
    for dx, dy in ((7, -7), (7, 7), (-7, 7), (-7, -7), (0, -11), (0, 11), (12, 0), (-12, 0))
)


def _place_labels(fig: Figure, ax: Axes) -> None:
    """Move each point label of ``ax`` to the first offset (``_OFFSETS``) where it
    overlaps no label placed before it and no point, inside the panel; where none
    fits, the offset with the least overlap. Measured with the figure's renderer
    after its layout, so the boxes are the drawn ones."""
    from matplotlib.text import Annotation

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    panel = ax.get_window_extent(renderer)
    marks = [
        ax.transData.transform(xy)
        for line in ax.get_lines()
        for xy in line.get_xydata()  # type: ignore[union-attr]
    ]
    placed: list[tuple[float, float, float, float]] = []

    def cost(box: tuple[float, float, float, float]) -> float:
        x0, y0, x1, y1 = box
        area = 0.0
        for a0, b0, a1, b1 in placed:
            w, h = min(x1, a1) - max(x0, a0), min(y1, b1) - max(y0, b0)
            area += max(w, 0.0) * max(h, 0.0)
        area += sum(25.0 for mx, my in marks if x0 - 3 <= mx <= x1 + 3 and y0 - 3 <= my <= y1 + 3)
        inside = panel.x0 <= x0 and x1 <= panel.x1 and panel.y0 <= y0 and y1 <= panel.y1
        return area + (0.0 if inside else 1e6)

    for text in ax.texts:
        if not isinstance(text, Annotation):
            continue
        best: tuple[float, tuple[float, float], tuple[float, float, float, float]] | None = None
        for dx, dy in _OFFSETS:
            text.xyann = (dx, dy)
            text.set_horizontalalignment("left" if dx > 0 else "right" if dx < 0 else "center")
            text.set_verticalalignment("bottom" if dy > 0 else "top" if dy < 0 else "center")
            e = text.get_window_extent(renderer)
            box = (float(e.x0), float(e.y0), float(e.x1), float(e.y1))
            c = cost(box)
            if best is None or c < best[0]:
                best = (c, (dx, dy), box)
            if c == 0.0:
                break
        assert best is not None
        dx, dy = best[1]
        text.xyann = (dx, dy)
        text.set_horizontalalignment("left" if dx > 0 else "right" if dx < 0 else "center")
        text.set_verticalalignment("bottom" if dy > 0 else "top" if dy < 0 else "center")
        placed.append(best[2])


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix, PNG when none); returns the path.

    Raises:
        OSError: the file cannot be written.
        ValueError: the suffix names a format matplotlib cannot write.
    """
    out = Path(path)
    fmt = out.suffix.lstrip(".").lower() or "png"
    if fmt not in fig.canvas.get_supported_filetypes():
        raise ValueError(f"cannot write a plot as {fmt!r}: use .png, .svg or .pdf")
    fig.savefig(out, format=fmt, dpi=110)
    return out


def figure_png(fig: Figure) -> bytes:
    """``fig`` as PNG bytes (for embedding)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def png_data_uri(png: bytes) -> str:
    """``data:image/png;base64,…`` for an ``<img src>`` (RFC 2397 data URL)."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


_STYLE = (
    "body{font-family:sans-serif;margin:2em}"
    "table{border-collapse:collapse;font-size:0.9em}"
    "th,td{border:1px solid #ccc;padding:0.2em 0.5em;text-align:left}"
    "img{max-width:100%}"
)


def html_page(
    table_html: str, figure: Callable[[], Figure] | None, *, title: str = "deepseekbench scorecard"
) -> str:
    """A self-contained HTML5 page: ``table_html``, then ``figure()`` as an inline PNG.

    ``figure`` is ``None`` for no plots; when matplotlib is missing the page
    carries a note with the install command instead of the picture. The page
    references no external resource (styles inline, the image a ``data:`` URL).
    """
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        table_html,
    ]
    if figure is not None:
        try:
            png = figure_png(figure())
        except MissingExtraError:
            parts.append(f"<p>Plots need matplotlib: <code>{html.escape(INSTALL_HINT)}</code></p>")
        else:
            alt = "speedup vs load per route; TPOT vs output throughput per route"
            parts.append(f'<p><img alt="{alt}" src="{png_data_uri(png)}"></p>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
