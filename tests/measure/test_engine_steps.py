"""The engines' own step counters over a ``/metrics`` window: engine steps and the mean
sequences decoded per step (the batch the engine ran), per engine, on recorded scrape pairs
under ``tests/data/metrics_steps`` (``before`` / ``after`` / ``model`` / ``expect``, the
format of the shared metrics cases), and their combination over a row's windows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deepseekbench import CacheWindow, Dialect, parse_metrics
from deepseekbench._measure._cache_metrics import cache_window
from deepseekbench._types._cache import combine_cache_windows

CASES = Path(__file__).resolve().parent.parent / "data" / "metrics_steps"


def _case(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CASES / name).read_text())
    return data


def _window(case: dict[str, Any], **swap: str) -> CacheWindow | None:
    before, after = case["before"], case["after"]
    for old, new in swap.items():
        before, after = before.replace(old, new), after.replace(old, new)
    model = case["model"]
    return cache_window(
        parse_metrics(before, model_name=model), parse_metrics(after, model_name=model)
    )


@pytest.mark.parametrize("name", sorted(p.name for p in CASES.glob("*.json")))
def test_each_recorded_pair_gives_the_expected_steps_and_batch(name: str) -> None:
    case = _case(name)
    w = _window(case)
    assert w is not None, case["why"]
    expect = case["expect"]
    assert w.engine_steps == expect["engine_steps"], case["why"]
    if expect["engine_batch_mean"] is None:
        assert w.engine_batch_mean is None, case["why"]
    else:
        assert w.engine_batch_mean == pytest.approx(expect["engine_batch_mean"]), case["why"]
    assert (w.steps_source is None) == (w.engine_steps is None)


def test_vllm_steps_name_the_histogram_and_subtract_prefill_and_drafts() -> None:
    w = _window(_case("01-vllm-iteration-tokens.json"))
    assert w is not None and w.engine is Dialect.vllm
    assert w.steps_source is not None and "vllm:iteration_tokens_total" in w.steps_source
    # the tokens per step (26.0) are not the batch: prefill and drafts are taken out
    assert w.engine_batch_mean != pytest.approx(26.0)


def test_vllm_without_the_prompt_counter_counts_steps_but_gives_no_batch() -> None:
    # an exposition without vllm:prompt_tokens: the prefill share is unknown, no estimate
    w = _window(_case("01-vllm-iteration-tokens.json"), **{"vllm:prompt_tokens": "vllm:other"})
    assert w is not None
    assert (w.engine_steps, w.engine_batch_mean) == (100, None)


def test_vllm_without_the_histogram_has_no_steps() -> None:
    w = _window(
        _case("01-vllm-iteration-tokens.json"),
        **{"vllm:iteration_tokens_total": "vllm:other_histogram"},
    )
    assert w is not None and w.prefix_cache_hit_rate is not None  # the cache window stands
    assert (w.engine_steps, w.engine_batch_mean, w.steps_source) == (None, None, None)


def test_llamacpp_busy_slots_gauge_typed_as_gauge_reads_the_same() -> None:
    case = _case("03-llamacpp-n-decode-busy-slots.json")
    typed = "# TYPE llamacpp:n_busy_slots_per_decode "
    w = _window(case, **{typed + "counter": typed + "gauge"})
    assert w is not None and w.engine is Dialect.llamacpp
    assert w.engine_steps == 200
    assert w.engine_batch_mean == pytest.approx(4.0)
    assert w.steps_source is not None and "llamacpp:n_busy_slots_per_decode" in w.steps_source


def test_llamacpp_decode_counter_that_went_down_gives_no_steps() -> None:
    case = _case("03-llamacpp-n-decode-busy-slots.json")
    swapped = dict(case, before=case["after"], after=case["before"])  # a reset, no markers
    w = _window(swapped)
    assert w is not None
    assert (w.engine_steps, w.engine_batch_mean) == (None, None)


def _w(steps: int | None, batch: float | None) -> CacheWindow:
    return CacheWindow(
        engine=Dialect.vllm,
        source="s",
        engine_steps=steps,
        engine_batch_mean=batch,
        steps_source="prometheus:x" if steps is not None else None,
    )


def test_a_rows_windows_sum_steps_and_weight_the_batch_by_steps() -> None:
    w = combine_cache_windows([_w(100, 2.0), _w(300, 6.0)])
    assert w is not None
    assert w.engine_steps == 400
    assert w.engine_batch_mean == pytest.approx((200 + 1800) / 400)  # 5.0, not the mean 4.0
    assert w.steps_source == "prometheus:x"


def test_a_row_with_a_window_lacking_steps_has_none() -> None:
    w = combine_cache_windows([_w(100, 2.0), _w(None, None)])
    assert w is not None
    assert (w.engine_steps, w.engine_batch_mean, w.steps_source) == (None, None, None)
    partial = combine_cache_windows([_w(100, 2.0), _w(50, None)])
    assert partial is not None and (partial.engine_steps, partial.engine_batch_mean) == (150, None)


def test_a_row_takes_steps_from_its_own_loads_windows_only() -> None:
    from types import SimpleNamespace
    from typing import cast

    from deepseekbench._analysis._rows import _cache_fields
    from deepseekbench._store._results import ResultsState
    from deepseekbench._types._load import LoadPoint

    load = cast(LoadPoint, SimpleNamespace(key="closed:c=8"))
    own: dict[tuple[str, str, str | None, int], CacheWindow] = {
        ("mtp", "c0", "closed:c=8", 0): _w(100, 4.0),
        ("mtp", "c0", "closed:c=8", 1): _w(50, 1.0),
    }
    state = cast(ResultsState, SimpleNamespace(cache=own))
    fields = _cache_fields(state, "mtp", "c0", load)
    assert fields["engine_steps"] == 150 and fields["engine_batch_mean"] == pytest.approx(3.0)
    # a window of no one load would be counted in every load's row: no steps at all
    shared = {**own, ("mtp", "c0", None, 2): _w(10, 2.0)}  # type: dict[tuple[str, str, str | None, int], CacheWindow]
    fields = _cache_fields(cast(ResultsState, SimpleNamespace(cache=shared)), "mtp", "c0", load)
    assert "engine_steps" not in fields and "engine_batch_mean" not in fields


def _with_cached(exposition: str, cached: float) -> str:
    """The exposition with vLLM's counter of cached prompt tokens (vLLM 0.32's
    ``vllm:prompt_tokens_cached``: the prompt tokens found cached, not computed)."""
    return exposition + (
        "# HELP vllm:prompt_tokens_cached_total Number of cached prompt tokens.\n"
        "# TYPE vllm:prompt_tokens_cached_total counter\n"
        f'vllm:prompt_tokens_cached_total{{engine="0",model_name="dsv4-test"}} {cached}\n'
    )


def test_vllm_cached_prompt_tokens_are_not_in_the_iteration_tokens() -> None:
    # vLLM observes computed prompt tokens + generated tokens per step, while
    # vllm:prompt_tokens counts every prompt token (vllm/v1/metrics/loggers.py): of the
    # window's 800 prompt tokens 300 were cached, so the 2200 iteration tokens hold 500
    # computed prompt tokens, 1700 generated, less 900 accepted: 800 sequence-steps
    case = _case("01-vllm-iteration-tokens.json")
    model = case["model"]
    w = cache_window(
        parse_metrics(_with_cached(case["before"], 1000.0), model_name=model),
        parse_metrics(_with_cached(case["after"], 1300.0), model_name=model),
    )
    assert w is not None
    assert w.engine_steps == 100
    assert w.engine_batch_mean == pytest.approx(8.0)
