"""The cache window: the server's side of a window (prefix cache, KV cache, queue).

Exposition texts are written in each engine's format with the family names its
docs and sources give (vLLM ``v1/metrics/loggers.py``: ``vllm:prefix_cache_queries``,
``vllm:prefix_cache_hits``, ``vllm:kv_cache_usage_perc``, ``vllm:num_requests_waiting``;
SGLang ``srt/metrics/collector.py``: ``sglang:cache_hit_rate``, ``sglang:token_usage``,
``sglang:num_queue_reqs``; llama.cpp ``tools/server``: ``llamacpp:kv_cache_usage_ratio``,
``llamacpp:requests_deferred``).
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from deepseekbench import (
    CacheWindow,
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    EngineRoute,
    LiveGate,
    MetricsSnapshot,
    Scorecard,
    Speculative,
    parse_metrics,
    run_plan,
)
from deepseekbench._engine._prefix_cache import PrefixCache
from deepseekbench._measure._cache_metrics import cache_window, while_sampling
from deepseekbench._report._server_side import server_side_notes
from deepseekbench._types._cache import combine_cache_windows
from tests._helpers import COSTS, plan_of


def _vllm(
    queries: float, hits: float, kv: float, waiting: Sequence[float], created: float = 1.0
) -> str:
    engines = "\n".join(
        f'vllm:num_requests_waiting{{engine="{i}",model_name="m"}} {w}'
        for i, w in enumerate(waiting)
    )
    return f"""\
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}
vllm:prefix_cache_queries_created{{engine="0",model_name="m"}} {created}
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}
vllm:prefix_cache_hits_created{{engine="0",model_name="m"}} {created}
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
{engines}
"""


def test_vllm_window_hit_rate_from_counters_and_peaks_over_every_scrape() -> None:
    before = parse_metrics(_vllm(1000, 200, 0.10, [0, 0]))
    during = [
        parse_metrics(_vllm(1500, 500, 0.70, [3, 4])),
        parse_metrics(_vllm(1800, 600, 0.40, [1, 0])),
    ]
    after = parse_metrics(_vllm(2000, 800, 0.20, [0, 0]))
    w = cache_window(before, after, during)
    assert w is not None and w.engine is Dialect.vllm
    assert (w.prefix_cache_queries, w.prefix_cache_hits) == (1000, 600)
    assert w.prefix_cache_hit_rate == pytest.approx(0.6)
    assert w.kv_cache_usage_peak == pytest.approx(0.70)
    assert w.queue_depth_peak == 7  # data-parallel engines' queues add up
    assert w.scrapes == 4
    # without the scrapes taken during the window the peaks are the edges' only
    edges = cache_window(before, after)
    assert edges is not None and edges.kv_cache_usage_peak == pytest.approx(0.20)


def test_a_restart_leaves_the_hit_rate_unknown_and_the_peaks_stand() -> None:
    before = parse_metrics(_vllm(1000, 200, 0.1, [0], created=1.0))
    after = parse_metrics(_vllm(50, 10, 0.3, [2], created=99.0))
    w = cache_window(before, after)
    assert w is not None and w.prefix_cache_hit_rate is None and w.prefix_cache_queries is None
    assert w.kv_cache_usage_peak == pytest.approx(0.3) and w.queue_depth_peak == 2


def test_a_failed_bracketing_scrape_gives_no_window() -> None:
    ok = parse_metrics(_vllm(1, 1, 0.1, [0]))
    failed = MetricsSnapshot(taken_ns=0, error="HTTP 500")
    assert cache_window(failed, ok) is None and cache_window(ok, failed) is None
    assert cache_window(parse_metrics("# nothing\n"), parse_metrics("# nothing\n")) is None


def test_older_vllm_names() -> None:
    text = """\
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{{model_name="m"}} {q}
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{{model_name="m"}} {h}
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{{model_name="m"}} {kv}
"""
    w = cache_window(
        parse_metrics(text.format(q=0, h=0, kv=0.0)),
        parse_metrics(text.format(q=400, h=100, kv=0.5)),
    )
    assert w is not None and w.source == "prometheus:vllm:gpu_prefix_cache_*"
    assert w.prefix_cache_hit_rate == pytest.approx(0.25) and w.kv_cache_usage_peak == 0.5


def _sglang(rate: float, usage: float, queue: float) -> str:
    # two TP ranks of one scheduler: copies of one figure (counted once)
    lines = ["# TYPE sglang:cache_hit_rate gauge", "# TYPE sglang:token_usage gauge"]
    for tp in (0, 1):
        lab = f'model_name="m",tp_rank="{tp}"'
        lines += [
            f"sglang:cache_hit_rate{{{lab}}} {rate}",
            f"sglang:token_usage{{{lab}}} {usage}",
            f"sglang:num_queue_reqs{{{lab}}} {queue}",
        ]
    return "\n".join(lines) + "\n"


def test_sglang_gauges() -> None:
    before, after = parse_metrics(_sglang(0.1, 0.05, 0)), parse_metrics(_sglang(0.81, 0.3, 5))
    w = cache_window(before, after, [parse_metrics(_sglang(0.5, 0.9, 12))])
    assert w is not None and w.engine is Dialect.sglang and w.prefix_cache_queries is None
    assert w.prefix_cache_hit_rate == pytest.approx(0.81)  # the gauge at the window's end
    assert w.kv_cache_usage_peak == pytest.approx(0.9)
    assert w.queue_depth_peak == 12  # TP copies once, not 24


def test_llamacpp_cached_over_cached_plus_processed_and_its_gauges() -> None:
    text = (
        "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total {p}\n"
        "# TYPE llamacpp:prompt_tokens_cached_total counter\n"
        "llamacpp:prompt_tokens_cached_total {c}\n"
        "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio {kv}\n"
        "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred {q}\n"
    )
    w = cache_window(
        parse_metrics(text.format(p=10, c=0, kv=0.1, q=0)),
        parse_metrics(text.format(p=35, c=75, kv=0.4, q=3)),
    )
    assert w is not None and w.engine is Dialect.llamacpp
    assert (w.prefix_cache_queries, w.prefix_cache_hits) == (100, 75)
    assert w.prefix_cache_hit_rate == pytest.approx(0.75)
    assert (w.kv_cache_usage_peak, w.queue_depth_peak) == (0.4, 3)


@given(
    q0=st.integers(0, 10**6),
    h0=st.integers(0, 10**6),
    dq=st.integers(0, 10**6),
    dh=st.integers(0, 10**6),
)
@example(q0=0, h0=0, dq=0, dh=0)
@example(q0=5, h0=0, dq=10, dh=10)
@settings(deadline=None)  # pure arithmetic; a busy CI machine's pauses are not a failure
def test_hit_rate_is_the_window_delta(q0: int, h0: int, dq: int, dh: int) -> None:
    h0 = min(h0, q0)
    dh = min(dh, dq)
    w = cache_window(
        parse_metrics(_vllm(q0, h0, 0, [0])), parse_metrics(_vllm(q0 + dq, h0 + dh, 0, [0]))
    )
    assert w is not None
    assert w.prefix_cache_hit_rate == (None if dq == 0 else pytest.approx(dh / dq))


def test_combined_windows_sum_counts_and_keep_the_largest_peaks() -> None:
    a = CacheWindow(
        engine=Dialect.vllm, source="s", prefix_cache_queries=100, prefix_cache_hits=90,
        prefix_cache_hit_rate=0.9, kv_cache_usage_peak=0.2, queue_depth_peak=1, scrapes=2,
    )  # fmt: skip
    b = a.model_copy(
        update={"prefix_cache_queries": 300, "prefix_cache_hits": 30, "prefix_cache_hit_rate": 0.1,
                "kv_cache_usage_peak": 0.6, "queue_depth_peak": 0}
    )  # fmt: skip
    c = combine_cache_windows([a, b])
    assert c is not None and c.prefix_cache_hit_rate == pytest.approx(120 / 400)
    assert (c.kv_cache_usage_peak, c.queue_depth_peak, c.scrapes) == (0.6, 1, 4)
    assert combine_cache_windows([]) is None


def test_prefix_cache_hits_only_whole_leading_blocks() -> None:
    cache = PrefixCache(block_tokens=4, capacity_blocks=8)
    assert cache.lookup("abcdefghij") == 0
    assert cache.lookup("abcdefghXY") == 8  # both full blocks of the first prompt
    assert cache.lookup("abcdXXghij") == 4  # the chain breaks at the second block
    assert cache.lookup("Xbcdefghij") == 0
    off = PrefixCache(block_tokens=4, enabled=False)
    off.lookup("abcdefgh")
    assert off.lookup("abcdefgh") == 0


class _Line:
    def __init__(
        self, route: str, spec: Speculative, rate: float | None, queue: float | None
    ) -> None:
        self.route, self.speculative = route, spec
        self.cell, self.load = "1k/256/non_think", "c=4"
        self.baseline = None if spec is Speculative.off else "off"
        self.prefix_cache_hit_rate, self.queue_depth_peak = rate, queue


@pytest.mark.parametrize(
    ("off", "mtp", "expect"),
    [
        ((0.81, 0.0), (0.0, 0.0), ["prefix-cache hits 0.81 → 0.00"]),
        ((0.81, 0.0), (0.70, 1.0), []),
        ((0.5, 0.0), (0.5, 9.0), ["queue depth peak 0 → 9 requests"]),
        ((0.5, 10.0), (0.5, 12.0), []),
        ((None, None), (0.0, 9.0), []),
    ],
)
def test_server_side_notes_flag_sharp_differences_only(
    off: tuple[float | None, float | None],
    mtp: tuple[float | None, float | None],
    expect: list[str],
) -> None:
    notes = server_side_notes(
        [_Line("off", Speculative.off, *off), _Line("mtp", Speculative.mtp, *mtp)]
    )
    assert len(notes) == len(expect)
    for note, text in zip(notes, expect, strict=True):
        assert note.startswith("! mtp @ 1k/256/non_think (c=4): ") and text in note


def test_sampling_reraises_the_body_error_unchanged_and_scrapes_meanwhile() -> None:
    async def main() -> tuple[list[MetricsSnapshot], list[MetricsSnapshot]]:
        gate = LiveGate()
        async with EmbeddedEngine(EngineConfig()) as eng, gate.client() as client:
            route = EngineRoute(base_url=eng.base_url, model="deepseekbench-ref")
            opening = parse_metrics(eng.metrics_text())

            async def boom() -> None:
                raise KeyError("body")

            with pytest.raises(KeyError):
                await while_sampling(boom, route, gate=gate, client=client, opening=opening)

            async def slow() -> None:
                await anyio.sleep(1.5)

            got = await while_sampling(
                slow, route, gate=gate, client=client, opening=opening, interval_s=0.1
            )
            # an opening scrape without a KV or queue gauge: nothing is sampled
            none = await while_sampling(
                slow, route, gate=gate, client=client, opening=parse_metrics(""), interval_s=0.1
            )
            return got, none

    samples, none = anyio.run(main)
    assert len(samples) >= 2 and all(s.error is None for s in samples)
    assert none == []


def _run(disable: bool) -> tuple[dict[str, float | None], str]:
    async def main() -> object:
        async with (
            EmbeddedEngine(EngineConfig(cost=COSTS)) as off,
            EmbeddedEngine(
                EngineConfig(
                    speculative=Speculative.mtp,
                    cost=COSTS,
                    speculation_disables_prefix_cache=disable,
                )
            ) as mtp,
        ):
            plan = plan_of(
                [
                    ("off", "off", off.base_url, Dialect.vllm),
                    ("mtp", "mtp", mtp.base_url, Dialect.vllm),
                ],
                {
                    "requests_per_cell": 4,
                    "warmup_per_cell": 0,
                    "arrival": {"mode": "concurrency", "concurrency": 2},
                    "parity": {"tasks": "none", "prompts": ["Count from 5 to 12."]},
                    # no calibration pass: it would warm off's cache alone (docs/plan.md)
                    "workload": {"output_length": "natural"},
                },
                {},
            )
            return await run_plan(plan, gate=LiveGate(), results_path=None)

    result = anyio.run(main)
    rows = {r.route_label or "": r.prefix_cache_hit_rate for r in result.rows}  # type: ignore[attr-defined]
    for r in result.rows:  # type: ignore[attr-defined]
        assert r.kv_cache_usage_peak is not None and 0 < r.kv_cache_usage_peak <= 1
        assert r.queue_depth_peak is not None
    return rows, Scorecard.from_run(result).to_text()  # type: ignore[arg-type]


def test_embedded_engine_rows_carry_the_hit_rate_and_the_scorecard_flags_a_disabled_cache() -> None:
    rates, text = _run(disable=True)
    assert rates["off"] is not None and rates["off"] > 0.2
    assert rates["mtp"] == 0.0
    assert f"prefix-cache hits {rates['off']:.2f} → 0.00" in text
    rates, text = _run(disable=False)
    assert rates["mtp"] is not None and rates["mtp"] > 0.2
    assert "prefix-cache hits" not in text
