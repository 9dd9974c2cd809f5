"""The JSON format: the scorecard as data, one object per line beside the run's metadata.

Holds :func:`to_dict`, :func:`line_dict` and :func:`render`. The sections walk
into keys: the title's metric (``metric``), the run line (``run``, its
integrity note inside), an unfinished run's warning (``unfinished``, its header
line; absent for a finished run), the main table (``lines``; each line carries its
categories, turns and latency percentiles), the best configuration
(``best_configs``), capacity (``capacity``) and the notes under the tables
(``notes``, one string each, as the text format prints them). Each credited
TPOT line carries its ``decomposition``
(:class:`~deepseekbench.SpeedupDecomposition`'s fields); the section's
sentences (which factor moved between loads, the break-even per load) are
``decomposition_notes``; the acceptance per request is each line's
``acceptance_length_p10`` / ``_p50`` / ``_p90``, ``accepted_per_step`` and
``acceptance_split``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import orjson
from pydantic_core import to_jsonable_python

from deepseekbench._analysis._lines import ScorecardLine
from deepseekbench._report._sections import Section, report_sections

if TYPE_CHECKING:
    from deepseekbench._report._scorecard import Scorecard

__all__ = ["LINE_FIELDS", "OMITS", "line_dict", "render", "to_dict"]

OMITS: Final[frozenset[str]] = frozenset()
"""JSON carries every section."""

LINE_FIELDS: Final = (
    "cell", "route", "speculative", "baseline", "load", "load_level", "load_phrase",
    "quality_parity", "parity_detail", "accepted_token_ratio", "acceptance_length",
    "acceptance_scope", "ttft_ms", "tpot_ms", "e2e_ms", "output_toks_per_s", "n_requests",
    "n_errors", "verdict", "first_divergence", "task_flips", "acceptance_by_position",
    "spec_tokens", "sse_ignored_lines", "output_throughput_toks_per_s", "goodput_req_per_s",
    "slo_attainment", "schedule_lagged", "client_saturated", "output_short", "n_output_short",
    "categories", "turns", "dispersion", "server_ttft_ms", "server_queue_ms", "client_starved",
    "n_client_starved", "client_stall_ms", "client_cpu_share", "client_core_wait_share",
    "client_cores", "client_load_1m", "server_tpot_ms", "prefix_cache_hit_rate",
    "kv_cache_usage_peak", "queue_depth_peak", "route_identity", "route_identity_detail",
    "parity_basis", "first_divergence_margin_nats", "divergence_note", "tokens_past_eos",
    "acceptance_length_p10", "acceptance_length_p50", "acceptance_length_p90",
    "accepted_per_step", "acceptance_split",
    "speedup", "speedup_text", "client_flag", "decomposition",
)  # fmt: skip
"""A line object's keys, in order (the row's fields read through the line)."""


def line_dict(ln: ScorecardLine) -> dict[str, Any]:
    """One line as JSON-ready data; ``speedup`` and ``decomposition`` are ``null``
    unless credited (by TPOT, for the decomposition)."""
    out = {name: to_jsonable_python(getattr(ln, name)) for name in LINE_FIELDS[:-4]}
    out["speedup"] = ln.verdict.speedup if ln.verdict is not None else None
    out["speedup_text"] = ln.speedup_text
    out["client_flag"] = ln.client_flag
    d = ln.decomposition
    out["decomposition"] = d.model_dump(mode="json") if d is not None else None
    return out


def _value(section: Section, card: Scorecard) -> tuple[str, Any] | None:
    """Section -> (its key, its data), ``None`` for a section carried elsewhere:
    the integrity note inside ``run``; the categories, turns and latency
    percentiles inside each line."""
    kind = section.kind
    if kind == "title":
        return "metric", card.metric.value
    if kind == "run":
        return "run", card.meta.model_dump(mode="json") if card.meta is not None else None
    if kind == "unfinished":  # only a run without its run_end record has the key
        return "unfinished", section.items[0]
    if kind == "table":
        return "lines", [line_dict(ln) for ln in card.lines]
    if kind == "acceptance":  # each line carries its own acceptance_length_p10...
        return None
    if kind == "decomposition":  # each line carries its own; the sentences here
        return "decomposition_notes", list(section.items)
    if kind == "best_config":
        return "best_configs", [c.model_dump(mode="json") for c in card.best_configs()]
    if kind == "capacity" and card.capacity is not None:
        return "capacity", card.capacity.to_dict()
    if kind == "notes":
        return "notes", list(section.items)
    return None


def to_dict(card: Scorecard) -> dict[str, Any]:
    """``{"metric", "run", "lines": [...]}`` (``unfinished`` after ``run`` for a run
    without its ``run_end`` record), then ``best_configs`` and ``capacity``
    when the run had a depth grid or a ``[search]``, and ``notes`` when there are any."""
    pairs = (_value(s, card) for s in report_sections(card))
    return dict(p for p in pairs if p is not None)


def render(card: Scorecard) -> str:
    """:func:`to_dict` as indented JSON text."""
    return orjson.dumps(to_dict(card), option=orjson.OPT_INDENT_2).decode()
