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

**Import cost.** ``import deepseekbench`` imports none of the stages: every public
name is looked up in ``_IMPORTS`` on first use (module ``__getattr__``, as pydantic
does), so the HTTP clients, ``scipy``, ``matplotlib`` … load only when a name
that needs them is touched.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
    from deepseekbench._analysis._breakdown import (
        category_speedups,
    )
    from deepseekbench._analysis._capacity import (  # capacity under SLO
        CapacityRatio,
        CapacityReport,
        RouteCapacity,
        capacity_report,
    )
    from deepseekbench._analysis._compare_runs import (  # what changed between two runs
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
        verify_step_times,
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
    from deepseekbench._errors import (
        AcceptanceProfileError,
        CalibrationError,
        DeepseekBenchError,
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
        TaskFormatError,
        TokenizeError,
        VllmServerError,
        WorkerError,
        WorkloadFormatError,
        WorkloadLengthError,
    )
    from deepseekbench._execute._ray_executor import (
        RayPool,
    )
    from deepseekbench._execute._workers import (
        PoolReport,
        PoolResult,
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
    from deepseekbench._net._transport import (
        pool_limits,
    )
    from deepseekbench._plan._arrival import ArrivalPlan, SloPlan
    from deepseekbench._plan._capability import (
        ModelCapability,
        mtp_depth_from_gguf,
        mtp_depth_from_hf_config,
        probe_model_capability,
    )
    from deepseekbench._plan._coverage import WorkloadCoverage, WorkloadCoverageWarning
    from deepseekbench._plan._datasets import load_mt_bench, load_speed_bench
    from deepseekbench._plan._embedded_plan import embedded_plan, embedded_route
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
    from deepseekbench._types._clock import CLOCK_TOLERANCE, Clock, ServerClockFault
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
_IMPORTS: dict[str, str] = {
    "CacheWindow": "deepseekbench._types._cache",  # the cache window
    "SharedPrefix": "deepseekbench._plan._prefix",
    "load_mt_bench": "deepseekbench._plan._datasets",
    "load_speed_bench": "deepseekbench._plan._datasets",
    "TracePlan": "deepseekbench._plan._trace",
    "load_mooncake": "deepseekbench._plan._trace",
    "AcceptanceRecord": "deepseekbench._types._acceptance",
    "AcceptanceScope": "deepseekbench._types._axes",
    "AcceptanceScopeName": "deepseekbench._types._axes",
    "Arrival": "deepseekbench._types._axes",
    "ArrivalName": "deepseekbench._types._axes",
    "ArrivalPlan": "deepseekbench._plan._arrival",
    "BASELINE_NONDETERMINISTIC": "deepseekbench._types._parity",
    "BenchmarkPlan": "deepseekbench._plan._plan",
    "CalibrationError": "deepseekbench._errors",
    "CellPlan": "deepseekbench._plan._routes",
    "ChatRequest": "deepseekbench._types._request",
    "CompareSpeedup": "deepseekbench._analysis._speedup",
    "ContextBucket": "deepseekbench._types._axes",
    "ContextBucketName": "deepseekbench._types._axes",
    "CostModel": "deepseekbench._engine",
    "CounterSet": "deepseekbench._dialects",
    "DEFAULT_LAG_THRESHOLD_MS": "deepseekbench._types._selfcheck",
    "DEFAULT_TOLERANCE": "deepseekbench._plan._tasks",
    "DeepseekBenchError": "deepseekbench._errors",
    "DeterminismControl": "deepseekbench._types._parity",
    "Dialect": "deepseekbench._types._axes",
    "DialectName": "deepseekbench._types._axes",
    "Dispersion": "deepseekbench._types._row",
    "Divergence": "deepseekbench._types._parity",
    "DryRunResult": "deepseekbench._runner._dry_run",
    "EmbeddedEngine": "deepseekbench._engine",
    "EndpointTokenCounter": "deepseekbench._measure._tokens",
    "EngineConfig": "deepseekbench._engine",
    "EngineCounters": "deepseekbench._engine",
    "EngineDialect": "deepseekbench._dialects",
    "EngineRoute": "deepseekbench._net._route",
    "EngineTask": "deepseekbench._engine",
    "ErrorKind": "deepseekbench._records._measurement",
    "ExactAcceptance": "deepseekbench._types._parity",
    "FAULT_HEADER": "deepseekbench._engine",
    "FaultConfig": "deepseekbench._engine",
    "FaultKind": "deepseekbench._engine",
    "GatedTransport": "deepseekbench._net._gate",
    "GaugeSet": "deepseekbench._dialects",
    "Grader": "deepseekbench._plan._tasks",
    "GraderKind": "deepseekbench._plan._tasks",
    "HFTokenizerCounter": "deepseekbench._measure._tokens",
    "Hosting": "deepseekbench._types._axes",
    "HostingName": "deepseekbench._types._axes",
    "InputLength": "deepseekbench._plan._workload",
    "OutputLength": "deepseekbench._plan._output_length",
    "KEY_AXES": "deepseekbench._types._axes",
    "LOAD_AXES": "deepseekbench._types._axes",
    "LiveGate": "deepseekbench._net._gate",
    "LiveGateError": "deepseekbench._errors",
    "LlamaServerError": "deepseekbench._errors",
    "LlamaServerSpec": "deepseekbench._launch._llamacpp",
    # launched engines, route identity
    "LaunchSpec": "deepseekbench._plan._launch_spec",
    "LaunchRecord": "deepseekbench._types._identity",
    "RouteIdentity": "deepseekbench._types._identity",
    "RouteIdentityName": "deepseekbench._types._identity",
    "LoadPoint": "deepseekbench._types._load",
    "LoadWork": "deepseekbench._execute._workshare",
    "MIN_REQUESTS_FOR_SPEEDUP": "deepseekbench._analysis._speedup",
    "MeasureStreamed": "deepseekbench._measure._measure",
    "MeasuredRequest": "deepseekbench._analysis._analysis",
    "MetricsSnapshot": "deepseekbench._measure._server_metrics",
    "MissingExtraError": "deepseekbench._errors",
    "ModelCapability": "deepseekbench._plan._capability",
    "ModelCapabilityError": "deepseekbench._errors",
    "OutputTarget": "deepseekbench._types._axes",
    "OutputTargetName": "deepseekbench._types._axes",
    "PASSTHROUGH_FIELDS": "deepseekbench._types._request",
    "ParityOutput": "deepseekbench._types._parity",
    "ParityPlan": "deepseekbench._plan._sections",
    "ParityResult": "deepseekbench._types._parity",
    "Percentiles": "deepseekbench._types._row",
    "PlanError": "deepseekbench._errors",
    "PlanSources": "deepseekbench._plan._sources",
    "PoolItem": "deepseekbench._execute._workshare",
    "PoolReport": "deepseekbench._execute._workers",
    "PoolResult": "deepseekbench._execute._workers",
    "ProgressEvent": "deepseekbench._runner._progress",
    "PromptComparison": "deepseekbench._types._parity",
    "QualityParity": "deepseekbench._types._axes",
    "QualityParityName": "deepseekbench._types._axes",
    "REQUIRED_FIELDS": "deepseekbench._types._row",
    "RayPool": "deepseekbench._execute._ray_executor",
    "KeyFormatError": "deepseekbench._errors",
    "RayAddressError": "deepseekbench._errors",
    "RayUnavailableError": "deepseekbench._errors",
    "ReasoningMode": "deepseekbench._types._axes",
    "ReasoningModeName": "deepseekbench._types._axes",
    "RefusalReason": "deepseekbench._analysis._speedup",
    "ResultsFormatError": "deepseekbench._errors",
    "AcceptanceProfileError": "deepseekbench._errors",
    "AcceptanceProfile": "deepseekbench._analysis._acceptance_profile",
    "acceptance_profile": "deepseekbench._analysis._acceptance_profile",
    "read_acceptance_profile": "deepseekbench._analysis._acceptance_profile",
    "write_acceptance_profile": "deepseekbench._analysis._acceptance_profile",
    "ResultsInUseError": "deepseekbench._errors",
    "ResultsIntegrity": "deepseekbench._store._chain",
    "ResultsIntegrityWarning": "deepseekbench._store._chain",
    "ResultsRun": "deepseekbench._store._results",
    "ResultsWriteError": "deepseekbench._errors",
    "RouteParity": "deepseekbench._analysis._route_parity",
    "RoutePlan": "deepseekbench._plan._routes",
    "RouteUnreachableError": "deepseekbench._errors",
    "Row": "deepseekbench._types._row",
    "RowFormatError": "deepseekbench._errors",
    "RunMeta": "deepseekbench._analysis._analysis",
    "RunResult": "deepseekbench._analysis._analysis",
    # the distribution witness (parity at temperature > 0)
    "SamplingSpec": "deepseekbench._analysis._witness",
    "WitnessExclusion": "deepseekbench._analysis._witness",
    "WitnessResult": "deepseekbench._analysis._witness",
    "witness": "deepseekbench._analysis._witness",
    "RouteWitness": "deepseekbench._analysis._witness_rows",
    "route_witnesses": "deepseekbench._analysis._witness_rows",
    "witness_verdict": "deepseekbench._analysis._witness_rows",
    "ScoredOutput": "deepseekbench._types._scored",
    "ScoredPosition": "deepseekbench._types._scored",
    "RunningLlamaServer": "deepseekbench._launch._llamacpp",
    "RunningVllmServer": "deepseekbench._launch._vllm",
    "SCHEMA_VERSION": "deepseekbench._types._row",
    "Scorecard": "deepseekbench._report._scorecard",
    "ScorecardLine": "deepseekbench._analysis._lines",
    "SelfCheck": "deepseekbench._measure._selfcheck",
    "Clock": "deepseekbench._types._clock",  # the server clock witness
    "CLOCK_TOLERANCE": "deepseekbench._types._clock",
    "ServerClockFault": "deepseekbench._types._clock",
    "SelfCheckSummary": "deepseekbench._measure._selfcheck",
    "ServerError": "deepseekbench._errors",
    "SliceStats": "deepseekbench._types._row",
    "SloPlan": "deepseekbench._plan._arrival",
    # capacity under SLO
    "SearchPlan": "deepseekbench._plan._search",
    "StoppingPlan": "deepseekbench._plan._stopping",
    "FewRoundsWarning": "deepseekbench._plan._stopping",
    "CapacityRatio": "deepseekbench._analysis._capacity",
    "CapacityReport": "deepseekbench._analysis._capacity",
    "RouteCapacity": "deepseekbench._analysis._capacity",
    "capacity_report": "deepseekbench._analysis._capacity",
    "Speculative": "deepseekbench._types._axes",
    "SpeculativeName": "deepseekbench._types._axes",
    "SpeedupEvidence": "deepseekbench._analysis._speedup",
    "SpeedupSequence": "deepseekbench._analysis._sequential",
    "StopReason": "deepseekbench._analysis._sequential",
    "sequential_verdict": "deepseekbench._analysis._sequential",
    "speedup_confidence_sequence": "deepseekbench._analysis._sequential",
    "SpeedupMetric": "deepseekbench._analysis._speedup",
    "SpeedupVerdict": "deepseekbench._analysis._speedup",
    # where the speedup comes from
    "SpeedupDecomposition": "deepseekbench._analysis._decompose",
    "break_even_acceptance_rate": "deepseekbench._analysis._decompose",
    "decompose_speedup": "deepseekbench._analysis._decompose",
    "expected_acceptance_length": "deepseekbench._analysis._decompose",
    "verify_step_times": "deepseekbench._analysis._decompose",
    "which_factor_moved": "deepseekbench._analysis._decompose",
    "StepCosts": "deepseekbench._analysis._step_witness",
    "StepCostWitness": "deepseekbench._analysis._step_witness",
    "witness_step_costs": "deepseekbench._analysis._step_witness",
    "StreamError": "deepseekbench._records._measurement",
    "StreamLimits": "deepseekbench._measure._accumulator",
    "StreamMeasurement": "deepseekbench._records._measurement",
    "Task": "deepseekbench._plan._tasks",
    "TaskFlip": "deepseekbench._plan._tasks",
    "TaskFormatError": "deepseekbench._errors",
    "TaskParityResult": "deepseekbench._plan._tasks",
    "Timeouts": "deepseekbench._measure._measure",
    "TokenCounter": "deepseekbench._types._tokens",
    "TokenizeError": "deepseekbench._errors",
    "VllmServerError": "deepseekbench._errors",
    "VllmServerSpec": "deepseekbench._launch._vllm",
    "WorkerError": "deepseekbench._errors",
    "WorkerPool": "deepseekbench._execute._workers",
    "WorkloadCoverage": "deepseekbench._plan._coverage",
    "WorkloadCoverageWarning": "deepseekbench._plan._coverage",
    "WorkloadFormatError": "deepseekbench._errors",
    "WorkloadItem": "deepseekbench._plan._workload",
    "WorkloadLengthError": "deepseekbench._errors",
    "WorkloadPlan": "deepseekbench._plan._sections",
    "acceptance_from_llamacpp": "deepseekbench._dialects.llamacpp",
    "acceptance_from_sglang": "deepseekbench._dialects.sglang",
    "acceptance_from_vllm": "deepseekbench._dialects.vllm",
    "all_reference_tasks": "deepseekbench._engine",
    "bootstrap_speedup_ci": "deepseekbench._report._scorecard",
    "category_speedups": "deepseekbench._analysis._breakdown",
    "check_bucket": "deepseekbench._plan._workload",
    "coerce_request": "deepseekbench._types._request",
    "compare_runs": "deepseekbench._analysis._compare_runs",
    "compare_speedup": "deepseekbench._analysis._speedup",
    "FigureChange": "deepseekbench._analysis._compare_runs",
    "LineComparison": "deepseekbench._analysis._compare_runs",
    "RunComparison": "deepseekbench._analysis._compare_runs",
    "crossover_text": "deepseekbench._report._notes",
    "determinism_control": "deepseekbench._types._parity",
    "dialect_for": "deepseekbench._dialects",
    "dry_run": "deepseekbench._runner._dry_run",
    "eos_controls": "deepseekbench._net._route",
    "embedded_plan": "deepseekbench._plan._embedded_plan",
    "embedded_route": "deepseekbench._plan._embedded_plan",
    "exact_acceptance": "deepseekbench._types._parity",
    "find_llama_server": "deepseekbench._launch._llamacpp",
    "find_vllm_python": "deepseekbench._launch._vllm",
    "is_loopback_host": "deepseekbench._net._gate",
    "list_runs": "deepseekbench._store._results",
    "llama_server": "deepseekbench._launch._llamacpp",
    "llama_server_args": "deepseekbench._launch._llamacpp",
    "llama_servers": "deepseekbench._launch._llamacpp",
    "load_jsonl": "deepseekbench._plan._workload",
    "load_results": "deepseekbench._analysis._analysis",
    "load_sharegpt": "deepseekbench._plan._workload",
    "load_spec_bench": "deepseekbench._plan._workload",
    "load_tasks": "deepseekbench._plan._tasks",
    "measure_streamed": "deepseekbench._measure._measure",
    "metrics_delta": "deepseekbench._measure._server_metrics",
    "mtp_depth_from_gguf": "deepseekbench._plan._capability",
    "mtp_depth_from_hf_config": "deepseekbench._plan._capability",
    "paired_speedup_ci": "deepseekbench._report._scorecard",
    "parse_metrics": "deepseekbench._measure._server_metrics",
    "pool_limits": "deepseekbench._net._transport",
    "probe_model_capability": "deepseekbench._plan._capability",
    "read_acceptance": "deepseekbench._dialects",
    "read_rows": "deepseekbench._types._row",
    "reasoning_controls": "deepseekbench._net._route",
    "reference_tasks": "deepseekbench._engine",
    "register_dialect": "deepseekbench._dialects",
    "row_json_schema": "deepseekbench._types._row",
    "rows_html": "deepseekbench._types._row_html",
    "run_plan": "deepseekbench._runner._run",
    "scrape_metrics": "deepseekbench._measure._server_metrics",
    "smoke_tasks": "deepseekbench._plan._tasks",
    "synthetic_items": "deepseekbench._plan._workload",
    "task_parity": "deepseekbench._plan._tasks",
    "unregister_dialect": "deepseekbench._dialects",
    "vllm_server_args": "deepseekbench._launch._vllm",
    "vllm_servers": "deepseekbench._launch._vllm",
    "write_rows": "deepseekbench._types._row",
    # parity within the engine's own numerics
    "DEFAULT_TAU_NATS": "deepseekbench._types._margin",
    "DivergenceKind": "deepseekbench._types._margin",
    "DivergenceMargin": "deepseekbench._types._margin",
    "TauSource": "deepseekbench._types._margin",
    "classify_divergence": "deepseekbench._types._margin",
    "NoiseFloor": "deepseekbench._analysis._divergence",
    "NoiseVerdict": "deepseekbench._analysis._divergence",
    "within_noise_verdict": "deepseekbench._analysis._divergence",
    "TauEstimate": "deepseekbench._analysis._divergence",
    "lossy_rate_bound": "deepseekbench._analysis._divergence",
    "anytime_rate_bound": "deepseekbench._analysis._anytime_rate",
    "measure_tau": "deepseekbench._analysis._divergence",
    "OffProfile": "deepseekbench._types._noise",
}

__all__ = [
    "BASELINE_NONDETERMINISTIC",
    "CLOCK_TOLERANCE",
    "DEFAULT_LAG_THRESHOLD_MS",
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
    "EmbeddedEngine",
    "EndpointTokenCounter",
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
    "VllmServerError",
    "VllmServerSpec",
    "WitnessExclusion",
    "WitnessResult",
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
    "verify_step_times",
    "vllm_server_args",
    "vllm_servers",
    "which_factor_moved",
    "within_noise_verdict",
    "witness",
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
