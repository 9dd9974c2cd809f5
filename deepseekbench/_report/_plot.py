"""Pictures of a scorecard: speedup vs load, and the latency–throughput curve.

Needs the ``plot`` extra (matplotlib: ``pip install 'deepseekbench[plot]'``).
Figures are built on :class:`matplotlib.figure.Figure` directly (no pyplot), so
nothing global changes and no GUI backend is needed; a notebook shows the
returned Figure as it is.

Two panels:

* **speedup vs load** — per speculative route (and cell), the credited speedup
  (dimensionless, times faster by the scorecard's metric) at each load point,
  with its 95 % interval as error bars; the dotted line at 1× is "no gain". A
  refused point is not drawn (its speedup was not earned); the legend says why.
* **TPOT vs output throughput** — per route, including ``off``: median TPOT
  (ms/token) against output throughput over the measurement window
  (tokens/s), one point per load point, joined in load order and labelled with
  the load. Up and to the left is worse; speculation pays where its curve lies
  below ``off``'s at the same throughput.

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

__all__ = [
    "INSTALL_HINT",
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
        credited = v is not None and v.printed
        refusal = None
        if ln.speculative is not Speculative.off and not credited:
            refusal = " ".join(r.value for r in v.reasons) if v is not None else "no off baseline"
        points.append(
            LinePoint(
                series=f"{ln.route} @ {ln.cell}" if several_cells else ln.route,
                speculative=ln.speculative,
                load=float(load) if load is not None else None,
                open_loop=rate is not None,
                tpot_ms=row.tpot_ms,
                throughput_toks_per_s=row.output_throughput_toks_per_s,
                speedup=v.speedup if v is not None and credited else None,
                ci_low=v.ci_low if v is not None else None,
                ci_high=v.ci_high if v is not None else None,
                refusal=refusal,
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


def _colors(points: Sequence[LinePoint]) -> dict[str, str]:
    """One colour per series, the same on both panels (matplotlib's default cycle)."""
    return {name: f"C{i % 10}" for i, name in enumerate(_series(points))}


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
        refused = sorted({p.refusal for p in ps if p.refusal})
        label = name if not refused else f"{name} (refused: {', '.join(refused)})"
        ax.errorbar(
            xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label, color=colors[name]
        )
    if loads and min(loads) > 0 and max(loads) / min(loads) >= 4:
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
    if loads:
        ax.set_xticks(loads, labels=[f"{x:g}" for x in loads])
    ax.set_xlabel(_load_label(points))
    ax.set_ylabel(f"speedup by {metric} (×, 95% CI)")
    ax.set_title("Speedup vs load (credited points only)")
    ax.legend(fontsize="small")


def _curve_panel(ax: Axes, points: Sequence[LinePoint]) -> None:
    colors = _colors(points)
    for name, ps in _series(points).items():
        drawn = [
            (p.throughput_toks_per_s, p.tpot_ms, _short_load(p))
            for p in ps
            if p.load is not None and p.tpot_ms is not None and p.throughput_toks_per_s is not None
        ]
        refused = any(p.refusal for p in ps)
        style = "--" if refused else "-"
        label = f"{name} (not credited)" if refused else name
        xs = [x for x, _, _ in drawn]
        ys = [y for _, y, _ in drawn]
        (line,) = ax.plot(xs, ys, marker="o", linestyle=style, label=label, color=colors[name])
        for x, y, text in drawn:
            ax.annotate(
                text,
                (x, y),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize="x-small",
                color=line.get_color(),
            )
    ax.set_xlabel("output throughput (tokens/s, measurement window)")
    ax.set_ylabel("median TPOT (ms/token)")
    ax.set_title("Latency vs throughput per route")
    ax.legend(fontsize="small")


def require_matplotlib() -> None:
    """Check that the ``plot`` extra is installed, before any work that needs it.

    Raises:
        MissingExtraError: matplotlib is not installed (``pip install 'deepseekbench[plot]'``).
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(f"plotting needs matplotlib: {INSTALL_HINT}") from exc


def plot_lines(lines: Sequence[_Line], rows: Sequence[Row], *, metric: str) -> Figure:
    """A two-panel Figure: speedup vs load per route, TPOT vs output throughput per route.

    ``lines``: scorecard lines in row order; ``rows``: their rows; ``metric``:
    the speedup metric's name (axis label). Figure size 12 × 4.8 inches.

    Raises:
        MissingExtraError: matplotlib is not installed (``pip install 'deepseekbench[plot]'``).
        ValueError: ``lines`` and ``rows`` differ in length.
    """
    require_matplotlib()
    from matplotlib.figure import Figure

    points = line_points(lines, rows)
    fig = Figure(figsize=(12.0, 4.8), layout="constrained")
    speed_ax, curve_ax = fig.subplots(1, 2)
    _speedup_panel(speed_ax, points, metric)
    _curve_panel(curve_ax, points)
    unplaced = sum(1 for p in points if p.load is None)
    if unplaced:
        fig.suptitle(f"{unplaced} line(s) without a recorded load are not drawn", fontsize="small")
    return fig


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
