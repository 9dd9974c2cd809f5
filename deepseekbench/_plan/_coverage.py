"""Workload coverage: is every workload item sent?

Measured request ``i`` of a (route, cell, load point) sends item
``(i // rounds) % n_items`` (:func:`~deepseekbench._plan._schedule.measure_slot`),
so a cell sends ``min(n_items, ceil(requests_per_cell / rounds))`` distinct
items; the rest would never be measured. :func:`workload_coverage` counts it,
and :class:`WorkloadCoverageWarning` says so at validation, in the dry run and
at the start of a run, with the ``requests_per_cell`` that sends every item
(``n_items × rounds``). A plan with ``workload.require_all_items`` is refused
instead (:class:`~deepseekbench.PlanError`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WorkloadCoverage", "WorkloadCoverageWarning", "items_used", "workload_coverage"]


class WorkloadCoverageWarning(UserWarning):
    """Some workload items would never be sent: the message gives the
    counts and the ``requests_per_cell`` that sends them all."""


@dataclass(frozen=True, slots=True)
class WorkloadCoverage:
    """How many of a workload's items one (route, cell, load point) sends.

    Attributes:
        n_items: items in the workload (per cell).
        n_sent: distinct items the measured requests send (each ≥ once).
        rounds: rounds per cell and load point.
        requests_per_cell: the plan's measured requests per cell.
    """

    n_items: int
    n_sent: int
    rounds: int
    requests_per_cell: int

    @property
    def complete(self) -> bool:
        """Every item is sent at least once."""
        return self.n_sent >= self.n_items

    @property
    def needed_requests(self) -> int:
        """The smallest ``requests_per_cell`` that sends every item (requests)."""
        return self.n_items * self.rounds

    def message(self, setting: str = "requests_per_cell") -> str:
        """e.g. ``8 items, 4 will be sent: raise requests_per_cell to 24``; ``setting``
        names what the reader raises (the plan key; ``demo``: its ``--requests`` flag)."""
        return (
            f"{self.n_items} items, {self.n_sent} will be sent "
            f"({_count(self.requests_per_cell, 'request')} per cell over "
            f"{_count(self.rounds, 'round')}): "
            f"raise {setting} to {self.needed_requests}, or keep fewer items"
        )


def _count(n: int, noun: str) -> str:
    """``n`` and the noun, plural unless one: ``1 round``, ``3 rounds``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def workload_coverage(n_items: int, *, requests_per_cell: int, rounds: int) -> WorkloadCoverage:
    """The coverage of ``n_items`` items by ``requests_per_cell`` requests in ``rounds``
    rounds (each round sends the same items: ``ceil(requests_per_cell / rounds)``).

    Raises:
        ValueError: a count below 1.
    """
    if n_items < 1 or requests_per_cell < 1 or rounds < 1:
        raise ValueError("n_items, requests_per_cell and rounds must be >= 1")
    slots = -(-requests_per_cell // rounds)
    return WorkloadCoverage(n_items, min(n_items, slots), rounds, requests_per_cell)


def items_used(n_items: int, *, requests_per_cell: int, rounds: int, warmup: int) -> int:
    """How many of the first items a cell sends, warm-ups included: measured slots
    ``ceil(requests_per_cell / rounds)`` or the ``warmup`` requests (item ``i`` for
    warm-up ``i``), whichever is larger, at most ``n_items`` (items)."""
    return min(n_items, max(-(-requests_per_cell // rounds), warmup))
