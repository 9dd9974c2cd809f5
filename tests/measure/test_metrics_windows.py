"""Counter windows that lie and per-position acceptance.

Members of each kind beyond ``shared/cases/metrics``: other restart signals,
partial families, data-parallel engines that appear or restart alone, and the
per-position family's own consistency.
"""

from __future__ import annotations

import pytest

from deepseekbench import AcceptanceRecord, AcceptanceScope, Dialect, metrics_delta, parse_metrics

NAMES = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


def expo(
    counts: dict[str, tuple[int, int, int]],
    *,
    start: float | None = 100.0,
    created: float | None = 200.0,
    per_pos: dict[str, list[int]] | None = None,
    prefix: str = "vllm",
    skip: str | None = None,
) -> str:
    """An exposition: per engine label (drafts, draft tokens, accepted), optional extras."""
    out = []
    if start is not None:
        out += ["# TYPE process_start_time_seconds gauge", f"process_start_time_seconds {start}"]
    for name, idx in zip(NAMES, range(3), strict=True):
        if name == skip:
            continue
        fam = f"{prefix}:spec_decode_{name}"
        out.append(f"# TYPE {fam}_total counter")
        for engine, values in counts.items():
            labels = f'engine="{engine}",model_name="m"'
            out.append(f"{fam}_total{{{labels}}} {values[idx]}")
            if created is not None:
                out.append(f"{fam}_created{{{labels}}} {created}")
    if per_pos:
        fam = f"{prefix}:spec_decode_num_accepted_tokens_per_pos"
        out.append(f"# TYPE {fam}_total counter")
        for engine, positions in per_pos.items():
            for pos, v in enumerate(positions):
                labels = f'engine="{engine}",model_name="m",position="{pos}"'
                out.append(f"{fam}_total{{{labels}}} {v}")
    return "\n".join(out) + "\n"


def delta(before: str, after: str) -> AcceptanceRecord | None:
    return metrics_delta(
        parse_metrics(before, model_name="m"), parse_metrics(after, model_name="m")
    )


BEFORE = expo({"0": (10, 30, 12)}, per_pos={"0": [6, 4, 2]})


def test_a_clean_window_with_per_position_acceptance() -> None:
    after = expo({"0": (20, 60, 27)}, per_pos={"0": [13, 9, 5]})
    r = delta(BEFORE, after)
    assert r is not None and r.scope is AcceptanceScope.server_wide
    assert (r.verify_steps, r.draft_tokens, r.accepted_tokens) == (10, 30, 15)
    assert r.acceptance_by_position == pytest.approx((0.7, 0.5, 0.3))


@pytest.mark.parametrize(
    "after",
    [
        # restart signals with every counter higher again
        expo({"0": (20, 60, 27)}, start=5000.0, per_pos={"0": [13, 9, 5]}),
        expo({"0": (20, 60, 27)}, created=9000.0, per_pos={"0": [13, 9, 5]}),
        # a counter went down
        expo({"0": (20, 60, 11)}, per_pos={"0": [13, 9, 5]}),
        # accepted > drafted within the window
        expo({"0": (20, 31, 27)}, per_pos={"0": [13, 9, 5]}),
        # a partial family: one of the three counters missing
        expo({"0": (20, 60, 27)}, skip="num_draft_tokens"),
        # a per-position series went down
        expo({"0": (20, 60, 27)}, per_pos={"0": [5, 9, 5]}),
    ],
)
def test_an_inconsistent_window_gives_no_record(after: str) -> None:
    assert delta(BEFORE, after) is None


@pytest.mark.parametrize(
    "per_pos",
    [
        [13, 9, 4],  # positions do not add up to the accepted tokens
        [17, 5, 5],  # a position accepted more often than there were steps
    ],
)
def test_per_position_counts_that_disagree_give_no_per_position_figure(
    per_pos: list[int],
) -> None:
    r = delta(BEFORE, expo({"0": (20, 60, 27)}, per_pos={"0": per_pos}))
    assert r is not None and r.accepted_tokens == 15
    assert r.acceptance_by_position is None


def test_a_position_gap_gives_no_per_position_figure() -> None:
    before = expo({"0": (0, 0, 0)}, prefix="llamacpp", created=None)
    after = expo({"0": (4, 16, 6)}, prefix="llamacpp", created=None, per_pos={"0": [3, 2, 1]})
    after = after.replace('position="1"', 'position="5"')
    r = delta(before, after)
    assert r is not None and r.acceptance_by_position is None


def test_a_partial_family_in_the_first_scrape_gives_no_record() -> None:
    before = expo({"0": (10, 30, 12)}, skip="num_drafts")
    assert delta(before, expo({"0": (20, 60, 27)})) is None


@pytest.mark.parametrize("engines", [2, 3, 4])
def test_data_parallel_engines_are_summed(engines: int) -> None:
    before = expo({str(e): (10 * e, 30 * e, 12 * e) for e in range(engines)})
    after = expo({str(e): (10 * e + 5, 30 * e + 15, 12 * e + 6) for e in range(engines)})
    r = delta(before, after)
    assert r is not None
    assert (r.verify_steps, r.draft_tokens, r.accepted_tokens) == (
        5 * engines,
        15 * engines,
        6 * engines,
    )


def test_one_data_parallel_engine_restarting_alone_is_caught() -> None:
    """Engine 1 restarted (went down) while engine 0 grew more: the sum alone still rises."""
    before = expo({"0": (10, 30, 12), "1": (50, 150, 60)}, created=None, start=None)
    after = expo({"0": (100, 300, 120), "1": (5, 15, 6)}, created=None, start=None)
    assert delta(before, after) is None


def test_an_engine_label_that_appears_only_after_gives_no_record() -> None:
    before = expo({"0": (10, 30, 12)})
    after = expo({"0": (20, 60, 24), "1": (5, 15, 6)})
    assert delta(before, after) is None


def test_position_series_created_at_first_increment_count_from_zero() -> None:
    """llama.cpp (and labelled counters in general) expose a position only once it is used."""
    before = expo({"0": (0, 0, 0)}, prefix="llamacpp", created=None)
    after = expo({"0": (4, 16, 6)}, prefix="llamacpp", created=None, per_pos={"0": [3, 2, 1]})
    r = delta(before, after)
    assert r is not None and r.engine is Dialect.llamacpp
    assert r.acceptance_by_position == pytest.approx((0.75, 0.5, 0.25))


def test_markers_missing_from_one_scrape_are_no_restart() -> None:
    before = expo({"0": (10, 30, 12)}, start=None, created=None)
    assert delta(before, expo({"0": (20, 60, 24)})) is not None
