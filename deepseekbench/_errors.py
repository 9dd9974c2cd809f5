"""One exception hierarchy with a single root, :class:`DeepseekBenchError`.

Caller mistakes raise these; server misbehaviour never does (it is recorded on
the measurement as an error kind instead). No message ever contains an API key.
Every class is exported from :mod:`deepseekbench`. The tree::

    DeepseekBenchError
    ├── LiveGateError            the gate refused a request before any socket opened
    ├── KeyFormatError           an API key that cannot go into an HTTP header
    ├── RowFormatError           a rows JSONL line cannot be read back
    ├── MissingExtraError        an optional extra is not installed (also an ImportError)
    ├── PlanError                a plan is invalid (raised before any request)
    │   ├── RouteUnreachableError   a route failed the reachability probe
    │   ├── WorkloadFormatError     a workload file is malformed
    │   ├── WorkloadLengthError     prompts fall outside their context bucket
    │   ├── TaskFormatError         a task file or record is invalid
    │   └── RayAddressError         a Ray cluster address outside the forms the gate judges
    ├── ModelCapabilityError     a model file cannot be read for its capabilities
    ├── TokenizeError            tokens could not be counted
    ├── ResultsFormatError       a results JSONL file cannot be read back
    │   ├── ResultsInUseError       another run holds the results file's lock
    │   └── ResultsWriteError       a record could not be written
    ├── WorkerError              a client worker failed
    ├── UnknownKeyError          a route, cell or load key a result does not hold (also a KeyError)
    ├── FractionFormatError      a threshold or margin in no accepted form (also a ValueError)
    ├── RayUnavailableError      ``executor = "ray"`` without the ``ray`` package
    └── ServerError              an engine server could not be started or got no ready
        ├── VllmServerError         ... a vLLM server
        └── LlamaServerError        ... a llama.cpp llama-server
"""

from __future__ import annotations

from pathlib import Path


class DeepseekBenchError(Exception):
    """Root of every error this library raises on purpose."""


class LiveGateError(DeepseekBenchError):
    """The :class:`~deepseekbench.LiveGate` refused a request before any socket opened.

    Raised when a non-loopback host is asked for without an API key and
    ``spend=True``, or when a budget (``max_requests``, ``max_output_tokens``)
    is spent. The message names the host and what is missing, never the key.
    """

    def __init__(self, message: str, *, host: str, missing: tuple[str, ...]) -> None:
        super().__init__(message)
        self.host = host
        self.missing = missing


class RowFormatError(DeepseekBenchError):
    """A JSONL line could not be read back as a :class:`~deepseekbench.Row`.

    Carries the 1-based ``line_number`` of the offending line.
    """

    def __init__(self, message: str, *, line_number: int) -> None:
        super().__init__(message)
        self.line_number = line_number


class PlanError(DeepseekBenchError):
    """A benchmark plan is invalid (raised at validation, before any request)."""


class MissingExtraError(DeepseekBenchError, ImportError):
    """An optional dependency is not installed (the message names the extra to install)."""


class RouteUnreachableError(PlanError):
    """One or more routes failed the reachability probe before any measurement (see
    ``deepseekbench._net._probe``): nothing answered, the server answered with an HTTP
    error, or it does not serve the route's model.

    ``failures`` maps each failed route's label to what failed: ``"connect"``,
    ``"timeout"``, ``"http_status"`` or ``"model_not_served"``. The message names
    every failed route, the URL probed (never its user-info) and the detail
    (the OS error, the HTTP status, the models served); never a key.
    """

    def __init__(self, message: str, *, failures: dict[str, str]) -> None:
        super().__init__(message)
        self.failures = dict(failures)

    @property
    def routes(self) -> tuple[str, ...]:
        """The labels of the routes that failed, in plan order."""
        return tuple(self.failures)


class WorkloadFormatError(PlanError):
    """A workload file is malformed; the message names the file and the line.

    ``path``: the file; ``line_number``: 1-based line (0 when the whole file is
    at fault, e.g. unreadable or empty).
    """

    def __init__(self, message: str, *, path: str | Path, line_number: int = 0) -> None:
        super().__init__(message)
        self.path = str(path)
        self.line_number = line_number


class WorkloadLengthError(PlanError):
    """A cell's prompts fall outside its context bucket's token range.

    ``cell``: the cell id; ``prompts``: ``(item id, tokens)`` of every prompt
    outside the range (the message names the first ten).
    """

    def __init__(self, message: str, *, cell: str, prompts: tuple[tuple[str, int], ...]) -> None:
        super().__init__(message)
        self.cell = cell
        self.prompts = prompts


class TaskFormatError(PlanError):
    """A task file or task record is invalid; carries the 1-based ``line_number`` (0 = n/a)."""

    def __init__(self, message: str, *, line_number: int = 0) -> None:
        super().__init__(message)
        self.line_number = line_number


class ModelCapabilityError(DeepseekBenchError):
    """A model file could not be read for its capabilities.

    Raised for a missing or unreadable file, a file that is not GGUF / not a JSON
    object, a GGUF without ``general.architecture``, a depth value that is not a
    non-negative integer, and (from the GGUF readers) when the optional ``gguf``
    package is not installed. ``source`` names the file (or ``"<dict>"``).
    """

    def __init__(self, message: str, *, source: str) -> None:
        super().__init__(message)
        self.source = source


class TokenizeError(DeepseekBenchError):
    """Tokens could not be counted: the tokenize endpoint failed or answered
    something that is not a token list, or a tokenizer file is unusable.

    The message names the URL or file; ``source`` holds it too.
    """

    def __init__(self, message: str, *, source: str) -> None:
        super().__init__(message)
        self.source = source


class ResultsFormatError(DeepseekBenchError):
    """A results JSONL file cannot be read back (carries the 1-based ``line_number``)."""

    def __init__(self, message: str, *, line_number: int = 0) -> None:
        super().__init__(message)
        self.line_number = line_number


class ResultsInUseError(ResultsFormatError):
    """Another run holds the results file's lock: two writers would mix their records."""


class ResultsWriteError(ResultsFormatError):
    """A record could not be written (e.g. no space left on the device).

    Every record written before it is intact; the run stops.
    """


class AcceptanceProfileError(DeepseekBenchError, ValueError):
    """An acceptance profile file (or the row it is made from) breaks the profile's
    format or its consistency check: acceptance length = 1 + Σ marginal acceptance,
    marginal never rising with the position, conditional = marginal[i] / marginal[i-1]
    (``deepseekbench._analysis._acceptance_profile``)."""


class UnknownKeyError(DeepseekBenchError, KeyError):
    """A route label, cell id or load point key that a result does not hold (raised by
    the accessors of :class:`~deepseekbench.RunResult`, e.g. ``samples(load=...)``).

    Also a :class:`KeyError`, so ``except KeyError`` catches it. ``kind``: ``"route"``,
    ``"cell"`` or ``"load"``; ``key``: what was asked for; ``known``: the keys that
    exist, in plan order (the message names them).
    """

    def __init__(self, kind: str, key: object, known: tuple[str, ...]) -> None:
        words = {"route": "route labels", "cell": "cells"}.get(kind, f"{kind} keys")
        if isinstance(key, str):
            text = f"no {kind} {key!r} in this run; known {words}: {list(known)}"
        else:  # e.g. a Row where its route label belongs: name the type, not its repr
            text = (
                f"{kind} must be a string, not a {type(key).__name__}; known {words}: {list(known)}"
            )
            if type(key).__name__ == "Row":
                text += (
                    " (for a row, pass its keys: route, cell, load = "
                    "result.row_keys[result.rows.index(row)], or use "
                    "result.speedup_evidence(row))"
                )
        super().__init__(text)
        self.kind = kind
        self.key = key
        self.known = known

    def __str__(self) -> str:  # KeyError's own __str__ would quote the message
        return str(self.args[0])


class UnknownMetricError(UnknownKeyError, ValueError, AttributeError):
    """A metric name that is none of the known ones: a speedup metric
    (:class:`~deepseekbench.SpeedupMetric`, e.g. ``compare_speedup(metric=...)``,
    ``Scorecard.from_run(metric=...)``) or a per-request or window figure of a
    :class:`~deepseekbench.RunResult` (``samples``, ``round_values``,
    ``speedup_evidence``). The message names the valid names (``known``).

    Also a :class:`KeyError` (as :class:`UnknownKeyError`), a :class:`ValueError` (what a
    bad speedup metric raised before) and an :class:`AttributeError` (what a bad figure
    name of a result raised before), so existing ``except`` clauses still catch it.
    """

    def __init__(self, key: object, known: tuple[str, ...], *, what: str = "metric") -> None:
        super().__init__("metric", key, known)
        allowed = ", ".join(repr(k) for k in known)
        self.args = (f"{key!r} is not a valid {what}; allowed: {allowed}",)


class FractionFormatError(DeepseekBenchError, ValueError):
    """A threshold or margin given in none of the accepted forms: a fraction (``0.05``)
    or a percent string (``"5%"``, ``"5 %"``), inside its allowed range
    (``deepseekbench._types._fraction.parse_fraction``). Also a :class:`ValueError`.
    The message names the argument, the value and the accepted forms."""


class StepCostsError(DeepseekBenchError, ValueError):
    """Step costs or a step-cost witness's input that cannot be used
    (``deepseekbench._analysis._step_witness``): a :class:`~deepseekbench.StepCosts`
    cost (ms) not a finite number > 0, an empty ``source`` or an unknown field; or a
    :func:`~deepseekbench.witness_step_costs` call given something other than a
    :class:`~deepseekbench.SpeedupDecomposition` (a scorecard line's ``decomposition`` is
    ``None`` where no speedup is credited) or other than :class:`~deepseekbench.StepCosts`.
    Also a :class:`ValueError`. The message names the argument, the value and what
    was expected."""


class WorkerError(DeepseekBenchError):
    """A client worker failed (an exception inside it, or it did not start in time).

    Carries the ``worker`` number. Records it had sent are kept.
    """

    def __init__(self, message: str, *, worker: int) -> None:
        super().__init__(message)
        self.worker = worker


class RayAddressError(PlanError, ValueError):
    """A Ray cluster address (a plan's ``ray_address``, ``--ray-address``, or what
    ``"auto"`` resolves to) outside the grammar the gate judges: ``host:port`` or
    ``ray://host:port`` with an IP literal or ``localhost`` as host
    (``deepseekbench._plan._ray_address``). Raised before Ray is imported."""


class KeyFormatError(DeepseekBenchError, ValueError):
    """An API key with a character that cannot go into an HTTP header unchanged:
    a control character (CR, LF, NUL, …), a space, or a non-ASCII character.

    Raised where a key enters (a :class:`~deepseekbench.LiveGate`, an
    :class:`~deepseekbench.EngineRoute`, a route's ``api_key_env``), before any
    request; the message names where the key came from and the kind of
    character, never the key.
    """


class RayUnavailableError(DeepseekBenchError):
    """``executor = "ray"`` was asked for but the ``ray`` package is not installed."""


class ServerError(DeepseekBenchError):
    """An engine server could not be found, started, or did not become ready in time.

    ``name`` is the route name; ``log_path`` the server's log file (``None`` when the
    process never started). The message carries the last lines of the log.
    """

    def __init__(self, message: str, *, name: str, log_path: Path | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.log_path = log_path


class VllmServerError(ServerError):
    """A vLLM server could not be found, started, or did not become healthy in time.

    ``name`` is the route name; ``log_path`` the server's log file (``None`` when the
    process never started). The message carries the last lines of the log.
    """


class LlamaServerError(ServerError):
    """llama-server could not be found, started, or did not become healthy in time.

    ``name`` is the route name; ``log_path`` the server's log file (``None`` when the
    process never started). The message carries the last lines of the log.
    """


# natural-length decode: the calibration pass
class CalibrationError(DeepseekBenchError):
    """The calibration pass on ``off`` (``workload.output_length = "pinned"`` or
    ``"forced"``) gave no natural output length for some items (an errored or
    uncounted request); raised before any measured request, every calibration
    record kept, so a rerun retries only those. ``items``: ``"<cell>:<item id>"``
    of each."""

    def __init__(self, message: str, *, items: tuple[str, ...]) -> None:
        super().__init__(message)
        self.items = items
