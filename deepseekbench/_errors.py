"""One exception hierarchy with a single root, :class:`DeepseekBenchError`.

Caller mistakes raise these; server misbehaviour never does (it is recorded on
the measurement as an error kind instead). No message ever contains an API key.
"""

from __future__ import annotations


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
