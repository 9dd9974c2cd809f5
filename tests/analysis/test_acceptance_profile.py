"""Acceptance as users need it: the per-request spread, the pooled histogram of accepted
tokens per step, the reasoning/answer split (unknown, never estimated) and the portable
acceptance profile with its consistency check acceptance length = 1 + Σ marginal."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepseekbench import (
    AcceptanceProfile,
    AcceptanceProfileError,
    AcceptanceRecord,
    Dialect,
    StreamMeasurement,
    acceptance_profile,
    load_results,
    read_acceptance_profile,
    write_acceptance_profile,
)
from deepseekbench._analysis._lines import load_words
from deepseekbench._analysis._spec_fields import acceptance_spread, accepted_histogram
from tests._helpers import make_row

DATA = Path(__file__).parent.parent / "data" / "render"


def _measured(accepted: list[int], depth: int = 3) -> StreamMeasurement:
    """A request whose verify steps accepted ``accepted[s]`` draft tokens each."""
    steps = len(accepted)
    by_pos = tuple(sum(1 for a in accepted if a >= k) / steps for k in range(1, depth + 1))
    rec = AcceptanceRecord.from_counts(
        engine=Dialect.vllm,
        source="test",
        draft_tokens=depth * steps,
        accepted_tokens=sum(accepted),
        verify_steps=steps,
        by_position=by_pos,
        spec_tokens=depth,
    )
    return StreamMeasurement.model_construct(
        acceptance=rec, acceptance_length=rec.acceptance_length, error=None
    )


def test_the_histogram_pools_steps_by_accepted_tokens() -> None:
    ok = [_measured([0, 3, 3, 1]), _measured([2, 2, 0])]
    assert accepted_histogram(ok) == (2, 1, 2, 2)  # steps accepting 0, 1, 2, 3 drafts
    spread = acceptance_spread(ok)
    assert spread["acceptance_split"] == "unknown"  # engines report totals only
    assert spread["acceptance_length_p10"] <= spread["acceptance_length_p50"]
    assert spread["acceptance_length_p50"] <= spread["acceptance_length_p90"]
    # a request without per-step figures: no pooled histogram, never a partial one
    bare = StreamMeasurement.model_construct(
        acceptance=AcceptanceRecord.from_counts(
            engine=Dialect.vllm, source="t", draft_tokens=6, accepted_tokens=3
        ),
        acceptance_length=None,
        error=None,
    )
    assert accepted_histogram([*ok, bare]) is None


@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=6))
def test_the_histogram_holds_every_step_and_gives_the_acceptance_length(
    requests: list[list[int]],
) -> None:
    hist = accepted_histogram([_measured(r) for r in requests])
    assert hist is not None
    steps = sum(len(r) for r in requests)
    assert sum(hist) == steps
    assert sum(j * h for j, h in enumerate(hist)) == sum(sum(r) for r in requests)


def test_the_profile_check_holds_on_every_route_of_the_saved_runs(tmp_path: Path) -> None:
    seen = 0
    for name in ("demo", "numerics"):
        for row in load_results(DATA / f"{name}.jsonl").rows:
            if row.speculative.value == "off":
                continue
            profile = acceptance_profile(row, load=load_words(row)[0])
            assert profile is not None
            assert profile.acceptance_length == pytest.approx(1 + sum(profile.marginal), abs=0.01)
            path = write_acceptance_profile(profile, tmp_path / f"{name}-{seen}.json")
            assert read_acceptance_profile(path) == profile
            seen += 1
    assert seen == 8


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        ({"acceptance_length": 3.5}, "is not 1 \\+ Σ marginal"),
        ({"marginal": [0.5, 0.7, 0.3]}, "rises"),
        ({"conditional": [0.9, 0.9, 0.9]}, "conditional"),
        ({"format": "speculation_profile"}, "not a deepseekbench.acceptance_profile"),
        ({"depth": 4}, "positions"),
        ({"accepted_per_step": [1, 2]}, "buckets"),
    ],
)
def test_a_hand_broken_profile_is_refused_when_read_back(
    tmp_path: Path, edit: dict[str, object], words: str
) -> None:
    row = make_row(
        speculative="mtp", route_label="mtp", acceptance_length=2.5,
        acceptance_by_position=(0.7, 0.5, 0.3), accepted_per_step=(3, 2, 2, 3),
    )  # fmt: skip
    profile = acceptance_profile(row)
    assert profile is not None and profile.conditional == pytest.approx((0.7, 5 / 7, 0.6))
    path = write_acceptance_profile(profile, tmp_path / "p.json")
    data = orjson.loads(path.read_bytes()) | edit
    path.write_bytes(orjson.dumps(data))
    with pytest.raises(AcceptanceProfileError, match=words):
        read_acceptance_profile(path)


def test_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text("{marginal: oops")
    with pytest.raises(AcceptanceProfileError, match="not JSON"):
        read_acceptance_profile(path)


def test_a_row_that_breaks_the_check_is_refused_not_written() -> None:
    row = make_row(speculative="mtp", acceptance_length=3.9, acceptance_by_position=(0.7, 0.5, 0.3))
    with pytest.raises(AcceptanceProfileError, match="1 \\+ Σ marginal"):
        acceptance_profile(row)
    assert acceptance_profile(make_row(speculative="mtp", acceptance_length=2.0)) is None


@given(
    st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=8).map(
        lambda xs: tuple(sorted(xs, reverse=True))
    ),
    st.floats(0.02, 2.0),
)
def test_the_check_accepts_consistent_profiles_and_refuses_any_drift(
    marginal: tuple[float, ...], drift: float
) -> None:
    row = make_row(
        speculative="mtp", acceptance_length=1 + sum(marginal), acceptance_by_position=marginal
    )
    profile = acceptance_profile(row)
    assert profile is not None
    data = profile.model_dump() | {"acceptance_length": profile.acceptance_length + drift}
    with pytest.raises(ValueError, match="Σ marginal"):
        AcceptanceProfile.model_validate(data)
