"""How many client workers would keep up: an estimate from the client's own measured cost.

Holds :func:`workers_from_share` (from the event-loop thread's measured CPU share, the
figure every measured request carries: ``StreamMeasurement.client_cpu_share``),
:func:`workers_from_rate` (from the client's CPU cost per request and per chunk, as
``benchmarks/bench_client_overhead.py`` measures them, and the offered rate) and the
:class:`WorkersEstimate` both return.

The model (stated with every estimate, since it is one): the client's work splits
evenly over its workers, each an event loop on its own core, and a loop kept at or
below :data:`TARGET_CPU_SHARE` of a core leaves it time to stamp each read when it
comes (a loop near 100 % busy stamps reads late: ``client_saturated``). So the work
in core-seconds per second, divided by the target share, is the number of workers;
it is capped at the cores the client may run on, since a worker past them only
waits for a core (``client_core_wait_share``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["TARGET_CPU_SHARE", "WorkersEstimate", "workers_from_rate", "workers_from_share"]

TARGET_CPU_SHARE = 0.5
"""Event-loop CPU time per wall second (0..1) each worker is sized to: half a core,
headroom for bursts (the ``saturated`` flag is at 0.8,
:data:`~deepseekbench._analysis._client_flag.SATURATED_CPU_SHARE`)."""


@dataclass(frozen=True)
class WorkersEstimate:
    """Workers that would keep up with the measured load (an estimate, with its basis).

    ``needed``: workers the model gives, uncapped (>= 1); ``workers``: ``needed``
    capped at ``cores`` (what ``workers = "auto"`` would start on this estimate);
    ``cores``: the CPU cores the client may run on; ``basis``: the figures and the
    rule it came from, in words, e.g. ``"97% CPU x 2 workers / 50% per worker"``.
    """

    needed: int
    workers: int
    cores: int
    basis: str

    @property
    def short_of_cores(self) -> bool:
        """Whether even one worker per core would not keep up (``needed > cores``)."""
        return self.needed > self.cores


def _estimate(load_cores: float, cores: int, basis: str, target: float) -> WorkersEstimate:
    needed = max(1, math.ceil(load_cores / target - 1e-9))
    return WorkersEstimate(needed=needed, workers=min(needed, cores), cores=cores, basis=basis)


def _check(cores: int, target: float) -> None:
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    if not 0 < target <= 1:
        raise ValueError(f"target_share must be in (0, 1], got {target}")


def workers_from_share(
    cpu_share: float, workers: int, cores: int, target_share: float = TARGET_CPU_SHARE
) -> WorkersEstimate:
    """Workers that would keep each loop at ``target_share`` of a core, given that
    ``workers`` loops each measured ``cpu_share`` (0..1, CPU s per wall s; the worst
    of a row's requests, ``client_cpu_share``).

    The work is ``cpu_share x workers`` core-seconds per second (a saturated loop's
    share is a floor on its work: the estimate is then a lower bound, said so in the
    basis). Source of the model: this module's docstring.

    Raises:
        ValueError: ``cpu_share`` outside 0..1, ``workers`` or ``cores`` below 1, or
            ``target_share`` outside (0, 1].
    """
    _check(cores, target_share)
    if not 0 <= cpu_share <= 1:
        raise ValueError(f"cpu_share must be in 0..1, got {cpu_share}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    floor = " (at least: a loop at 100% may have had more to do)" if cpu_share >= 0.99 else ""
    basis = (
        f"{cpu_share:.0%} CPU x {workers} worker{'s' if workers != 1 else ''} "
        f"/ {target_share:.0%} per worker{floor}"
    )
    return _estimate(cpu_share * workers, cores, basis, target_share)


def workers_from_rate(
    requests_per_s: float,
    chunks_per_request: float,
    cpu_us_per_request: float,
    cpu_us_per_chunk: float,
    cores: int,
    target_share: float = TARGET_CPU_SHARE,
) -> WorkersEstimate:
    """Workers for an offered rate, from the client's CPU cost (µs) per request and
    per token chunk (``benchmarks/bench_client_overhead.py`` measures both).

    The work is ``requests_per_s x (cpu_us_per_request + chunks_per_request x
    cpu_us_per_chunk) / 1e6`` core-seconds per second (requests/s, chunks, µs).
    Source of the model: this module's docstring.

    Raises:
        ValueError: a negative or non-finite figure, ``cores`` below 1, or
            ``target_share`` outside (0, 1].
    """
    _check(cores, target_share)
    figures = (requests_per_s, chunks_per_request, cpu_us_per_request, cpu_us_per_chunk)
    if not all(math.isfinite(f) and f >= 0 for f in figures):
        raise ValueError(f"rate and costs must be finite and >= 0, got {figures}")
    load = requests_per_s * (cpu_us_per_request + chunks_per_request * cpu_us_per_chunk) / 1e6
    basis = (
        f"{requests_per_s:g} requests/s x ({cpu_us_per_request:g} us + "
        f"{chunks_per_request:g} chunks x {cpu_us_per_chunk:g} us) = {load:.2f} cores "
        f"/ {target_share:.0%} per worker"
    )
    return _estimate(load, cores, basis, target_share)
