"""``Row``: one cell of the benchmark grid for one speculative value.

A row is keyed by :data:`~deepseekbench.KEY_AXES` and carries the cell's
medians, their dispersion, acceptance and quality parity. Rows are frozen,
reject unknown fields, and round-trip exactly through JSONL (orjson).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from deepseekbench._errors import RowFormatError
from deepseekbench._types._axes import (
    AcceptanceScope,
    AcceptanceScopeName,
    Arrival,
    ArrivalName,
    ContextBucket,
    ContextBucketName,
    Hosting,
    HostingName,
    OutputTarget,
    OutputTargetName,
    QualityParity,
    QualityParityName,
    ReasoningMode,
    ReasoningModeName,
    Speculative,
    SpeculativeName,
)
from deepseekbench._types._clock import ServerClockFault, ServerClockFaultName
from deepseekbench._types._identity import RouteIdentity, RouteIdentityName

SCHEMA_VERSION = 2
"""Version of the ``Row`` JSON contract; bumped on any incompatible change.

2: the load joined the key (``concurrency``, ``request_rate_per_s``,
``arrival``), plus window throughput, goodput and SLO attainment. Version-1
rows read with those fields ``None`` and never pair with rows of known load."""

REQUIRED_FIELDS: tuple[str, ...] = (
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "output_toks_per_s",
    "n_requests",
)
"""Fields a complete row carries: the four timing medians (not ``None``) and
``n_requests >= 1``. Acceptance fields are not required: an ``off`` row has none."""

_MODEL_CONFIG = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Percentiles(BaseModel):
    """Percentiles of one metric over a cell's requests (numpy's linear interpolation).

    Same unit as the metric they describe; ``None`` where no request gave a value.

    Raises:
        pydantic.ValidationError: a non-finite value or an unknown field.
    """

    model_config = _MODEL_CONFIG

    p50: float | None = Field(default=None, description="50th percentile (median), metric's unit")
    p90: float | None = Field(default=None, description="90th percentile, metric's unit")
    p99: float | None = Field(default=None, description="99th percentile, metric's unit")


class Dispersion(BaseModel):
    """p50/p90/p99 per timing field, so a reader can judge noise.

    Units: ``ttft_ms``, ``e2e_ms``, ``itl_ms`` in ms; ``tpot_ms`` in ms per output
    token; ``output_toks_per_s`` in tokens/s (each field's ``description``).

    Raises:
        pydantic.ValidationError: a non-finite value or an unknown field.
    """

    model_config = _MODEL_CONFIG

    ttft_ms: Percentiles | None = Field(default=None, description="TTFT percentiles, ms")
    tpot_ms: Percentiles | None = Field(default=None, description="TPOT percentiles, ms/token")
    e2e_ms: Percentiles | None = Field(default=None, description="E2E latency percentiles, ms")
    itl_ms: Percentiles | None = Field(
        default=None, description="inter-chunk latency percentiles over all chunks, ms"
    )
    output_toks_per_s: Percentiles | None = Field(
        default=None, description="per-request output throughput percentiles, tokens/s"
    )


@dataclass(frozen=True, slots=True)
class PerRequestFigure:
    """One per-request figure whose p50/p90/p99 a row reports in :class:`Dispersion`.

    ``name`` is both the :class:`~deepseekbench.StreamMeasurement` attribute the
    figure is read from and the :class:`Dispersion` field it fills; ``per_chunk``:
    the attribute is a sequence (one value per chunk, as ``itl_ms``) pooled over the
    row's requests; ``head`` and ``decimals``: its column in the scorecard's latency
    table (``None``: not shown there; JSON carries every :class:`Dispersion` field);
    ``csv``: the percentiles (``"p50"``, ``"p90"``, ``"p99"``) given their own flat
    column (:meth:`column`) in CSV and the pandas view.
    """

    name: str
    head: str | None
    decimals: int
    per_chunk: bool = False
    csv: tuple[str, ...] = ()

    def column(self, q: str) -> str:
        """The flat (CSV, pandas) column of percentile ``q``: ``ttft_ms`` -> ``ttft_p90_ms``."""
        stem, ms = (self.name[:-3], "_ms") if self.name.endswith("_ms") else (self.name, "")
        return f"{stem}_{q}{ms}"


PER_REQUEST_FIGURES: tuple[PerRequestFigure, ...] = (
    PerRequestFigure("ttft_ms", "TTFT ms", 1, csv=("p90", "p99")),
    PerRequestFigure("tpot_ms", "TPOT ms", 2, csv=("p90", "p99")),
    PerRequestFigure("itl_ms", "ITL ms", 2, per_chunk=True, csv=("p50", "p90", "p99")),
    PerRequestFigure("e2e_ms", "E2E ms", 1, csv=("p90", "p99")),
    PerRequestFigure("output_toks_per_s", None, 1),
)
"""The per-request figures, in the latency table's column order: the one list the
analysis (:class:`Dispersion` of each row) and the scorecard (its latency table) walk.
Adding a figure is: compute it in the stream accumulator, add it to
:class:`~deepseekbench.StreamMeasurement`, add a :class:`Dispersion` field and an
entry here."""


class SliceStats(BaseModel):
    """One slice of a row's requests — a dataset category or a conversation turn.

    Medians over the slice's successful requests (TTFT, TPOT, E2E in ms; TPOT
    in ms per output token; throughput in tokens/s). Acceptance is summed over
    the slice's per-request figures (accepted / drafted; 1 + accepted / verify
    steps), as AIPerf's spec-decode report and Spec-Bench give per category;
    ``None`` where the engine reported no per-request acceptance (a server-wide
    counter delta cannot be split by slice).

    Raises:
        pydantic.ValidationError: a ratio outside 0..1, an acceptance length
            below 1, a negative time or count, a non-finite float, or an unknown field.
    """

    model_config = _MODEL_CONFIG

    name: str = Field(min_length=1, description="category name, or 'turn <n>' (1-based)")
    n_requests: int = Field(default=0, ge=0, description="measured requests in the slice")
    n_errors: int = Field(default=0, ge=0, description="of which ended in error")
    ttft_ms: float | None = Field(default=None, ge=0, description="median TTFT, ms")
    tpot_ms: float | None = Field(default=None, ge=0, description="median TPOT, ms/token")
    e2e_ms: float | None = Field(default=None, ge=0, description="median E2E, ms")
    output_toks_per_s: float | None = Field(
        default=None, ge=0, description="median output throughput, tokens/s"
    )
    accepted_token_ratio: float | None = Field(
        default=None, ge=0, le=1, description="accepted / drafted tokens over the slice"
    )
    acceptance_length: float | None = Field(
        default=None, ge=1, description="1 + accepted / verify steps, tokens per step"
    )
    draft_tokens: int | None = Field(default=None, ge=0, description="drafted tokens, tokens")
    accepted_tokens: int | None = Field(default=None, ge=0, description="accepted tokens, tokens")
    tokens_estimated: bool = Field(default=False, description="any count estimated")
    output_short: bool = Field(default=False, description="any output below max_tokens")


class Row(BaseModel):
    """One benchmark cell for one speculative value.

    Keys (:data:`~deepseekbench.KEY_AXES`): ``model_id``, ``provider_route``,
    ``engine_route``, ``hosting``, ``context_bucket``, ``output_target``,
    ``reasoning_mode``, ``stream``, ``speculative``. Scalar timing fields are
    medians over the cell's successful requests. ``route_label`` names the
    endpoint when two routes share a key (for example a correct and a mis-tuned
    ``mtp`` server); it is not a key axis.

    Raises:
        pydantic.ValidationError: an unknown field, an unknown axis value (the
            message lists the allowed ones), a ratio outside 0..1, an acceptance
            length below 1, a negative time, a non-finite float, a
            ``schema_version`` outside 1..:data:`SCHEMA_VERSION`, or
            ``n_errors > n_requests``.
    """

    model_config = _MODEL_CONFIG

    schema_version: int = Field(default=SCHEMA_VERSION, description="Row contract version")
    # --- key axes ---------------------------------------------------------
    model_id: str = Field(min_length=1, description="model served, as the engine names it")
    provider_route: str = Field(
        min_length=1, description="who serves it, e.g. 'local', 'deepseek-api'"
    )
    engine_route: str = Field(
        min_length=1, description="engine family, e.g. 'vllm', 'sglang', 'llamacpp', 'embedded'"
    )
    hosting: Hosting = Field(description="where the engine runs")
    context_bucket: ContextBucket = Field(description="prompt-length bucket, tokens")
    output_target: OutputTarget = Field(description="request max_tokens, tokens")
    reasoning_mode: ReasoningMode = Field(description="DeepSeek V4 reasoning-effort mode")
    stream: bool = Field(description="whether responses were streamed (SSE)")
    speculative: Speculative = Field(description="speculative method; 'off' is the baseline")
    # --- identity beyond the key -----------------------------------------
    route_label: str | None = Field(
        default=None, description="endpoint name when routes share a key (not a key axis)"
    )
    # --- measurements (medians) ------------------------------------------
    ttft_ms: float | None = Field(default=None, ge=0, description="median TTFT, ms")
    tpot_ms: float | None = Field(
        default=None, ge=0, description="median TPOT = (E2E - TTFT)/(completion_tokens - 1), ms"
    )
    e2e_ms: float | None = Field(default=None, ge=0, description="median E2E latency, ms")
    output_toks_per_s: float | None = Field(
        default=None, ge=0, description="median completion_tokens / E2E, tokens/s"
    )
    accepted_token_ratio: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="accepted draft tokens / drafted tokens over the cell (None = unknown)",
    )
    acceptance_length: float | None = Field(
        default=None,
        ge=1,
        description="1 + accepted draft tokens / verify steps, tokens per step (None = unknown)",
    )
    acceptance_scope: AcceptanceScope | None = Field(
        default=None, description="per_request or server_wide (Prometheus delta); None = unknown"
    )
    draft_tokens: int | None = Field(
        default=None, ge=0, description="drafted tokens summed, tokens"
    )
    accepted_tokens: int | None = Field(
        default=None, ge=0, description="accepted draft tokens summed, tokens"
    )
    tokens_estimated: bool = Field(
        default=False, description="True when any request's completion_tokens was estimated"
    )
    # --- quality ----------------------------------------------------------
    quality_parity: QualityParity = Field(
        default=QualityParity.unknown, description="parity with plain decoding"
    )
    parity_detail: str | None = Field(
        default=None, description="why parity is what it is, e.g. the first divergence"
    )
    # --- counts and dispersion -------------------------------------------
    n_requests: int = Field(default=0, ge=0, description="measured requests (warm-up excluded)")
    n_errors: int = Field(default=0, ge=0, description="measured requests that ended in error")
    dispersion: Dispersion = Field(
        default_factory=Dispersion, description="p50/p90/p99 per timing field"
    )
    # --- speculation detail and stream health ------------------------------
    acceptance_by_position: tuple[Annotated[float, Field(ge=0, le=1)], ...] | None = Field(
        default=None,
        description="per draft position k = 1, 2, ...: fraction of verify steps whose k-th "
        "draft token was accepted, ratio, position 1 first (None = not reported)",
    )
    spec_tokens: int | None = Field(
        default=None, ge=1, description="speculative depth: draft tokens per verify step"
    )
    acceptance_source: str | None = Field(
        default=None,
        description="where acceptance was read, e.g. 'sglext.spec_tokens_details', "
        "'metrics.speculative_decoding', 'prometheus:vllm:spec_decode_*'",
    )
    # per-request acceptance length percentiles, tokens per verify step
    acceptance_length_p10: float | None = Field(default=None, ge=1, description="p10, tokens")
    acceptance_length_p50: float | None = Field(default=None, ge=1, description="p50, tokens")
    acceptance_length_p90: float | None = Field(default=None, ge=1, description="p90, tokens")
    accepted_per_step: tuple[Annotated[int, Field(ge=0)], ...] | None = Field(
        default=None,
        description="verify steps by accepted draft tokens j = 0 .. depth, pooled over the "
        "row's requests (None unless every request reports per-step figures)",
    )
    acceptance_split: Literal["unknown"] | None = Field(
        default=None,
        description="acceptance split between reasoning and answer tokens: 'unknown' where "
        "the engine reports per-request counts only as a total (every engine read today)",
    )
    server_ttft_ms: float | None = Field(
        default=None, ge=0, description="median of the engine's own TTFT, ms (vLLM metrics)"
    )
    server_queue_ms: float | None = Field(
        default=None, ge=0, description="median of the engine's own queueing time, ms"
    )
    sse_ignored_lines: int = Field(
        default=0,
        ge=0,
        description="non-empty SSE lines not read as the answer, summed over the cell's "
        "requests (fields the event-stream rules ignore, e.g. a padded ' data :'; events of "
        "another type; lines after [DONE]); > 0 means text may be missing",
    )
    # --- client self-check (docs/measurement.md, "Fidelity") ----------------
    client_saturated: bool = Field(
        default=False,
        description="a measured request saw the client's own event loop lag past the plan's "
        "client_lag_threshold_ms: its times may hold client delay, not server latency",
    )
    client_pool_wait_ms: float | None = Field(
        default=None,
        ge=0,
        description="longest wait of a measured request for a pooled connection, ms "
        "(kept out of TTFT); None when the transport did not report it",
    )
    # --- load (key axes since schema 2) -------------------------------------
    concurrency: int | None = Field(
        default=None,
        ge=1,
        description="closed-loop streams, or an open loop's in-flight cap, requests "
        "(None = unknown: a schema-1 row)",
    )
    request_rate_per_s: float | None = Field(
        default=None, gt=0, description="open-loop offered rate, requests/s (None = closed loop)"
    )
    arrival: Arrival | None = Field(
        default=None, description="closed, poisson or gamma (None = unknown: a schema-1 row)"
    )
    # --- window throughput and goodput ----------------------------------------
    output_throughput_toks_per_s: float | None = Field(
        default=None,
        ge=0,
        description="output tokens of the successful measured requests / measurement window "
        "(first send to last token, summed over rounds), tokens/s",
    )
    request_throughput_per_s: float | None = Field(
        default=None,
        ge=0,
        description="successful measured requests / measurement window, requests/s",
    )
    goodput_req_per_s: float | None = Field(
        default=None,
        ge=0,
        description="measured requests meeting every [slo] limit / measurement window, "
        "requests/s (None = no [slo])",
    )
    slo_attainment: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="fraction of measured requests meeting every [slo] limit (None = no [slo])",
    )
    rounds: int | None = Field(
        default=None, ge=1, description="measurement rounds the row's requests ran in"
    )
    schedule_lagged: bool = Field(
        default=False,
        description="True when the open-loop schedule lagged badly (p90 queue_ms above the "
        "plan's arrival.max_lag_ms): the client, not the server, may have limited the load",
    )
    ramp_ms: float | None = Field(
        default=None,
        ge=0,
        description="closed loop: its streams' first sends were spread over this time, ms "
        "(plan arrival.ramp_ms; 0 = all at once); None for an open loop or an older row",
    )
    # --- workload breakdown ----------------------------------------------
    output_short: bool = Field(
        default=False,
        description="True when a successful request's output (tokens) fell short of the "
        "request's max_tokens: the row under-measures decode at its output target",
    )
    n_output_short: int = Field(
        default=0, ge=0, description="successful requests whose output fell short of max_tokens"
    )
    output_tokens: Percentiles | None = Field(
        default=None, description="per-request output length percentiles, tokens"
    )
    prompt_tokens: Percentiles | None = Field(
        default=None, description="per-request prompt length percentiles (usage), tokens"
    )
    categories: tuple[SliceStats, ...] = Field(
        default=(), description="per dataset category: medians and acceptance"
    )
    turns: tuple[SliceStats, ...] = Field(
        default=(), description="per conversation turn ('turn 1', 'turn 2', ...)"
    )
    # --- client clock health (docs/measurement.md, "Fidelity") -----
    client_stall_ms: float | None = Field(
        default=None,
        ge=0,
        description="longest stretch a measured request's client event loop did not run, ms "
        "(a healthy loop: about the self-check period); None without a self-check",
    )
    client_cpu_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="median over measured requests of the client event-loop thread's CPU "
        "time per wall second (0..1)",
    )
    client_core_wait_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="median over measured requests of the share of wall time the client's "
        "event-loop thread waited for a CPU core (0..1; Linux schedstat; None elsewhere)",
    )
    client_cores: int | None = Field(
        default=None, ge=1, description="CPU cores the client could run on (affinity mask)"
    )
    client_load_1m: float | None = Field(
        default=None,
        ge=0,
        description="median 1-minute load average of the client host at the end of the "
        "measured requests (runnable tasks)",
    )
    client_workers: int | None = Field(
        default=None,
        ge=1,
        description="client workers (processes or Ray actors) that sent the row's measured "
        "requests, the most over its rounds; None: this process (no worker pool)",
    )
    client_workers_basis: str | None = Field(
        default=None,
        description="workers = 'auto': why that many, e.g. 'auto: 2 of 2 cores, warm-up "
        "client CPU share 0.93 (...)'; the same for every route at a load point",
    )
    n_client_starved: int = Field(
        default=0,
        ge=0,
        description="measured requests whose token chunks the starved client read in bursts "
        "(their ITL/TPOT hold client delay)",
    )
    server_tpot_ms: float | None = Field(
        default=None,
        ge=0,
        description="median of the engine's own per-request mean inter-token latency, ms "
        "(vLLM metrics.mean_itl_ms, llama.cpp timings.predicted_per_token_ms); excludes "
        "network and client",
    )
    server_clock_faults: tuple[ServerClockFault, ...] = Field(
        default=(),
        description="why the engine's own figures are no witness of its requests' speed: "
        "server_clock_not_positive, server_clock_contradicts_client (a decode time shorter "
        "than the client's first-to-last-token window beyond 25 % + 50 ms, or a TTFT longer "
        "than the client's), server_clock_count_mismatch (its token count is not usage's); "
        "a clock='server' verdict over any is refused",
    )
    client_starved: bool = Field(
        default=False,
        description="more than a quarter of the measured requests were client-starved: the "
        "row's TPOT is not used for a speedup (refusal client_starved)",
    )
    # the cache window: the server's side of the row's /metrics windows
    prefix_cache_hit_rate: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="prefix-cache hits / prompt tokens looked up over the row's windows, 0..1 "
        "(vLLM prefix_cache_hits/queries; SGLang cache_hit_rate gauge)",
    )
    kv_cache_usage_peak: float | None = Field(
        default=None, ge=0, description="largest KV-cache usage seen in the windows, fraction 0..1"
    )
    queue_depth_peak: float | None = Field(
        default=None, ge=0, description="largest number of waiting requests seen, requests"
    )
    engine_steps: int | None = Field(
        default=None, ge=0, description="engine steps (iterations) in the row's windows, steps"
    )
    engine_batch_mean: float | None = Field(
        default=None,
        gt=0,
        description="mean sequences decoded per engine step, sequences (the batch the engine "
        "ran; None where not exported: docs/engines.md, Engine steps)",
    )
    engine_steps_source: str | None = Field(
        default=None, description="the engine's families the two step figures were read from"
    )
    trace: str | None = Field(
        default=None, description="replayed trace file (workload.trace.path), if any"
    )
    trace_speedup: float | None = Field(
        default=None, gt=0, description="trace arrival-time factor (2 = twice as fast)"
    )
    # route identity and launched engines
    route_identity: RouteIdentity | None = Field(
        default=None,
        description="whether the route serves what its label says: ok, flagged (no "
        "acceptance reported anywhere), refused (no speedup credited); None = not checked",
    )
    route_identity_detail: str | None = Field(
        default=None, description="one line naming both routes when flagged or refused"
    )
    engine_command: tuple[str, ...] | None = Field(
        default=None, description="exact argv of the launched engine server (None = not launched)"
    )
    engine_version: str | None = Field(
        default=None, description="launched engine's version (from the server, else the package)"
    )
    spec_config: str | None = Field(
        default=None,
        description="launched route's speculative config as sorted-key JSON "
        "(method, depth, draft model, engine keys); None = not launched",
    )
    # --- parity within the engine's own numerics -------------------
    parity_basis: Literal["bit_exact", "within_noise", "distribution"] = Field(
        default="bit_exact",
        description="the rule quality_parity was judged by (plan key parity.exact): "
        "'bit_exact' (identical outputs) or 'within_noise' (near-ties within off's own noise); "
        "'distribution' above temperature 0 (the distribution witness)",
    )
    divergences_near_tie: int | None = Field(
        default=None,
        ge=0,
        description="divergences from off where the route's token was off's runner-up at a "
        "top-1 margin <= tau_nats (None = no margins obtained)",
    )
    divergences_decisive: int | None = Field(
        default=None,
        ge=0,
        description="divergences at a margin above tau_nats, or at a token outside off's top-k",
    )
    divergences_unexplained: int | None = Field(
        default=None, ge=0, description="divergences without a margin (no logprobs obtainable)"
    )
    noise_floor: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="off's self-divergence rate at this load (parity control and rounds), "
        "fraction of comparisons",
    )
    tau_nats: float | None = Field(
        default=None, ge=0, description="near-tie bound the divergences were classified by, nats"
    )
    tau_source: Literal["plan", "measured_jitter", "off_self_flips", "default"] | None = Field(
        default=None,
        description="where tau_nats came from: the plan, a high quantile of off's measured "
        "decode-vs-one-pass jitter, off's largest self-flip (old results), or the default",
    )
    tau_quantile: float | None = Field(
        default=None, ge=0, le=1, description="the jitter quantile a measured tau_nats is"
    )
    tau_sample: int | None = Field(
        default=None, ge=0, description="nonzero jitter samples tau_nats was measured from"
    )
    near_tie_opportunities: int | None = Field(
        default=None,
        ge=0,
        description="positions of off's profiled outputs (before each fork) whose top-1 "
        "margin <= tau_nats: where a correct engine may flip",
    )
    outputs_with_opportunity: int | None = Field(
        default=None, ge=0, description="profiled off outputs holding a near-tie opportunity"
    )
    outputs_profiled: int | None = Field(
        default=None, ge=0, description="off outputs whose margins were read over the whole output"
    )
    divergences_shown_one_pass: int | None = Field(
        default=None,
        ge=0,
        description="divergences whose token is off's own top-1 when off scores its output "
        "in one pass (the verify shape, shown directly)",
    )
    divergences_charged_to_off: int | None = Field(
        default=None,
        ge=0,
        description="divergences where off's measured output flipped (its alone follow-up "
        "reproduced the route's text): charged to off, not to the route",
    )
    parity_power_bound: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="upper confidence bound (Clopper-Pearson, parity.alpha) on the "
        "decisive-divergence rate per compared output the sample establishes",
    )
    parity_lossy_rate: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="the bound a verified within-noise row must reach (parity.lossy_rate)",
    )
    first_divergence_margin_nats: float | None = Field(
        default=None,
        ge=0,
        description="off's top-1 minus top-2 logprob at the first divergence, nats",
    )
    divergence_note: str | None = Field(
        default=None,
        description="one line: the divergences explained, or what would make the row verifiable",
    )
    engine_deterministic: bool | None = Field(
        default=None,
        description="the route's engine deterministic mode: True on, False off, None unknown "
        "(SGLang /get_server_info enable_deterministic_inference, else the plan's "
        "routes.deterministic)",
    )
    engine_deterministic_source: Literal["server", "plan"] | None = Field(
        default=None, description="where engine_deterministic came from (None: unknown)"
    )
    # --- the distribution witness (temperature > 0) -------------------------
    witness_test: str | None = Field(
        default=None, description="the witness's test (None: no witness for this row)"
    )
    witness_statistic: float | None = Field(
        default=None, ge=0, description="KS statistic of the randomised PITs (after the tail bound)"
    )
    witness_p_value: float | None = Field(
        default=None, ge=0, le=1, description="combined (Bonferroni) p-value of the witness"
    )
    witness_tokens_tested: int | None = Field(
        default=None, ge=0, description="sampled tokens the witness tested, tokens"
    )
    witness_tokens_excluded: int | None = Field(
        default=None, ge=0, description="sampled tokens left out (unknown tail, boundaries), tokens"
    )
    witness_detectable_distance: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="smallest PIT-CDF distance (total variation per token for mass moved to "
        "likelier tokens) the witness catches with probability witness_power",
    )
    witness_power: float | None = Field(
        default=None, gt=0, lt=1, description="the power witness_detectable_distance is stated at"
    )
    witness_requests: int | None = Field(
        default=None,
        ge=0,
        description="follow-up requests to off the witness cost this row's route",
    )
    witness_scored_tokens: int | None = Field(
        default=None, ge=0, description="output tokens off scored for the witness, tokens"
    )
    witness_note: str | None = Field(
        default=None, description="one line: the witness's verdict, or why there is none"
    )
    # --- output length ----------------------------------------------------
    output_length: str | None = Field(
        default=None,
        description="workload.output_length of the run: 'pinned' (every route decodes off's "
        "natural length), 'natural' (EOS under the cap) or 'forced' (past EOS); None before",
    )
    tokens_past_eos: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="share of the row's measured output tokens past the off route's natural "
        "end (EOS) of the same prompt, from the calibration pass (ratio); None without one",
    )

    if TYPE_CHECKING:
        # The signature type checkers see: axis fields also take their documented
        # string values (validated into the enums). Kept equal to the fields by
        # tests/test_typing_for_users.py.
        def __init__(
            self,
            *,
            schema_version: int = SCHEMA_VERSION,
            model_id: str,
            provider_route: str,
            engine_route: str,
            hosting: Hosting | HostingName,
            context_bucket: ContextBucket | ContextBucketName,
            output_target: OutputTarget | OutputTargetName,
            reasoning_mode: ReasoningMode | ReasoningModeName,
            stream: bool,
            speculative: Speculative | SpeculativeName,
            route_label: str | None = None,
            ttft_ms: float | None = None,
            tpot_ms: float | None = None,
            e2e_ms: float | None = None,
            output_toks_per_s: float | None = None,
            accepted_token_ratio: float | None = None,
            acceptance_length: float | None = None,
            acceptance_scope: AcceptanceScope | AcceptanceScopeName | None = None,
            draft_tokens: int | None = None,
            accepted_tokens: int | None = None,
            tokens_estimated: bool = False,
            quality_parity: QualityParity | QualityParityName = QualityParity.unknown,
            parity_detail: str | None = None,
            n_requests: int = 0,
            n_errors: int = 0,
            dispersion: Dispersion = ...,
            acceptance_by_position: tuple[float, ...] | None = None,
            spec_tokens: int | None = None,
            acceptance_source: str | None = None,
            acceptance_length_p10: float | None = None,
            acceptance_length_p50: float | None = None,
            acceptance_length_p90: float | None = None,
            accepted_per_step: tuple[int, ...] | None = None,
            acceptance_split: Literal["unknown"] | None = None,
            server_ttft_ms: float | None = None,
            server_queue_ms: float | None = None,
            sse_ignored_lines: int = 0,
            client_saturated: bool = False,
            client_pool_wait_ms: float | None = None,
            concurrency: int | None = None,
            request_rate_per_s: float | None = None,
            arrival: Arrival | ArrivalName | None = None,
            output_throughput_toks_per_s: float | None = None,
            request_throughput_per_s: float | None = None,
            goodput_req_per_s: float | None = None,
            slo_attainment: float | None = None,
            rounds: int | None = None,
            schedule_lagged: bool = False,
            ramp_ms: float | None = None,
            output_short: bool = False,
            n_output_short: int = 0,
            output_tokens: Percentiles | None = None,
            prompt_tokens: Percentiles | None = None,
            categories: Sequence[SliceStats] = (),
            turns: Sequence[SliceStats] = (),
            client_stall_ms: float | None = None,
            client_cpu_share: float | None = None,
            client_core_wait_share: float | None = None,
            client_cores: int | None = None,
            client_load_1m: float | None = None,
            client_workers: int | None = None,
            client_workers_basis: str | None = None,
            n_client_starved: int = 0,
            server_tpot_ms: float | None = None,
            server_clock_faults: Sequence[ServerClockFault | ServerClockFaultName] = (),
            client_starved: bool = False,
            prefix_cache_hit_rate: float | None = None,
            kv_cache_usage_peak: float | None = None,
            queue_depth_peak: float | None = None,
            engine_steps: int | None = None,
            engine_batch_mean: float | None = None,
            engine_steps_source: str | None = None,
            trace: str | None = None,
            trace_speedup: float | None = None,
            route_identity: RouteIdentity | RouteIdentityName | None = None,
            route_identity_detail: str | None = None,
            engine_command: Sequence[str] | None = None,
            engine_version: str | None = None,
            spec_config: str | None = None,
            parity_basis: Literal["bit_exact", "within_noise", "distribution"] = "bit_exact",
            divergences_near_tie: int | None = None,
            divergences_decisive: int | None = None,
            divergences_unexplained: int | None = None,
            noise_floor: float | None = None,
            tau_nats: float | None = None,
            tau_source: Literal["plan", "measured_jitter", "off_self_flips", "default"]
            | None = None,
            tau_quantile: float | None = None,
            tau_sample: int | None = None,
            near_tie_opportunities: int | None = None,
            outputs_with_opportunity: int | None = None,
            outputs_profiled: int | None = None,
            divergences_shown_one_pass: int | None = None,
            divergences_charged_to_off: int | None = None,
            parity_power_bound: float | None = None,
            parity_lossy_rate: float | None = None,
            first_divergence_margin_nats: float | None = None,
            divergence_note: str | None = None,
            engine_deterministic: bool | None = None,
            engine_deterministic_source: Literal["server", "plan"] | None = None,
            witness_test: str | None = None,
            witness_statistic: float | None = None,
            witness_p_value: float | None = None,
            witness_tokens_tested: int | None = None,
            witness_tokens_excluded: int | None = None,
            witness_detectable_distance: float | None = None,
            witness_power: float | None = None,
            witness_requests: int | None = None,
            witness_scored_tokens: int | None = None,
            witness_note: str | None = None,
            output_length: str | None = None,
            tokens_past_eos: float | None = None,
        ) -> None: ...

    @model_validator(mode="after")
    def _check_counts(self) -> Row:
        if not 1 <= self.schema_version <= SCHEMA_VERSION:
            # Older rows still read (version 1 rows carry no load: their load
            # fields are None and never pair with rows of known load).
            raise ValueError(
                f"schema_version {self.schema_version} is not supported "
                f"(this version reads 1..{SCHEMA_VERSION} and writes {SCHEMA_VERSION})"
            )
        if self.n_errors > self.n_requests:
            raise ValueError(f"n_errors ({self.n_errors}) exceeds n_requests ({self.n_requests})")
        return self

    # --- completeness -----------------------------------------------------
    def missing_fields(self) -> tuple[str, ...]:
        """Names from :data:`REQUIRED_FIELDS` this row lacks (empty when complete)."""
        missing: list[str] = []
        for name in REQUIRED_FIELDS:
            value = getattr(self, name)
            if value is None or (name == "n_requests" and value < 1):
                missing.append(name)
        return tuple(missing)

    @property
    def is_complete(self) -> bool:
        """True when every field of :data:`REQUIRED_FIELDS` is present."""
        return not self.missing_fields()

    def key(self) -> tuple[Any, ...]:
        """The row's key-axis values, in :data:`KEY_AXES` order."""
        from deepseekbench._types._axes import KEY_AXES

        return tuple(getattr(self, name) for name in KEY_AXES)

    def __repr_args__(self) -> Any:
        yield from super().__repr_args__()
        if not self.is_complete:
            yield "incomplete", self.missing_fields()

    # --- JSONL ------------------------------------------------------------
    def to_json_line(self) -> bytes:
        """The row as one JSON line (UTF-8, newline-terminated).

        The row is validated again first, so one built around validation (e.g.
        ``model_copy(update=...)`` with a NaN, which JSON would store as
        ``null``) is refused rather than written differently from what it holds.

        Raises:
            pydantic.ValidationError: the row's values are not a valid row.
        """
        data = self.model_dump()
        type(self).model_validate(data)
        return orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_APPEND_NEWLINE)

    @classmethod
    def from_json_line(cls, line: bytes | str) -> Row:
        """Parse one JSON line written by :meth:`to_json_line`.

        Raises:
            orjson.JSONDecodeError: not JSON.
            pydantic.ValidationError: JSON that is not a valid row.
        """
        return cls.model_validate(orjson.loads(line))

    def _repr_html_(self) -> str:
        from deepseekbench._types._row_html import rows_html

        return rows_html([self])


def write_rows(path: str | Path, rows: Iterable[Row], *, append: bool = True) -> Path:
    """Write rows as JSONL (one row a line), flushing after each; returns the path.

    Raises:
        pydantic.ValidationError: a row's values are not a valid row (see
            :meth:`Row.to_json_line`).
        OSError: the file cannot be opened or written.
    """
    p = Path(path)
    with p.open("ab" if append else "wb") as fh:
        for row in rows:
            fh.write(row.to_json_line())
            fh.flush()
    return p


def read_rows(path: str | Path) -> list[Row]:
    """Read every row of a JSONL file (blank lines skipped).

    Raises:
        RowFormatError: a line is not a valid row; carries its 1-based line number.
        OSError: the file cannot be opened or read.
    """
    rows: list[Row] = []
    with Path(path).open("rb") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise RowFormatError(
                    f"line {number} of {path} is not JSON: {exc}", line_number=number
                ) from exc
            if isinstance(data, dict) and "record" in data and "model_id" not in data:
                raise RowFormatError(
                    f"line {number} of {path} is a {data['record']!r} record: this is a "
                    f"results file written by run_plan; read it with load_results(path).rows",
                    line_number=number,
                )
            try:
                rows.append(Row.model_validate(data))
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(map(str, e['loc'])) or '<row>'}: {e['msg']}"
                    for e in exc.errors(include_url=False)
                )
                raise RowFormatError(
                    f"line {number} of {path} is not a valid Row: {problems}", line_number=number
                ) from exc
    return rows


def row_json_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`Row` (pydantic's export, serialization mode)."""
    return Row.model_json_schema(mode="serialization")
