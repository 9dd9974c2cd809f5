"""The workers estimate, on recorded figures (no timing: every input is a number).

Figures: ``benchmarks/bench_client_overhead.py --mode burst`` on this branch measured
``measure_streamed`` at 343.5 CPU us per request and 6.03 CPU us per chunk; the
saturated run in the client diagnosis tests recorded 97% CPU on its loop.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepseekbench._analysis._workers_estimate import (
    TARGET_CPU_SHARE,
    workers_from_rate,
    workers_from_share,
)
from deepseekbench._report._client_diagnosis import run_diagnosis
from tests._helpers import make_row


def test_a_saturated_pair_of_workers_on_two_cores_is_short_of_cores() -> None:
    est = workers_from_share(0.97, workers=2, cores=2)
    assert (est.needed, est.workers, est.cores) == (4, 2, 2)  # 0.97 x 2 / 0.5 = 3.88
    assert est.short_of_cores
    assert est.basis == "97% CPU x 2 workers / 50% per worker"


def test_a_loop_at_full_share_gives_a_lower_bound_and_says_so() -> None:
    est = workers_from_share(1.0, workers=1, cores=16)
    assert (est.needed, est.workers) == (2, 2) and not est.short_of_cores
    assert "at least" in est.basis


def test_a_rate_and_the_measured_costs_give_the_workers() -> None:
    # 1000 requests/s x (343.5 us + 200 chunks x 6.03 us) = 1.5495 cores; / 0.5 = 3.1 -> 4
    est = workers_from_rate(1000, 200, 343.5, 6.03, cores=16)
    assert (est.needed, est.workers) == (4, 4)
    assert "1.55 cores" in est.basis
    # a tenth of the rate fits one worker
    assert workers_from_rate(100, 200, 343.5, 6.03, cores=16).needed == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cpu_share": 1.2, "workers": 1, "cores": 2},
        {"cpu_share": 0.5, "workers": 0, "cores": 2},
        {"cpu_share": 0.5, "workers": 1, "cores": 0},
        {"cpu_share": 0.5, "workers": 1, "cores": 2, "target_share": 0.0},
    ],
)
def test_bad_figures_raise(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        workers_from_share(**kwargs)  # type: ignore[arg-type]


def test_a_negative_cost_raises() -> None:
    with pytest.raises(ValueError):
        workers_from_rate(10, 1, -1.0, 1.0, cores=2)


@given(
    st.floats(0, 1),
    st.floats(0, 1),
    st.integers(1, 64),
    st.integers(1, 64),
)
def test_more_measured_work_never_asks_for_fewer_workers(
    a: float, b: float, workers: int, cores: int
) -> None:
    low, high = sorted((a, b))
    lo = workers_from_share(low, workers, cores)
    hi = workers_from_share(high, workers, cores)
    assert lo.needed <= hi.needed and lo.workers <= hi.workers <= cores
    # enough workers: the work spread over them is at most the target share each
    assert high * workers / hi.needed <= TARGET_CPU_SHARE + 1e-9 or hi.needed == 1


def test_the_diagnosis_states_the_estimate_and_its_basis() -> None:
    row = make_row(client_saturated=True, client_cpu_share=0.97, client_cores=16)
    line = run_diagnosis([row], workers=2)
    assert line is not None
    assert "about 4 workers would keep up (estimate: 97% CPU x 2 workers / 50% per worker" in line
    short = run_diagnosis(
        [make_row(client_saturated=True, client_cpu_share=0.97, client_cores=2)], 2
    )
    assert short is not None and "more than the 2 cores" in short
