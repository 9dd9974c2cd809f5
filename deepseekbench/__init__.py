"""deepseekbench: benchmark speculative decoding with speed and quality parity in one run.

A speedup is credited only when ``quality_parity == "verified"`` on both the
speculative row and its ``speculative=off`` baseline (:func:`compare_speedup`).
Nothing opens a connection except through a :class:`LiveGate`.
"""

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
    "AcceptanceScope",
    "CompareSpeedup",
    "ContextBucket",
    "DeepseekBenchError",
    "Dialect",
    "Dispersion",
    "GatedTransport",
    "Hosting",
    "LiveGate",
    "LiveGateError",
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
    "__version__",
    "compare_speedup",
    "is_loopback_host",
    "read_rows",
    "row_json_schema",
    "rows_html",
    "write_rows",
]
