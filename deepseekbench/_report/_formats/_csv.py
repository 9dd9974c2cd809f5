"""The CSV format: one flat record per scorecard line, the run's metadata in every record.

Holds :data:`CSV_FIELDS`, :func:`records` (also the pandas columns) and
:func:`render`. The sections walk into columns: the run line and its integrity
note (``model``, ``plan_hash``, ``run_started_at``, ``engine``,
``results_integrity``, which an unfinished run's header line joins), the main
table (one record per line) and the latency percentiles (``*_p90_ms``...); each
credited TPOT line's decomposition in ``step_cost_ratio``...
``break_even_acceptance_rate`` (the section's sentences are not carried). A flat
table cannot carry the title, the nested per-category and per-turn tables, the
best configuration, capacity or the notes (:data:`OMITS`; the JSON format
carries them).
"""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING, Any, Final

from deepseekbench._analysis._lines import ScorecardLine
from deepseekbench._report._notes import positions_text
from deepseekbench._report._sections import report_sections
from deepseekbench._types._axes import Speculative
from deepseekbench._types._row import PER_REQUEST_FIGURES, Dispersion, Percentiles

if TYPE_CHECKING:
    from deepseekbench._analysis._analysis import RunMeta
    from deepseekbench._report._scorecard import Scorecard

__all__ = ["CSV_FIELDS", "OMITS", "records", "render"]

OMITS: Final[frozenset[str]] = frozenset(
    {
        "title",
        "decomposition",
        "acceptance",
        "categories",
        "turns",
        "best_config",
        "capacity",
        "notes",
    }
)
"""What one flat record per line cannot carry."""

_FIXED_FIELDS: Final = (
    "cell", "load", "route", "speculative", "baseline", "quality_parity",
    "accepted_token_ratio", "acceptance_length", "acceptance_scope", "ttft_ms", "ttft_p90_ms",
    "ttft_p99_ms", "server_ttft_ms", "server_queue_ms", "tpot_ms", "tpot_p90_ms", "tpot_p99_ms",
    "itl_p50_ms", "itl_p90_ms", "itl_p99_ms", "e2e_ms", "e2e_p90_ms", "e2e_p99_ms",
    "output_toks_per_s", "output_throughput_toks_per_s", "goodput_req_per_s", "slo_attainment",
    "schedule_lagged", "n_requests", "n_errors", "speedup", "ci95_low", "ci95_high", "rounds",
    "refusal_reasons", "parity_detail", "first_divergence", "task_flips",
    "acceptance_by_position", "spec_tokens", "sse_ignored_lines", "model", "plan_hash",
    "run_started_at", "engine", "results_integrity", "client_flag", "n_client_starved",
    "client_stall_ms", "client_cpu_share", "client_core_wait_share", "server_tpot_ms",
    "parity_basis", "first_divergence_margin_nats", "divergence_note",
    "step_cost_ratio", "step_cost_ratio_ci95_low", "step_cost_ratio_ci95_high",
    "verify_step_ms", "decode_step_ms", "break_even_acceptance_length",
    "break_even_acceptance_rate",
)  # fmt: skip
_FIGURE_FIELDS: Final = tuple(f.column(q) for f in PER_REQUEST_FIGURES for q in f.csv)
CSV_FIELDS: Final = _FIXED_FIELDS + tuple(c for c in _FIGURE_FIELDS if c not in _FIXED_FIELDS)
"""The CSV columns, in order (also the pandas DataFrame's): a per-request figure's
percentile columns come from its :data:`~deepseekbench._types._row.PER_REQUEST_FIGURES`
entry (placed by the fixed list when it names them, else appended)."""

_ROW_FIELDS: Final = (
    "quality_parity", "accepted_token_ratio", "acceptance_length", "acceptance_scope",
    "ttft_ms", "server_ttft_ms", "server_queue_ms", "tpot_ms", "e2e_ms", "output_toks_per_s",
    "output_throughput_toks_per_s", "goodput_req_per_s", "slo_attainment", "schedule_lagged",
    "n_requests", "n_errors", "parity_detail", "spec_tokens", "sse_ignored_lines",
    "n_client_starved", "client_stall_ms", "client_cpu_share", "client_core_wait_share",
    "server_tpot_ms", "parity_basis", "first_divergence_margin_nats", "divergence_note",
)  # fmt: skip
"""Columns that are the row's own field of the same name (an enum as its value)."""


def _figure_fields(d: Dispersion) -> dict[str, Any]:
    """Every per-request figure's percentile columns (``None`` where unknown)."""
    out: dict[str, Any] = {}
    for f in PER_REQUEST_FIGURES:
        p: Percentiles | None = getattr(d, f.name)
        out |= {f.column(q): getattr(p, q) if p is not None else None for q in f.csv}
    return out


def _verdict_fields(ln: ScorecardLine) -> dict[str, Any]:
    v = ln.verdict
    if v is None:
        reasons = "no_off_baseline" if ln.row.speculative is not Speculative.off else ""
        return dict.fromkeys(("speedup", "ci95_low", "ci95_high", "rounds"), None) | {
            "refusal_reasons": reasons
        }
    return {
        "speedup": v.speedup,
        "ci95_low": v.ci_low,
        "ci95_high": v.ci_high,
        "rounds": v.rounds,
        "refusal_reasons": " ".join(r.value for r in v.reasons),
    }


def _decomposition_fields(ln: ScorecardLine) -> dict[str, Any]:
    """The line's decomposition columns (empty unless a TPOT speedup is credited)."""
    d = ln.decomposition
    ci = d.step_cost_ratio_ci if d is not None else None
    return {
        "step_cost_ratio": d.step_cost_ratio if d else None,
        "step_cost_ratio_ci95_low": ci[0] if ci else None,
        "step_cost_ratio_ci95_high": ci[1] if ci else None,
        "verify_step_ms": d.verify_step_ms if d else None,
        "decode_step_ms": d.decode_step_ms if d else None,
        "break_even_acceptance_length": d.break_even_length if d else None,
        "break_even_acceptance_rate": d.break_even_rate if d else None,
    }


def _record(ln: ScorecardLine, meta: RunMeta | None, integrity: str | None) -> dict[str, Any]:
    r, d = ln.row, ln.row.dispersion
    own = {f: getattr(r, f) for f in _ROW_FIELDS}
    rec: dict[str, Any] = {
        "cell": ln.cell,
        "load": ln.load,
        "route": ln.route,
        "speculative": r.speculative.value,
        "baseline": ln.baseline,
        **{k: getattr(v, "value", v) for k, v in own.items()},
        **_figure_fields(d),
        **_verdict_fields(ln),
        **_decomposition_fields(ln),
        "first_divergence": ln.first_divergence,
        "task_flips": " | ".join(ln.task_flips),
        "acceptance_by_position": positions_text(r.acceptance_by_position),
        "model": meta.model if meta else None,
        "plan_hash": meta.plan_hash if meta else None,
        "run_started_at": meta.started_at if meta else None,
        "engine": meta.engines.get(ln.route) if meta else None,
        "results_integrity": integrity,
        "client_flag": ln.client_flag,
    }
    return {k: rec[k] for k in CSV_FIELDS}


def records(card: Scorecard) -> list[dict[str, Any]]:
    """One flat dict per line (the CSV and DataFrame columns; the run's metadata in
    ``model``, ``plan_hash``, ``run_started_at`` and ``engine``, empty when unknown)."""
    sections = report_sections(card)
    table = any(s.kind == "table" for s in sections)
    said = [card.meta.results_integrity if card.meta is not None else None]
    said += [s.items[0] for s in sections if s.kind == "unfinished"]
    integrity = "; ".join(x for x in said if x) or None  # both, when both apply
    return [_record(ln, card.meta, integrity) for ln in card.lines] if table else []


def render(card: Scorecard) -> str:
    """CSV with a header row; ``speedup`` is empty unless credited."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for rec in records(card):
        w.writerow({k: "" if v is None else v for k, v in rec.items()})
    return buf.getvalue()
