"""deepseekbench: benchmark speculative decoding with speed and quality parity in one run.

A speedup is credited only when ``quality_parity == "verified"`` on both the
speculative row and its ``speculative=off`` baseline (:func:`compare_speedup`).
Nothing opens a connection except through a :class:`LiveGate`.
"""

from deepseekbench._acceptance import (
    AcceptanceRecord,
    acceptance_from_llamacpp,
    acceptance_from_sglang,
    acceptance_from_vllm,
    read_acceptance,
)
from deepseekbench._axes import (
    KEY_AXES,
    AcceptanceScope,
    ContextBucket,
    Dialect,
    Hosting,
    OutputTarget,
    QualityParity,
    ReasoningMode,
    Speculative,
)
from deepseekbench._errors import DeepseekBenchError, LiveGateError, PlanError, RowFormatError
from deepseekbench._gate import GatedTransport, LiveGate, is_loopback_host
from deepseekbench._measure import (
    ErrorKind,
    MeasureStreamed,
    StreamError,
    StreamMeasurement,
    Timeouts,
    measure_streamed,
)
from deepseekbench._request import ChatRequest, coerce_request
from deepseekbench._route import EngineRoute, reasoning_controls
from deepseekbench._row import (
    REQUIRED_FIELDS,
    SCHEMA_VERSION,
    Dispersion,
    Percentiles,
    Row,
    read_rows,
    row_json_schema,
    rows_html,
    write_rows,
)
from deepseekbench._server_metrics import (
    MetricsSnapshot,
    metrics_delta,
    parse_metrics,
    scrape_metrics,
)
from deepseekbench._speedup import (
    MIN_REQUESTS_FOR_SPEEDUP,
    CompareSpeedup,
    RefusalReason,
    SpeedupMetric,
    SpeedupVerdict,
    compare_speedup,
)

__version__ = "0.1.0"

__all__ = [
    "KEY_AXES",
    "MIN_REQUESTS_FOR_SPEEDUP",
    "REQUIRED_FIELDS",
    "SCHEMA_VERSION",
    "AcceptanceRecord",
    "AcceptanceScope",
    "ChatRequest",
    "CompareSpeedup",
    "ContextBucket",
    "DeepseekBenchError",
    "Dialect",
    "Dispersion",
    "EngineRoute",
    "ErrorKind",
    "GatedTransport",
    "Hosting",
    "LiveGate",
    "LiveGateError",
    "MeasureStreamed",
    "MetricsSnapshot",
    "OutputTarget",
    "Percentiles",
    "PlanError",
    "QualityParity",
    "ReasoningMode",
    "RefusalReason",
    "Row",
    "RowFormatError",
    "Speculative",
    "SpeedupMetric",
    "SpeedupVerdict",
    "StreamError",
    "StreamMeasurement",
    "Timeouts",
    "__version__",
    "acceptance_from_llamacpp",
    "acceptance_from_sglang",
    "acceptance_from_vllm",
    "coerce_request",
    "compare_speedup",
    "is_loopback_host",
    "measure_streamed",
    "metrics_delta",
    "parse_metrics",
    "read_acceptance",
    "read_rows",
    "reasoning_controls",
    "row_json_schema",
    "rows_html",
    "scrape_metrics",
    "write_rows",
]
