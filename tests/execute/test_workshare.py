"""The split of a load point among client workers: a pure function, checked as a property
against the real split AND a deliberately broken one (round-robin that ignores streams)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from deepseekbench import ChatRequest, LoadWork, PoolItem
from deepseekbench._execute._workshare import WorkerShare, split_work

Splitter = Callable[[LoadWork, int], tuple[WorkerShare, ...]]
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BROKEN = settings(SETTINGS, phases=[Phase.explicit, Phase.generate], database=None)
REQ = ChatRequest(messages=({"role": "user", "content": "Count from 1 to 5."},), max_tokens=8)
ITEMS_30 = tuple(PoolItem(j, "a", REQ) for j in range(30))


@st.composite
def works(draw: st.DrawFn) -> LoadWork:
    n = draw(st.integers(0, 60))
    items = tuple(
        PoolItem(key=3 * j + 1, route=draw(st.sampled_from("ab")), request=REQ) for j in range(n)
    )
    concurrency = draw(st.integers(1, 40))
    offsets = None
    if draw(st.booleans()):
        gaps = draw(st.lists(st.floats(0, 2), min_size=n, max_size=n))
        acc, offsets_l = 0.0, []
        for g in gaps:
            acc += g
            offsets_l.append(acc)
        offsets = tuple(offsets_l)
    warm = tuple(PoolItem(-1, "a", REQ) for _ in range(draw(st.integers(0, 5))))
    return LoadWork(items, concurrency, offsets, warm)


def check_split(split: Splitter, cfg: settings = SETTINGS) -> None:
    @cfg
    @given(work=works(), workers=st.integers(1, 8))
    @example(work=LoadWork(ITEMS_30, 3), workers=2)  # streams 2:1 must get requests 2:1
    def prop(work: LoadWork, workers: int) -> None:
        shares = split(work, workers)
        assert shares == split(work, workers)  # same plan, same split
        active = min(workers, work.concurrency)
        assert [s.worker for s in shares] == list(range(active))
        assert sum(s.concurrency for s in shares) == work.concurrency
        assert all(s.concurrency >= 1 for s in shares)
        # every item exactly once, each share in the original order
        keys = [it.key for s in shares for it in s.items]
        assert sorted(keys) == sorted(it.key for it in work.items)
        order = {it.key: j for j, it in enumerate(work.items)}
        for s in shares:
            pos = [order[it.key] for it in s.items]
            assert pos == sorted(pos)
            if work.offsets_s is None:
                assert s.offsets_s is None
                # a worker's items follow its share of the streams (within one cycle)
                expected = len(work.items) * s.concurrency / work.concurrency
                assert abs(len(s.items) - expected) <= s.concurrency
            else:
                assert s.offsets_s == tuple(work.offsets_s[p] for p in pos)
        assert sum(len(s.warmup) for s in shares) == len(work.warmup)

    prop()


def broken_round_robin(work: LoadWork, workers: int) -> tuple[WorkerShare, ...]:
    """Items dealt round-robin whatever each worker's streams: 2:1 streams get 1:1 items."""
    active = min(workers, work.concurrency)
    shares = split_work(work, workers)
    return tuple(
        WorkerShare(
            s.worker,
            work.items[s.worker :: active],
            s.concurrency,
            None if work.offsets_s is None else work.offsets_s[s.worker :: active],
            s.warmup,
        )
        for s in shares
    )


def test_split_is_deterministic_complete_and_follows_the_streams() -> None:
    check_split(split_work)


def test_split_property_catches_a_split_that_ignores_streams() -> None:
    with pytest.raises(AssertionError):
        check_split(broken_round_robin, BROKEN)


def test_split_examples() -> None:
    items = tuple(PoolItem(j, "a", REQ) for j in range(6))
    closed = split_work(LoadWork(items, 3), 2)
    assert [[it.key for it in s.items] for s in closed] == [[0, 2, 3, 5], [1, 4]]
    assert [s.concurrency for s in closed] == [2, 1]
    opened = split_work(LoadWork(items, 4, offsets_s=(0, 1, 2, 3, 4, 5)), 2)
    assert [s.offsets_s for s in opened] == [(0, 2, 4), (1, 3, 5)]
    assert len(split_work(LoadWork(items, 1), 4)) == 1  # one stream is never split


def test_bad_work_is_refused() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        LoadWork((), 0)
    with pytest.raises(ValueError, match="send times"):
        LoadWork((PoolItem(0, "a", REQ),), 1, offsets_s=())
    with pytest.raises(ValueError, match="unique"):
        LoadWork((PoolItem(0, "a", REQ), PoolItem(0, "a", REQ)), 1)
    with pytest.raises(ValueError, match="workers"):
        split_work(LoadWork((), 1), 0)
