"""The scorecard's notes: prose under the tables on what was refused, flagged or explained.

Holds :func:`crossover_text` and :func:`crossovers` (where a route stops paying
as the load grows), :func:`scorecard_notes` (every note, in the order every
format prints them) and the per-topic note builders it gathers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deepseekbench._analysis._lines import UNFINISHED_MARK, ScorecardLine
from deepseekbench._analysis._speedup import RefusalReason
from deepseekbench._report._client_diagnosis import run_diagnoses
from deepseekbench._report._past_eos import past_eos_notes
from deepseekbench._report._server_side import server_side_notes
from deepseekbench._report._tables import server_wide_marked
from deepseekbench._types._axes import QualityParity, Speculative
from deepseekbench._types._identity import RouteIdentity

__all__ = [
    "crossover_text",
    "crossovers",
    "positions_text",
    "scorecard_notes",
    "unfinished_header",
]


def _x(v: float) -> str:
    """A speedup figure, e.g. ``1.60×``."""
    return f"{v:.2f}×"


def crossover_text(route: str, cell: str, points: Sequence[tuple[str, float]]) -> str:
    """One sentence on where ``route`` stops paying in ``cell``.

    ``points``: ``(load phrase, credited speedup)`` in ascending load, e.g.
    ``[("concurrency 1", 1.6), ("concurrency 16", 1.2), ("concurrency 64", 0.91)]``
    gives "mtp @ 1k/256/non_think: pays up to concurrency 16 (1.60× → 1.20×); at
    concurrency 64 it is 0.91×". Only credited loads are points, so the sentence
    speaks of credited loads (:meth:`~deepseekbench.Scorecard.crossovers` names the others).
    """
    head = f"{route} @ {cell}: "
    paying = 0
    while paying < len(points) and points[paying][1] > 1.0:
        paying += 1
    if len(points) == 1:
        load, v = points[0]
        return head + ("pays" if paying else "does not pay") + f" at {load} ({_x(v)})"
    if paying == len(points):
        first, last = points[0], points[-1]
        return (
            head
            + f"pays at every credited load ({_x(first[1])} at {first[0]} → "
            + (f"{_x(last[1])} at {last[0]})")
        )
    if paying == 0:
        listing = ", ".join(f"{_x(v)} at {p}" for p, v in points)
        return head + f"does not pay at any credited load ({listing})"
    text = (
        head + f"pays up to {points[paying - 1][0]} ({_x(points[0][1])} → "
        f"{_x(points[paying - 1][1])}); at {points[paying][0]} it is {_x(points[paying][1])}"
    )
    rest = [f"{_x(v)} at {p}" for p, v in points[paying + 1 :]]
    return text + (f" (then {', '.join(rest)})" if rest else "")


def crossovers(lines: Sequence[ScorecardLine]) -> tuple[str, ...]:
    """Per route and cell measured at 2 or more load points: where it stops paying
    (:func:`crossover_text` over its credited speedups, ascending load), plus the
    loads where no speedup was credited."""
    groups: dict[tuple[str, str], list[ScorecardLine]] = {}
    for ln in lines:
        if ln.row.speculative is not Speculative.off and ln.load_level is not None:
            groups.setdefault((ln.route, ln.cell), []).append(ln)
    out: list[str] = []
    for (route, cell), lns in groups.items():
        if len(lns) < 2:
            continue
        lns.sort(key=lambda x: x.load_level or 0.0)
        points = [
            (x.load_phrase, x.verdict.speedup)
            for x in lns
            if x.verdict is not None and x.verdict.speedup is not None
        ]
        refused = [x.load_phrase for x in lns if not x.printed]
        text = crossover_text(route, cell, points) if points else f"{route} @ {cell}: "
        if refused:
            text += ("; " if points else "") + "no speedup credited at " + ", ".join(refused)
        out.append(text)
    return tuple(out)


def positions_text(by_pos: tuple[float, ...] | None) -> str | None:
    """Per-position acceptance as ``0.74 0.65 0.52``, ``None`` when unknown."""
    return " ".join(f"{f:.2f}" for f in by_pos) if by_pos is not None else None


def where(ln: ScorecardLine) -> str:
    """``route @ cell (load)``: how the notes name a line (the load only when it has one)."""
    return f"{ln.route} @ {ln.cell}" + (f" ({ln.load})" if ln.load != "—" else "")


def _loads_of(lines: Sequence[ScorecardLine]) -> str:
    """`` (c=1, c=3, c=5)``: the lines' load points in ascending load (a ``[search]``
    level is measured after the sweep's), or nothing for a run without load points."""
    loads = [ln.load for ln in sorted(lines, key=lambda x: x.load_level or 0.0)]
    return f" ({', '.join(loads)})" if loads != ["—"] else ""


def _without_witness(detail: str | None, witness_note: str | None) -> str | None:
    """A parity detail with the distribution witness's paragraph cut to its verdict: the
    paragraph is printed once, in the route's witness note (:func:`_witness_notes`)."""
    if detail is None or not witness_note or witness_note not in detail:
        return detail
    verdict = witness_note.split(":", 1)[0]
    return detail.replace(witness_note, f"{verdict} (its figures in the witness note below)")


def _parity_notes(lines: Sequence[ScorecardLine]) -> list[str]:
    """One note per route, cell and explanation of an uncredited line; the load
    points it holds at are listed, then its first divergence and task flips."""
    groups: dict[tuple[Any, ...], list[ScorecardLine]] = {}
    for ln in lines:
        r = ln.row
        if ln.printed or (
            r.speculative is Speculative.off and r.quality_parity is QualityParity.verified
        ):
            continue
        key = (ln.route, ln.cell, r.speculative is Speculative.off, r.quality_parity,
               _without_witness(r.parity_detail, r.witness_note), ln.first_divergence,
               ln.task_flips)  # fmt: skip
        groups.setdefault(key, []).append(ln)
    notes: list[str] = []
    for (route, cell, is_off, parity, detail, first, flips), lns in groups.items():
        where = f"{route} @ {cell}{_loads_of(lns)}"
        if is_off:
            notes.append(f"{where}: baseline parity {parity.value} — {detail or 'no detail'}")
            continue
        notes.append(
            f"{where}: no speedup credited; parity {parity.value} — {detail or 'no detail'}"
        )
        if first:
            notes.append(f"  first divergence: {first}")
        if flips:
            notes.append(f"  task flips ({len(flips)}):")
            notes.extend(f"    {f}" for f in flips)
    return notes


def _detail_notes(lines: Sequence[ScorecardLine]) -> list[str]:
    """Per-position acceptance and ignored SSE lines, one note per line that has them
    (the client's health: one note per client flag, :func:`run_diagnoses`)."""
    notes: list[str] = []
    for ln in lines:
        r = ln.row
        if r.acceptance_by_position is not None:
            depth = f", depth {r.spec_tokens}" if r.spec_tokens is not None else ""
            notes.append(
                f"{where(ln)}: acceptance by draft position 1.."
                f"{len(r.acceptance_by_position)}{depth}: "
                f"{positions_text(r.acceptance_by_position)}"
            )
        if r.sse_ignored_lines:
            notes.append(
                f"{where(ln)}: {r.sse_ignored_lines} SSE line(s) ignored "
                "(unknown or padded field names): streamed text may be incomplete"
            )
    return notes


def _identity_notes(lines: Sequence[ScorecardLine]) -> list[str]:
    """One note per distinct refused or flagged route identity (the loads listed)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for ln in lines:
        identity = ln.row.route_identity
        if identity in (RouteIdentity.refused, RouteIdentity.flagged):
            status = identity.value if identity else ""
            key = (status, ln.row.route_identity_detail or "no detail")
            groups.setdefault(key, []).append(ln.load)
    out = []
    for (status, detail), loads in groups.items():
        where = f" ({', '.join(dict.fromkeys(loads))})" if loads != ["—"] else ""
        out.append(f"route identity {status}{where}: {detail}")
    return out


def _divergence_notes(lines: Sequence[ScorecardLine]) -> list[str]:
    """One line per route and cell (and load points) explaining its divergences
    by ``off``'s margins."""
    groups: dict[tuple[str, str, str], list[ScorecardLine]] = {}
    for ln in lines:
        note = ln.row.divergence_note
        if note and ln.row.speculative is not Speculative.off:
            groups.setdefault((ln.route, ln.cell, note), []).append(ln)
    return [
        f"{route} @ {cell}{_loads_of(lns)}: {note}" for (route, cell, note), lns in groups.items()
    ]


def _witness_notes(lines: Sequence[ScorecardLine]) -> list[str]:
    """One line per route with a distribution witness: its verdict and its cost
    (follow-up requests to ``off``, output tokens scored; docs/rows-and-gate.md)."""
    seen: dict[str, str] = {}
    for ln in lines:
        row = ln.row
        if row.witness_note is None or ln.route in seen:
            continue
        cost = ""
        if row.witness_requests is not None:
            cost = (
                f"; cost {row.witness_requests} outputs scored by off (one follow-up "
                "request each on text, two on the sampled token ids), "
                f"{row.witness_scored_tokens} tokens scored"
            )
        seen[ln.route] = f"{ln.route}: {row.witness_note}{cost}"
    return list(seen.values())


ACCEPTANCE_RATES_NOTE = (
    "three acceptance rates: 'accept' = accepted / drafted draft tokens (the acceptance "
    "rate); 'own … per position' = the i.i.d. per-position rate a whose acceptance length "
    "(1 - a^(k+1)) / (1 - a) is the measured one; 'by draft position' = the fraction of "
    "verify steps whose i-th draft token was accepted"
)
"""The footnote naming the scorecard's acceptance rates, beside each other wherever a row
reports acceptance by position (the row fields ``accepted_token_ratio``,
``acceptance_by_position``; the break-even column of ``deepseekbench._analysis``)."""


def _footnotes(lines: Sequence[ScorecardLine]) -> list[str]:
    """Short outputs, then the footnotes of the ``*`` and ``!`` markers and of rounds."""
    short = [ln for ln in lines if ln.row.output_short]
    natural = [ln for ln in short if ln.row.output_length == "natural"]
    notes = [
        f"{where(ln)}: {ln.row.n_output_short} of {ln.row.n_requests} outputs "
        "fell short of max_tokens: decode is under-measured at this output target"
        for ln in short
        if ln.row.output_length != "natural"
    ]
    if natural:  # the plan asked for each answer at its own length: a fact, said once
        n = sum(ln.row.n_output_short for ln in natural)
        total = sum(ln.row.n_requests for ln in natural)
        notes.append(
            f"{n} of {total} outputs on {len(natural)} line(s) ended before max_tokens, as "
            'workload.output_length = "natural" asks (each answer at its own length); '
            '"pinned" or "forced" measures decode at the cell\'s full output target'
        )
    if any(ln.row.acceptance_by_position is not None for ln in lines):
        notes.append(ACCEPTANCE_RATES_NOTE)
    if any(server_wide_marked(ln) for ln in lines):  # the footnote of a shown "*"
        notes.append("* acceptance is a server-wide /metrics delta, not per request")
    notes.extend(_unfinished_notes(lines))
    if any(ln.row.schedule_lagged for ln in lines):
        notes.append(
            "! the open-loop schedule lagged (p90 queue_ms above arrival.max_lag_ms): "
            "the client, not the server, may have limited the load"
        )
    notes.extend(_speedup_interval_notes(lines))
    notes.extend(_acceptance_interval_notes(lines))
    if any(ln.verdict is not None and ln.verdict.point_estimate for ln in lines):
        notes.append(
            "point estimate: a figure without per-request values has no interval; its "
            "significance was not judged, so it is not a credited speedup claim"
        )
    return notes


def unfinished_header(lines: Sequence[ScorecardLine]) -> str:
    """The header line of a run that did not finish (no ``run_end`` record): what the rows
    hold, and, when a line has a reason marked ``‡``, where the mark is explained."""
    marked = any(ln.unfinished_reasons for ln in lines)
    return (
        "Unfinished run: the results file has no run_end record (stopped, crashed or "
        "still going), so the rows hold only what was measured"
        + (
            f"; a refusal reason marked {UNFINISHED_MARK} may be for a check or "
            f"measurement the run never made (the {UNFINISHED_MARK} note below)"
            if marked
            else ""
        )
    )


_PARITY_REASONS = frozenset(
    {RefusalReason.baseline_parity_not_verified, RefusalReason.candidate_parity_not_verified}
)


def _unfinished_notes(lines: Sequence[ScorecardLine]) -> list[str]:
    """One footnote for every reason marked ``‡`` (:attr:`ScorecardLine.unfinished_reasons`):
    the run did not finish, and what it never got to (parity checks, the rest of a row's
    requests), each part only when a marked reason is of its kind."""
    marked = [ln for ln in lines if ln.unfinished_reasons]
    if not marked:
        return []
    reasons = {r for ln in marked for r in ln.unfinished_reasons}
    parts = []
    if reasons & _PARITY_REASONS:
        parts.append(
            "parity not verified where it is still unknown: the run stopped before "
            "checking it (off's determinism control runs after every measurement)"
        )
    if reasons - _PARITY_REASONS:
        parts.append(
            "a row with too few requests, or a figure or the speculative counters missing: "
            "the run stopped before measuring it all"
        )
    return [
        f"{UNFINISHED_MARK} the run did not finish: on {len(marked)} line(s) a reason "
        f"marked {UNFINISHED_MARK} may be its doing, not a fault found — "
        + "; ".join(parts)
        + ". Finishing the run judges them"
    ]


def _speedup_interval_notes(lines: Sequence[ScorecardLine]) -> list[str]:
    """What each speedup interval covers: one footnote for the lines marked 'over N
    prompts' (with rounds and in one round, each part only when such a line is shown),
    saying why such an interval can sit lopsided around its figure, and one for rounds
    without prompts."""
    vs = [ln.verdict for ln in lines if ln.verdict is not None and ln.verdict.ci_low is not None]
    notes = []
    parts = []
    if any(v.rounds and v.prompts for v in vs):
        parts.append(
            "with rounds, the geometric mean of the paired round ratios, its 95% CI a "
            "Student-t interval on their logs (repeat noise, drift) combined with a paired "
            "cluster bootstrap over the prompts (the same prompts drawn for both routes): "
            "it covers the choice of prompts too"
        )
    if any(v.prompts and not v.rounds for v in vs):
        parts.append(
            "in one round, the ratio of the rows' medians, its 95% CI a paired cluster "
            "bootstrap over the prompts (the same prompts drawn for both routes)"
        )
    if parts:
        notes.append(
            "speedups marked 'over N prompts': "
            + "; ".join(parts)
            + ". Each round's figure is a ratio of medians over the prompts, and the bootstrap "
            "redraws that median from resampled prompts: with few prompts it jumps between "
            "prompts' values, so the interval can sit lopsided around the figure (one end "
            "near it) — the figure is the median prompt's, not a mean of per-prompt ratios"
        )
    if any(v.rounds and not v.prompts for v in vs):
        notes.append(
            "speedups with rounds: geometric mean of the paired round ratios, 95% CI a "
            "Student-t interval on their logs (repeat noise only: the prompts held fixed)"
        )
    return notes


def _acceptance_interval_notes(lines: Sequence[ScorecardLine]) -> list[str]:
    """Why an acceptance-length interval resampled the requests as if independent: the
    requests name no prompt, or fewer than ``MIN_PROMPTS`` of them (the real reason)."""
    from deepseekbench._analysis._prompt_bootstrap import MIN_PROMPTS

    by_requests = [
        ln.decomposition
        for ln in lines
        if ln.decomposition is not None
        and ln.decomposition.acceptance_length_ci is not None
        and ln.decomposition.acceptance_prompts is None
    ]
    tail = (
        "a bootstrap of the requests as if independent (repeat noise only: the prompts held fixed)"
    )
    notes = []
    if any(d.acceptance_prompts_named is None for d in by_requests):
        notes.append(
            f"acceptance-length intervals without prompt ids: {tail}; with them, "
            f"a cluster bootstrap over the prompts"
        )
    few = sorted({n for d in by_requests if (n := d.acceptance_prompts_named) is not None})
    if few:
        named = ", ".join(str(n) for n in few)
        notes.append(
            f"acceptance-length intervals over fewer than {MIN_PROMPTS} prompts ({named} "
            f"named): {tail}; with {MIN_PROMPTS} or more, a cluster bootstrap over the prompts"
        )
    return notes


def _workers_notes(lines: Sequence[ScorecardLine]) -> list[str]:
    """``workers = "auto"``: one note per load point's choice, e.g. ``client workers:
    auto: 2 of 2 cores, warm-up client CPU share 0.93 (...); off, mtp @ 1k/256 (c=64)``
    (the row's ``client_workers_basis``; every route at a load point shares it)."""
    by_basis: dict[str, list[ScorecardLine]] = {}
    for ln in lines:
        if ln.row.client_workers_basis is not None:
            by_basis.setdefault(ln.row.client_workers_basis, []).append(ln)
    out = []
    for basis, these in by_basis.items():
        cells = sorted({f"{ln.cell}" + (f" ({ln.load})" if ln.load != "—" else "") for ln in these})
        routes = ", ".join(dict.fromkeys(ln.route for ln in these))
        out.append(f"client workers: {basis}; {routes} @ {', '.join(cells)}")
    return out


def scorecard_notes(lines: Sequence[ScorecardLine], client_workers: int | None) -> list[str]:
    """Every note of a scorecard, in order: crossovers, parity, per-line details,
    the client's health, the server's side, route identity, divergences explained,
    the distribution witness per route (verdict and cost), tokens past ``off``'s end
    of sequence, then the footnotes."""
    notes: list[str] = [f"crossover: {c}" for c in crossovers(lines)]
    notes.extend(_parity_notes(lines))
    notes.extend(_detail_notes(lines))
    notes.extend(run_diagnoses([ln.row for ln in lines], client_workers))
    notes.extend(_workers_notes(lines))
    notes.extend(server_side_notes(lines))
    notes.extend(_identity_notes(lines))
    notes.extend(_divergence_notes(lines))
    notes.extend(_witness_notes(lines))
    notes.extend(
        past_eos_notes(
            (where(ln), ln.row.tokens_past_eos)
            for ln in lines
            if ln.row.speculative is not Speculative.off
        )
    )
    notes.extend(_footnotes(lines))
    return notes
