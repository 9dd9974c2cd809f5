"""The depth grid's best configuration per load."""

from __future__ import annotations

import statistics
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from deepseekbench._analysis._best_config import GridCandidate, best_configs, conservative_score


def _c(
    route: str, speedup: float | None, rounds: tuple[float, ...] = (), **kw: Any
) -> GridCandidate:
    base: dict[str, Any] = {
        "grid": "mtp", "route": route, "cell": "1k/256/non_think", "load": "c=1",
        "load_level": 1.0, "speedup": speedup, "round_speedups": rounds,
        "acceptance_length": None, "acceptance_by_position": None, "spec_config": {},
    }  # fmt: skip
    base.update(kw)
    return GridCandidate(**base)


@given(st.lists(st.floats(0.1, 10.0), min_size=1, max_size=9))
def test_the_score_is_the_median_less_the_mad_and_never_above_the_median(xs: list[float]) -> None:
    med = statistics.median(xs)
    mad = statistics.median(abs(x - med) for x in xs)
    score = conservative_score(xs)
    assert score is not None and abs(score - (med - mad)) < 1e-9
    assert score <= med + 1e-12


def test_a_steady_configuration_beats_a_faster_but_unstable_one() -> None:
    steady = _c("mtp-k2", 1.5, (1.5, 1.5, 1.5))
    shaky = _c("mtp-k4", 1.6, (1.0, 1.6, 2.3))
    (choice,) = best_configs([shaky, steady])
    assert choice.best == "mtp-k2"
    assert [x["route"] for x in choice.candidates] == ["mtp-k2", "mtp-k4"]


def test_ranking_ignores_acceptance_and_refused_configurations() -> None:
    deep = _c("mtp-k4", 1.2, (1.2, 1.2), acceptance_length=4.5, concurrency=4)
    shallow = _c("mtp-k1", 1.3, (1.3, 1.3), acceptance_length=1.9, concurrency=4)
    refused = _c("mtp-k8", None, acceptance_length=7.9, concurrency=4)  # parity differs
    (choice,) = best_configs([deep, refused, shallow])
    assert choice.best == "mtp-k1" and choice.acceptance_length == 1.9
    assert choice.concurrency == 4
    assert choice.candidates[-1] == {
        "route": "mtp-k8", "score": None, "speedup": None, "credited": False,
        "acceptance_length": 7.9,
    }  # fmt: skip
    (none,) = best_configs([refused])
    assert none.best is None and none.score is None


def test_one_choice_per_load_in_ascending_load() -> None:
    cands = [
        _c("mtp-k1", 1.4, load="c=8", load_level=8.0),
        _c("mtp-k4", 1.1, load="c=8", load_level=8.0),
        _c("mtp-k1", 1.3, load="c=1", load_level=1.0),
        _c("mtp-k4", 1.6, load="c=1", load_level=1.0),
    ]
    choices = best_configs(cands)
    assert [(c.load, c.best) for c in choices] == [("c=1", "mtp-k4"), ("c=8", "mtp-k1")]
