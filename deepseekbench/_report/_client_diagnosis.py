"""One line per run on the measuring client's health, and a flag per line.

A row is flagged when its client's event loop lagged past the plan's threshold
(``Row.client_saturated``) or read token chunks in bursts (``Row.client_starved``).
The flag names the cause, since the remedies are opposite:

- ``starved``: the row read token chunks in bursts (``Row.client_starved``): the
  one flag that costs the row its TPOT speedup (refusal ``client_starved``, the same
  word); run the client on another host or pin it.
- ``saturated``: the client's event-loop thread was busy (CPU share >=
  :data:`SATURATED_CPU_SHARE`): more client workers spread the work.
- ``waited``: the thread was runnable but waited for a core (share >=
  :data:`STARVED_WAIT_SHARE`) while using little CPU, yet its chunks did not bunch,
  so its TPOT stands: more workers would only add contention; run the client on
  another host or pin it.
- ``lagged``: late, yet neither busy nor waiting for a core (blocking code in the
  client's own loop, or no scheduler statistics on this OS).

A ``saturated`` line with the run's ``workers`` and the cores known says how many
workers would keep up: an estimate from the measured CPU share
(:func:`~deepseekbench._analysis._workers_estimate.workers_from_share`), its basis stated.
"""

from __future__ import annotations

from collections.abc import Sequence

from deepseekbench._analysis._client_flag import (
    SATURATED_CPU_SHARE,
    STARVED_WAIT_SHARE,
    ClientHealth,
    client_flag,
)
from deepseekbench._analysis._workers_estimate import workers_from_share

__all__ = [
    "SATURATED_CPU_SHARE",
    "STARVED_WAIT_SHARE",
    "client_flag",
    "run_diagnoses",
    "run_diagnosis",
]


def _most(values: Sequence[float | int | None]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return max(known) if known else None


def _workers_advice(workers: int | None, share: float, cores: float | None) -> str:
    auto = 'or workers = "auto": one per core'
    if workers is None:
        return f"add workers (plan key workers, {auto}; docs/workers.md)"
    if cores is None:
        return f"add workers (workers = {2 * workers}, now {workers}, {auto}; docs/workers.md)"
    est = workers_from_share(min(1.0, max(0.0, share)), workers, max(1, int(cores)))
    if est.short_of_cores:
        return (
            f"about {est.needed} workers would keep up (estimate: {est.basis}), more than "
            f"the {est.cores} cores: run the client on more cores or hosts; docs/workers.md"
        )
    return (
        f"about {est.needed} workers would keep up (estimate: {est.basis}; now {workers}, "
        f"{est.cores} cores); docs/workers.md"
    )


def run_diagnosis(lines: Sequence[ClientHealth], workers: int | None = None) -> str | None:
    """One line on the client over all ``lines`` (``None`` when none is flagged); the
    most severe cause wins (starved, then saturated, waited, lagged), with the worst
    figures of the lines that have it, e.g. "client starved: read token chunks in
    bursts, waited for a CPU core 42% of the time (2 cores, load 5.1); run the client
    on another host or pin it" or "client saturated: 97% CPU; add workers (...)".
    ``workers``: the run's plan key, when known."""
    return next(iter(run_diagnoses(lines, workers)), None)


def run_diagnoses(lines: Sequence[ClientHealth], workers: int | None = None) -> list[str]:
    """One line per client flag present over ``lines``, most severe first (starved,
    saturated, waited, lagged; :func:`run_diagnosis` is the first): every flag a
    scorecard's ``client`` column shows is explained by a note."""
    flagged = [(client_flag(ln), ln) for ln in lines]
    out = []
    for kind in ("starved", "saturated", "waited", "lagged"):
        these = [ln for flag, ln in flagged if flag == kind]
        if these:
            out.append(_sentence(kind, these, len(lines), workers))
    return out


def _sentence(kind: str, these: Sequence[ClientHealth], total: int, workers: int | None) -> str:
    rows = f"{len(these)} of {total} rows"
    if kind == "saturated":
        share = _most([ln.client_cpu_share for ln in these]) or 0.0
        cores = _most([ln.client_cores for ln in these])
        advice = _workers_advice(workers, share, cores)
        return f"client saturated: {share:.0%} CPU ({rows}); {advice}"
    stall = _most([ln.client_stall_ms for ln in these])
    stalled = f", its loop stalled up to {stall:.0f} ms" if stall is not None else ""
    if kind == "lagged":
        cpu = _most([ln.client_cpu_share for ln in these])
        busy = f" at {cpu:.0%} CPU" if cpu is not None else ""
        return (
            f"client lagged{busy}{stalled} ({rows}), neither busy nor waiting for a core: "
            "look for blocking code in the client's event loop (or in anything else "
            "the process runs: an engine embedded in it, as in the demo, shares the loop's "
            "process)"
        )
    wait = _most([ln.client_core_wait_share for ln in these])
    cores = _most([ln.client_cores for ln in these])
    load = _most([ln.client_load_1m for ln in these])
    host = ", ".join(
        part
        for part in (
            f"{cores:.0f} cores" if cores is not None else "",
            f"load {load:.1f}" if load is not None else "",
        )
        if part
    )
    waited = f"waited for a CPU core {wait:.0%} of the time" if wait is not None else ""
    where = f"{f' ({host})' if host else ''}{stalled} ({rows})"
    if kind == "waited":
        return (
            f"client waited: {waited}{where}, its chunks not bunched (TPOT stands); "
            "run the client on another host or pin it"
        )
    return (
        f"client starved: read token chunks in bursts{', ' + waited if waited else ''}"
        f"{where}; run the client on another host or pin it"
    )
