"""A run comparison rendered: text, Markdown, JSON, HTML, and a plot of the changed figures.

Holds :data:`COMPARE_FORMATS`, :func:`render_comparison` and :func:`plot_comparison`
(matplotlib, imported only when a plot is drawn: ``pip install 'deepseekbench[plot]'``).
Every format carries the same content: the summary, the family's α and level, each
line's verdicts (figure, A, B, interval, verdict, reasons), parity, the lines of one
run only, the recorded differences and the regressions beyond the threshold.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Final

import orjson

from deepseekbench._analysis._compare_runs import FigureChange, LineComparison, RunComparison
from deepseekbench._types._fraction import Fraction, parse_fraction

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["COMPARE_FORMATS", "plot_comparison", "render_comparison"]

COMPARE_FORMATS: Final = ("text", "markdown", "json", "html")
"""The formats a comparison renders as (``compare --format``)."""

_COLUMNS = ("figure", "A", "B", "interval", "verdict")
_STATISTIC: Final = {"speedup": "ratio of median TPOTs, "}
"""The statistic a figure is, where another report prints a figure of the same name
made otherwise: compare's speedup is off's median TPOT over the route's (all rounds
pooled), the scorecard's the geometric mean of the paired rounds' ratios."""


def _cells(f: FigureChange, threshold: float) -> tuple[str, ...]:
    def fmt(v: float | None) -> str:
        return "—" if v is None else f"{v:.4g}"

    verdict = f.verdict
    if f.regressed(threshold):
        verdict += " — REGRESSION"
    unit = f" {f.unit}" if f.unit not in ("0..1", "×") else f.unit.replace("0..1", "")
    unit = _STATISTIC.get(f.figure, "") + unit.strip()
    name = f.label + (f" ({unit})" if unit else "")
    return (name, fmt(f.a), fmt(f.b), f.interval_text(), verdict)


def _header(cmp: RunComparison) -> list[str]:
    return [
        f"A: {cmp.a}",
        f"B: {cmp.b}",
        f"summary: {cmp.summary}",
        f"family-wise α {cmp.alpha:g} over {cmp.judged} figures judged (Bonferroni): "
        f"each interval at level {cmp.level:.2g}; a change counts only beyond "
        f"{cmp.margin:.0%} of A (the margin)",
    ]


def _line_heading(ln: LineComparison) -> str:
    return f"{ln.name} — parity {ln.parity}"


def _tail(cmp: RunComparison, threshold: float) -> list[tuple[str, list[str]]]:
    """The closing sections: lines of one run only, recorded differences, regressions."""
    regress = cmp.regressions(threshold)
    return [
        ("lines only in A", list(cmp.only_in_a)),
        ("lines only in B", list(cmp.only_in_b)),
        ("recorded differences", [str(f) for f in cmp.factors] or ["none"]),
        (f"regressions beyond {threshold:.0%}", regress or ["none"]),
    ]


def _text(cmp: RunComparison, threshold: float) -> str:
    out = _header(cmp)
    for ln in cmp.lines:
        out += ["", _line_heading(ln)]
        cells = [_cells(f, threshold) for f in ln.figures]
        widths = [max(len(c[i]) for c in [_COLUMNS, *cells]) for i in range(len(_COLUMNS))]
        for c in [_COLUMNS, *cells]:
            out.append(
                "  " + "  ".join(x.ljust(w) for x, w in zip(c, widths, strict=True)).rstrip()
            )
    for title, items in _tail(cmp, threshold):
        if items:
            out += ["", f"{title}:"] + [f"  {x}" for x in items]
    return "\n".join(out) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _markdown(cmp: RunComparison, threshold: float) -> str:
    out = ["# Run comparison", ""] + [f"- {_md_escape(x)}" for x in _header(cmp)]
    for ln in cmp.lines:
        out += ["", f"## {_md_escape(_line_heading(ln))}", ""]
        out.append("| " + " | ".join(_COLUMNS) + " |")
        out.append("|" + "---|" * len(_COLUMNS))
        for f in ln.figures:
            out.append("| " + " | ".join(_md_escape(c) for c in _cells(f, threshold)) + " |")
    for title, items in _tail(cmp, threshold):
        if items:
            out += ["", f"## {title}", ""] + [f"- {_md_escape(x)}" for x in items]
    return "\n".join(out) + "\n"


def _json(cmp: RunComparison, threshold: float) -> str:
    data = cmp.model_dump(mode="json")
    data["summary"] = cmp.summary
    data["level"] = cmp.level
    data["threshold"] = threshold
    data["regressions"] = cmp.regressions(threshold)
    return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"


def _html_table(rows: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in _COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_STYLE = (
    "body{font-family:sans-serif;margin:2em}"
    "table{border-collapse:collapse;font-size:0.9em}"
    "th,td{border:1px solid #ccc;padding:0.2em 0.5em;text-align:left}"
    "img{max-width:100%}"
)


def _html(cmp: RunComparison, threshold: float) -> str:
    from deepseekbench._errors import MissingExtraError
    from deepseekbench._report._plot import INSTALL_HINT, figure_png, png_data_uri

    title = "deepseekbench run comparison"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{title}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{title}</h1>",
        "<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in _header(cmp)) + "</ul>",
    ]
    for ln in cmp.lines:
        parts.append(f"<h2>{html.escape(_line_heading(ln))}</h2>")
        parts.append(_html_table([_cells(f, threshold) for f in ln.figures]))
    for name, items in _tail(cmp, threshold):
        if items:
            parts.append(f"<h2>{html.escape(name)}</h2>")
            parts.append("<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in items) + "</ul>")
    if cmp.changed():
        try:
            png = figure_png(plot_comparison(cmp))
        except MissingExtraError:
            parts.append(f"<p>Plots need matplotlib: <code>{html.escape(INSTALL_HINT)}</code></p>")
        else:
            alt = "the change of each significantly changed figure, with its interval"
            parts.append(f'<p><img alt="{alt}" src="{png_data_uri(png)}"></p>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def render_comparison(cmp: RunComparison, fmt: str = "text", *, threshold: Fraction = 0.0) -> str:
    """``cmp`` as ``fmt`` (one of :data:`COMPARE_FORMATS`); ``threshold``: the share of A
    (a fraction ``0.05`` or a percent string ``"5%"``) beyond which a significant change
    for the worse is flagged a regression. HTML is a self-contained page with the plot
    of the changed figures inlined (a note instead when matplotlib is missing).

    Raises:
        ValueError: unknown format.
        FractionFormatError: ``threshold`` in neither form, or negative (a ValueError).
    """
    renderers = {"text": _text, "markdown": _markdown, "json": _json, "html": _html}
    if fmt not in renderers:
        raise ValueError(f"unknown format {fmt!r}; allowed: {', '.join(COMPARE_FORMATS)}")
    return renderers[fmt](cmp, parse_fraction(threshold, name="threshold", upper=float("inf")))


def plot_comparison(cmp: RunComparison, path: str | Path | None = None) -> Figure:
    """One horizontal bar per significantly changed figure and line: the change (B / A,
    dotted line at 1; or B − A for fractions, dotted line at 0) with its interval as an
    error bar, red where worse, green where better. Written to ``path`` when given
    (.png, .svg or .pdf); returns the matplotlib Figure either way.

    Raises:
        MissingExtraError: matplotlib is not installed.
        ValueError: nothing changed (no bar to draw), or ``path``'s suffix is no format
            matplotlib writes.
    """
    from deepseekbench._report._plot import require_matplotlib, save_figure

    require_matplotlib()
    from matplotlib.figure import Figure

    changed = cmp.changed()
    if not changed:
        raise ValueError("no figure changed significantly: nothing to plot")
    panels = [(s, [(ln, f) for ln, f in changed if f.scale == s]) for s in ("ratio", "difference")]
    panels = [(s, items) for s, items in panels if items]
    fig = Figure(figsize=(8, 1.2 + 0.45 * len(changed) + 0.8 * len(panels)))
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (scale, items) in zip(axes, panels, strict=True):
        ys = list(range(len(items)))
        for y, (_, f) in zip(ys, items, strict=True):
            assert f.ci_low is not None and f.ci_high is not None and f.a is not None
            assert f.b is not None
            x = f.b / f.a if scale == "ratio" and f.a else f.b - f.a
            color = "tab:red" if f.worse else "tab:green"
            err = [[max(0.0, x - f.ci_low)], [max(0.0, f.ci_high - x)]]
            base = 1.0 if scale == "ratio" else 0.0
            ax.barh(y, x - base, left=base, color=color, alpha=0.6)
            ax.errorbar([x], [y], xerr=err, fmt="o", color="black", capsize=3)
        ax.axvline(1.0 if scale == "ratio" else 0.0, color="grey", linestyle=":")
        ax.set_yticks(ys, [f"{f.label}: {ln.route} {ln.load}" for ln, f in items])
        ax.set_xlabel("B / A" if scale == "ratio" else "B − A")
        ax.invert_yaxis()
    fig.suptitle(f"changed significantly (family-wise α {cmp.alpha:g}); red: worse")
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig
