"""deepseekbench: benchmark speculative decoding with speed and quality parity in one run.

A speedup is credited only when ``quality_parity == "verified"`` on both the
speculative row and its ``speculative=off`` baseline (:func:`compare_speedup`).
Nothing opens a connection except through a :class:`LiveGate`.

**Layers.** The package is one folder per stage of the run's pipeline, in the
order a run meets them, over a shared vocabulary and the records every stage
shares. A module may import only from its own folder or from a layer *below* it
(lower in this list); nothing reaches back up. A few pairs are refused outright:
the plan imports no measurement, network or launch code; the store and analysis
import no measurement or execution code; the report imports no plan.
``tests/test_layers.py`` holds the rules, for every import in every module (inside
functions and ``if TYPE_CHECKING:`` blocks too)::

    __init__             the public surface (everything re-exported, lazily)
    __main__             ``python -m deepseekbench``
    _cli/                the command line: parser, commands, demo, output
    _runner/             wires the stages into one run: steps, preflight, resume, search, dry run
    _report/             renders: one module per format in a registry, notes, plots
    _analysis/           rows, statistics, speed-ups, parity verdicts, judged lines (pure)
    _store/              the results file and its one writer: append-only JSONL, digest
                         chain, resume, lock
    _execute/            the served-configuration probes, prepare the workload;
                         send and measure each block (in-process, worker pool, Ray)
    _measure/            one request measured: SSE, timing, self-check, tokens,
                         server metrics
    _launch/             start real engines (vLLM, llama.cpp) from a plan, for tests and
                         benchmarks
    _net/                transport, the live gate, live routes, the reachability probe
    _engine/             the embedded reference engine (a server; shares only _types)
    _plan/               the validated plan, workload, tasks, and its schedule (pure data)
    _dialects/           one adapter per engine (vllm, sglang, llamacpp, trtllm, openai,
                         deepseek, auto)
    _records/            the records every stage shares: a request's measurement, its
                         figures, client health and clock, the follow-up
    _types/              shared vocabulary: axes, requests, acceptance, parity, rows, loads
    _userfile            the one reader for user files (plan, datasets, tasks, model)
    _errors              the one exception tree
    _version             the version string (recorded in every results file)
    _moved               0.1.0's private module paths, still importable (deprecated)
    _exports             where each public name lives (the table ``__getattr__`` reads)

**Import cost.** ``import deepseekbench`` imports none of the stages: every public
name is looked up in ``_exports.EXPORTS`` on first use (module ``__getattr__``, as pydantic
does), so the HTTP clients, ``scipy``, ``matplotlib`` … load only when a name
that needs them is touched.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from deepseekbench._exports import EXPORTS as _IMPORTS

if TYPE_CHECKING:
    from deepseekbench._analysis._acceptance_profile import (
        AcceptanceProfile,
        acceptance_profile,
        read_acceptance_profile,
        write_acceptance_profile,
    )
    from deepseekbench._analysis._analysis import (
        MeasuredRequest,
        RunMeta,
        RunResult,
        load_results,
    )
    from deepseekbench._analysis._anytime_rate import anytime_rate_bound
    from deepseekbench._analysis._breakdown import category_speedups
    from deepseekbench._analysis._capacity import (  # capacity under SLO
        CapacityRatio,
        CapacityReport,
        RouteCapacity,
        capacity_report,
    )
    from deepseekbench._analysis._compare_runs import (  # what changed between two runs
        DEFAULT_MARGIN,
        FigureChange,
        LineComparison,
        RunComparison,
        compare_runs,
    )
    from deepseekbench._analysis._decompose import (
        SpeedupDecomposition,
        break_even_acceptance_rate,
        decompose_speedup,
        expected_acceptance_length,
        which_factor_moved,
    )
    from deepseekbench._analysis._divergence import (  # the noise floor
        NoiseFloor,
        NoiseVerdict,
        TauEstimate,
        lossy_rate_bound,
        measure_tau,
        within_noise_verdict,
    )
    from deepseekbench._analysis._engine_decompose import EngineClockDiagnosis
    from deepseekbench._analysis._lines import ScorecardLine
    from deepseekbench._analysis._route_parity import RouteParity
    from deepseekbench._analysis._sequential import (
        SpeedupSequence,
        StopReason,
        sequential_verdict,
        speedup_confidence_sequence,
    )
    from deepseekbench._analysis._speedup import (
        MIN_REQUESTS_FOR_SPEEDUP,
        CompareSpeedup,
        RefusalReason,
        SpeedupEvidence,
        SpeedupMetric,
        SpeedupVerdict,
        compare_speedup,
    )
    from deepseekbench._analysis._step_witness import (
        StepCosts,
        StepCostWitness,
        WitnessBatch,
        cost_model_step_costs,
        witness_batch,
        witness_step_costs,
    )
    from deepseekbench._analysis._witness import (  # the distribution witness
        SamplingSpec,
        WitnessExclusion,
        WitnessResult,
        witness,
    )
    from deepseekbench._analysis._witness_rows import (
        RouteWitness,
        route_witnesses,
        witness_verdict,
    )
    from deepseekbench._analysis._witness_temperature import (
        EffectiveTemperature,
        fit_effective_temperature,
    )
    from deepseekbench._dialects import (
        CounterSet,
        EngineDialect,
        GaugeSet,
        dialect_for,
        read_acceptance,
        register_dialect,
        unregister_dialect,
    )
    from deepseekbench._dialects.llamacpp import acceptance_from_llamacpp
    from deepseekbench._dialects.sglang import acceptance_from_sglang
    from deepseekbench._dialects.vllm import acceptance_from_vllm
    from deepseekbench._engine import (
        FAULT_HEADER,
        CostModel,
        EmbeddedEngine,
        EngineConfig,
        EngineCounters,
        EngineTask,
        FaultConfig,
        FaultKind,
        all_reference_tasks,
        reference_tasks,
    )
    from deepseekbench._engine._server import ChunkSend
    from deepseekbench._errors import (
        AcceptanceProfileError,
        CalibrationError,
        DeepseekBenchError,
        FractionFormatError,
        KeyFormatError,
        LiveGateError,
        LlamaServerError,
        MissingExtraError,
        ModelCapabilityError,
        PlanError,
        RayAddressError,
        RayUnavailableError,
        ResultsFormatError,
        ResultsInUseError,
        ResultsWriteError,
        RouteUnreachableError,
        RowFormatError,
        ServerError,
        StepCostsError,
        TaskFormatError,
        TokenizeError,
        UnknownKeyError,
        UnknownMetricError,
        VllmServerError,
        WorkerError,
        WorkloadFormatError,
        WorkloadLengthError,
    )
    from deepseekbench._execute._ray_executor import RayPool
    from deepseekbench._execute._workers import (
        PoolReport,
        PoolResult,
        WorkerDeath,
        WorkerPool,
    )
    from deepseekbench._execute._workshare import (
        LoadWork,
        PoolItem,
    )
    from deepseekbench._launch._llamacpp import (
        LlamaServerSpec,
        RunningLlamaServer,
        find_llama_server,
        llama_server,
        llama_server_args,
        llama_servers,
    )
    from deepseekbench._launch._vllm import (
        RunningVllmServer,
        VllmServerSpec,
        find_vllm_python,
        vllm_server_args,
        vllm_servers,
    )
    from deepseekbench._measure._accumulator import StreamLimits
    from deepseekbench._measure._measure import MeasureStreamed, Timeouts, measure_streamed
    from deepseekbench._measure._selfcheck import (
        SelfCheck,
        SelfCheckSummary,
    )
    from deepseekbench._measure._server_metrics import (
        MetricsSnapshot,
        metrics_delta,
        parse_metrics,
        scrape_metrics,
    )
    from deepseekbench._measure._tokens import (
        EndpointTokenCounter,
        HFTokenizerCounter,
    )
    from deepseekbench._net._gate import (
        GatedTransport,
        LiveGate,
        is_loopback_host,
    )
    from deepseekbench._net._route import (
        EngineRoute,
        eos_controls,
        reasoning_controls,
    )
    from deepseekbench._net._transport import pool_limits
    from deepseekbench._plan._arrival import ArrivalPlan, SloPlan
    from deepseekbench._plan._capability import (
        ModelCapability,
        mtp_depth_from_gguf,
        mtp_depth_from_hf_config,
        probe_model_capability,
    )
    from deepseekbench._plan._coverage import WorkloadCoverage, WorkloadCoverageWarning
    from deepseekbench._plan._datasets import load_mt_bench, load_speed_bench
    from deepseekbench._plan._embedded_plan import (
        embedded_plan,
        embedded_route,
    )
    from deepseekbench._plan._launch_spec import LaunchSpec  # launched routes
    from deepseekbench._plan._output_length import OutputLength
    from deepseekbench._plan._plan import BenchmarkPlan
    from deepseekbench._plan._prefix import SharedPrefix  # shared-prefix workloads
    from deepseekbench._plan._routes import CellPlan, RoutePlan
    from deepseekbench._plan._search import SearchPlan  # capacity under SLO
    from deepseekbench._plan._sections import ParityPlan, WorkloadPlan
    from deepseekbench._plan._sources import PlanSources
    from deepseekbench._plan._stopping import FewRoundsWarning, StoppingPlan
    from deepseekbench._plan._tasks import (
        DEFAULT_TOLERANCE,
        Grader,
        GraderKind,
        Task,
        TaskFlip,
        TaskParityResult,
        load_tasks,
        smoke_tasks,
        task_parity,
    )
    from deepseekbench._plan._trace import TracePlan, load_mooncake
    from deepseekbench._plan._workload import (
        InputLength,
        WorkloadItem,
        check_bucket,
        load_jsonl,
        load_sharegpt,
        load_spec_bench,
        synthetic_items,
    )
    from deepseekbench._records._measurement import ErrorKind, StreamError, StreamMeasurement
    from deepseekbench._report._notes import crossover_text
    from deepseekbench._report._scorecard import (
        Scorecard,
        bootstrap_speedup_ci,
        paired_speedup_ci,
    )
    from deepseekbench._runner._dry_run import DryRunResult, dry_run
    from deepseekbench._runner._progress import ProgressEvent
    from deepseekbench._runner._run import run_plan
    from deepseekbench._store._chain import ResultsIntegrity, ResultsIntegrityWarning
    from deepseekbench._store._reading import UnfinishedRunWarning
    from deepseekbench._store._results import (
        ResultsRun,
        list_runs,
    )
    from deepseekbench._types._acceptance import AcceptanceRecord
    from deepseekbench._types._axes import (
        KEY_AXES,
        LOAD_AXES,
        AcceptanceScope,
        AcceptanceScopeName,
        Arrival,
        ArrivalName,
        ContextBucket,
        ContextBucketName,
        Dialect,
        DialectName,
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
    from deepseekbench._types._cache import CacheWindow  # the cache window
    from deepseekbench._types._clock import (
        CLOCK_TOLERANCE,
        Clock,
        ServerClockFault,
        ServerRateSpan,
    )
    from deepseekbench._types._identity import (  # launched routes, the route-identity check
        LaunchRecord,
        RouteIdentity,
        RouteIdentityName,
    )
    from deepseekbench._types._load import LoadPoint
    from deepseekbench._types._margin import (  # divergence margins
        DEFAULT_TAU_NATS,
        DivergenceKind,
        DivergenceMargin,
        TauSource,
        classify_divergence,
    )
    from deepseekbench._types._noise import OffProfile  # off's margins over whole outputs
    from deepseekbench._types._parity import (
        BASELINE_NONDETERMINISTIC,
        DeterminismControl,
        Divergence,
        ExactAcceptance,
        ParityOutput,
        ParityResult,
        PromptComparison,
        determinism_control,
        exact_acceptance,
    )
    from deepseekbench._types._request import (
        PASSTHROUGH_FIELDS,
        ChatRequest,
        coerce_request,
    )
    from deepseekbench._types._row import (
        REQUIRED_FIELDS,
        SCHEMA_VERSION,
        Dispersion,
        Percentiles,
        Row,
        SliceStats,
        read_rows,
        row_json_schema,
        write_rows,
    )
    from deepseekbench._types._row_html import rows_html
    from deepseekbench._types._scored import ScoredOutput, ScoredPosition
    from deepseekbench._types._selfcheck import DEFAULT_LAG_THRESHOLD_MS
    from deepseekbench._types._tokens import TokenCounter

from deepseekbench._moved import install_moved_finder
from deepseekbench._version import __version__

# public name -> the module that defines it

__all__ = [
    "BASELINE_NONDETERMINISTIC",
    "CLOCK_TOLERANCE",
    "DEFAULT_LAG_THRESHOLD_MS",
    "DEFAULT_MARGIN",
    "DEFAULT_TAU_NATS",
    "DEFAULT_TOLERANCE",
    "FAULT_HEADER",
    "KEY_AXES",
    "LOAD_AXES",
    "MIN_REQUESTS_FOR_SPEEDUP",
    "PASSTHROUGH_FIELDS",
    "REQUIRED_FIELDS",
    "SCHEMA_VERSION",
    "AcceptanceProfile",
    "AcceptanceProfileError",
    "AcceptanceRecord",
    "AcceptanceScope",
    "AcceptanceScopeName",
    "Arrival",
    "ArrivalName",
    "ArrivalPlan",
    "BenchmarkPlan",
    "CacheWindow",
    "CalibrationError",
    "CapacityRatio",
    "CapacityReport",
    "CellPlan",
    "ChatRequest",
    "ChunkSend",
    "Clock",
    "CompareSpeedup",
    "ContextBucket",
    "ContextBucketName",
    "CostModel",
    "CounterSet",
    "DeepseekBenchError",
    "DeterminismControl",
    "Dialect",
    "DialectName",
    "Dispersion",
    "Divergence",
    "DivergenceKind",
    "DivergenceMargin",
    "DryRunResult",
    "EffectiveTemperature",
    "EmbeddedEngine",
    "EndpointTokenCounter",
    "EngineClockDiagnosis",
    "EngineConfig",
    "EngineCounters",
    "EngineDialect",
    "EngineRoute",
    "EngineTask",
    "ErrorKind",
    "ExactAcceptance",
    "FaultConfig",
    "FaultKind",
    "FewRoundsWarning",
    "FigureChange",
    "FractionFormatError",
    "GatedTransport",
    "GaugeSet",
    "Grader",
    "GraderKind",
    "HFTokenizerCounter",
    "Hosting",
    "HostingName",
    "InputLength",
    "KeyFormatError",
    "LaunchRecord",
    "LaunchSpec",
    "LineComparison",
    "LiveGate",
    "LiveGateError",
    "LlamaServerError",
    "LlamaServerSpec",
    "LoadPoint",
    "LoadWork",
    "MeasureStreamed",
    "MeasuredRequest",
    "MetricsSnapshot",
    "MissingExtraError",
    "ModelCapability",
    "ModelCapabilityError",
    "NoiseFloor",
    "NoiseVerdict",
    "OffProfile",
    "OutputLength",
    "OutputTarget",
    "OutputTargetName",
    "ParityOutput",
    "ParityPlan",
    "ParityResult",
    "Percentiles",
    "PlanError",
    "PlanSources",
    "PoolItem",
    "PoolReport",
    "PoolResult",
    "ProgressEvent",
    "PromptComparison",
    "QualityParity",
    "QualityParityName",
    "RayAddressError",
    "RayPool",
    "RayUnavailableError",
    "ReasoningMode",
    "ReasoningModeName",
    "RefusalReason",
    "ResultsFormatError",
    "ResultsInUseError",
    "ResultsIntegrity",
    "ResultsIntegrityWarning",
    "ResultsRun",
    "ResultsWriteError",
    "RouteCapacity",
    "RouteIdentity",
    "RouteIdentityName",
    "RouteParity",
    "RoutePlan",
    "RouteUnreachableError",
    "RouteWitness",
    "Row",
    "RowFormatError",
    "RunComparison",
    "RunMeta",
    "RunResult",
    "RunningLlamaServer",
    "RunningVllmServer",
    "SamplingSpec",
    "Scorecard",
    "ScorecardLine",
    "ScoredOutput",
    "ScoredPosition",
    "SearchPlan",
    "SelfCheck",
    "SelfCheckSummary",
    "ServerClockFault",
    "ServerError",
    "ServerRateSpan",
    "SharedPrefix",
    "SliceStats",
    "SloPlan",
    "Speculative",
    "SpeculativeName",
    "SpeedupDecomposition",
    "SpeedupEvidence",
    "SpeedupMetric",
    "SpeedupSequence",
    "SpeedupVerdict",
    "StepCostWitness",
    "StepCosts",
    "StepCostsError",
    "StopReason",
    "StoppingPlan",
    "StreamError",
    "StreamLimits",
    "StreamMeasurement",
    "Task",
    "TaskFlip",
    "TaskFormatError",
    "TaskParityResult",
    "TauEstimate",
    "TauSource",
    "Timeouts",
    "TokenCounter",
    "TokenizeError",
    "TracePlan",
    "UnfinishedRunWarning",
    "UnknownKeyError",
    "UnknownMetricError",
    "VllmServerError",
    "VllmServerSpec",
    "WitnessBatch",
    "WitnessExclusion",
    "WitnessResult",
    "WorkerDeath",
    "WorkerError",
    "WorkerPool",
    "WorkloadCoverage",
    "WorkloadCoverageWarning",
    "WorkloadFormatError",
    "WorkloadItem",
    "WorkloadLengthError",
    "WorkloadPlan",
    "__version__",
    "acceptance_from_llamacpp",
    "acceptance_from_sglang",
    "acceptance_from_vllm",
    "acceptance_profile",
    "all_reference_tasks",
    "anytime_rate_bound",
    "bootstrap_speedup_ci",
    "break_even_acceptance_rate",
    "capacity_report",
    "category_speedups",
    "check_bucket",
    "classify_divergence",
    "coerce_request",
    "compare_runs",
    "compare_speedup",
    "cost_model_step_costs",
    "crossover_text",
    "decompose_speedup",
    "determinism_control",
    "dialect_for",
    "dry_run",
    "embedded_plan",
    "embedded_route",
    "eos_controls",
    "exact_acceptance",
    "expected_acceptance_length",
    "find_llama_server",
    "find_vllm_python",
    "fit_effective_temperature",
    "is_loopback_host",
    "list_runs",
    "llama_server",
    "llama_server_args",
    "llama_servers",
    "load_jsonl",
    "load_mooncake",
    "load_mt_bench",
    "load_results",
    "load_sharegpt",
    "load_spec_bench",
    "load_speed_bench",
    "load_tasks",
    "lossy_rate_bound",
    "measure_streamed",
    "measure_tau",
    "metrics_delta",
    "mtp_depth_from_gguf",
    "mtp_depth_from_hf_config",
    "paired_speedup_ci",
    "parse_metrics",
    "pool_limits",
    "probe_model_capability",
    "read_acceptance",
    "read_acceptance_profile",
    "read_rows",
    "reasoning_controls",
    "reference_tasks",
    "register_dialect",
    "route_witnesses",
    "row_json_schema",
    "rows_html",
    "run_plan",
    "scrape_metrics",
    "sequential_verdict",
    "smoke_tasks",
    "speedup_confidence_sequence",
    "synthetic_items",
    "task_parity",
    "unregister_dialect",
    "vllm_server_args",
    "vllm_servers",
    "which_factor_moved",
    "within_noise_verdict",
    "witness",
    "witness_batch",
    "witness_step_costs",
    "witness_verdict",
    "write_acceptance_profile",
    "write_rows",
]


def __getattr__(name: str) -> Any:
    module = _IMPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


install_moved_finder()  # the 0.1.0 module paths, importable with a warning (_moved)
