"""A load point's work, and its deterministic split among client workers (pure).

A load point is a list of requests (:class:`PoolItem`: a caller's key, a route
label, a :class:`~deepseekbench.ChatRequest`) offered either as a closed loop of
``concurrency`` streams or as an open loop (each request's send time, s from
the load point's start, with ``concurrency`` capping requests in flight).
:func:`split_work` gives each of N workers its :class:`WorkerShare`:

* ``active = min(N, concurrency)`` workers take part (a stream is never split);
  worker ``w`` holds ``concurrency // active`` streams, plus one when
  ``w < concurrency % active``;
* closed loop: the item at position ``j`` belongs to stream ``j % concurrency``,
  and stream ``s`` to worker ``s % active``, so each worker's share of the
  items is proportional to its share of the streams;
* open loop: the item at position ``j`` goes to worker ``j % active`` with its
  send time unchanged (every worker thins the same schedule, all against one
  shared start), and the in-flight cap is split like the streams;
* warm-up request ``k`` goes to worker ``k % active``.

The split depends only on the work and N: the same plan gives the same split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deepseekbench._execute._ramp import stream_starts_s
from deepseekbench._types._request import ChatRequest

__all__ = ["LoadWork", "PoolItem", "WorkerShare", "split_work"]


@dataclass(frozen=True, slots=True)
class PoolItem:
    """One request of a load point.

    Attributes:
        key: the caller's id for it (e.g. the measured request's index); unique
            within a :class:`LoadWork`.
        route: the route label it is sent to.
        request: the chat request.
    """

    key: int
    route: str
    request: ChatRequest


@dataclass(frozen=True, slots=True)
class LoadWork:
    """A load point's requests and how they are offered.

    Attributes:
        items: the measured requests, in send order.
        concurrency: closed loop: streams (requests in flight); open loop: the
            in-flight cap (requests). At least 1.
        offsets_s: open loop: each item's send time after the shared start (s,
            ascending, one per item); ``None`` for a closed loop.
        warmup: unmeasured requests each worker sends (closed loop, its own
            streams) before the measured start.
        ramp_ms: closed loop: the streams' first sends spread over this time (ms;
            0 = all at once; :mod:`~deepseekbench._execute._ramp`).

    Raises:
        ValueError: ``concurrency`` below 1, ``offsets_s`` not one per item,
            repeated item keys, or ``ramp_ms`` below 0.
    """

    items: tuple[PoolItem, ...]
    concurrency: int
    offsets_s: tuple[float, ...] | None = None
    warmup: tuple[PoolItem, ...] = ()
    ramp_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1 (got {self.concurrency})")
        if self.offsets_s is not None and len(self.offsets_s) != len(self.items):
            raise ValueError(
                f"offsets_s has {len(self.offsets_s)} send times for {len(self.items)} items"
            )
        if len({it.key for it in self.items}) != len(self.items):
            raise ValueError("item keys must be unique within a load point")
        if self.ramp_ms < 0:
            raise ValueError(f"ramp_ms must be >= 0 (got {self.ramp_ms})")


@dataclass(frozen=True, slots=True)
class WorkerShare:
    """What one worker sends of a :class:`LoadWork`.

    Attributes:
        worker: the worker's number (0-based).
        items: its measured requests, in send order.
        concurrency: its streams (closed loop) or its in-flight cap (open loop).
        offsets_s: open loop: its items' send times after the shared start (s);
            ``None`` for a closed loop.
        warmup: its unmeasured warm-up requests.
        stream_starts_s: closed loop with a ramp: when each of its streams may first
            send (s after the shared start; stream ``s`` of the load point at
            ``s · ramp_ms / concurrency``); ``()`` = all at once.
    """

    worker: int
    items: tuple[PoolItem, ...]
    concurrency: int
    offsets_s: tuple[float, ...] | None
    warmup: tuple[PoolItem, ...]
    stream_starts_s: tuple[float, ...] = ()


def _streams(concurrency: int, active: int, worker: int) -> int:
    return concurrency // active + (1 if worker < concurrency % active else 0)


def _owner(position: int, work: LoadWork, active: int) -> int:
    if work.offsets_s is None:
        return (position % work.concurrency) % active
    return position % active


def split_work(work: LoadWork, workers: int) -> tuple[WorkerShare, ...]:
    """Split ``work`` among ``workers`` processes or actors (see the module docstring).

    Returns:
        one :class:`WorkerShare` per taking-part worker (``min(workers,
        concurrency)`` of them, numbered from 0); every item is in exactly one
        share, in its original order, and the shares' concurrency sums to
        ``work.concurrency``.

    Raises:
        ValueError: ``workers`` below 1.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1 (got {workers})")
    active = min(workers, work.concurrency)
    owned: list[list[int]] = [[] for _ in range(active)]
    for j in range(len(work.items)):
        owned[_owner(j, work, active)].append(j)
    return tuple(
        WorkerShare(
            worker=w,
            items=tuple(work.items[j] for j in owned[w]),
            concurrency=_streams(work.concurrency, active, w),
            offsets_s=_pick(work.offsets_s, owned[w]),
            warmup=work.warmup[w::active],
            stream_starts_s=_starts(work, w, active),
        )
        for w in range(active)
    )


def _starts(work: LoadWork, worker: int, active: int) -> tuple[float, ...]:
    if work.offsets_s is not None or work.ramp_ms <= 0:
        return ()
    return stream_starts_s(work.concurrency, work.ramp_ms, worker=worker, active=active)


def _pick(offsets: Sequence[float] | None, positions: Sequence[int]) -> tuple[float, ...] | None:
    return None if offsets is None else tuple(offsets[j] for j in positions)
