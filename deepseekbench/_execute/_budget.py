"""A run's budget refusal, held until the requests the budget already admitted finish.

Budgets (``max_requests``, ``max_output_tokens`` on the
:class:`~deepseekbench.LiveGate`) belong to the run. When one is spent while
requests are in flight, raising the gate's :class:`~deepseekbench.LiveGateError`
at once would cancel those requests, already admitted and sent, and lose their
measurements. Every executor (this process, a worker process, a Ray actor)
instead holds the refusal in a :class:`BudgetStop`: the requests in flight
finish and are recorded, the refused request and every later one of the same
block (or worker share) are recorded unsent with error kind ``budget_refused``
(nothing measured, so no speed or parity verdict uses them; a resumed run,
which retries errored measurements, sends them), and the refusal is raised once
the block's task group is done (the CLI exits 3, as for any gate refusal).
A refusal that is not (only) a spent budget, such as a host the gate refuses,
is not held: it raises where it happened.
"""

from __future__ import annotations

from typing import Any

from deepseekbench._errors import LiveGateError
from deepseekbench._net._gate import is_budget_refusal
from deepseekbench._net._route import EngineRoute
from deepseekbench._records._measurement import ErrorKind, StreamError, StreamMeasurement

__all__ = ["BudgetStop", "client_fault_measurement"]


def client_fault_measurement(
    route: EngineRoute | None, kind: ErrorKind, message: str
) -> StreamMeasurement:
    """The record of a request the client could not finish or send (``worker_died``,
    ``budget_refused``): the error and the route's identity, nothing measured."""
    err = StreamError(kind=kind, message=message)
    extra: dict[str, Any] = {}
    if route is not None:
        extra = {"dialect": route.dialect, "speculative": route.speculative}
        extra["route_label"] = route.label
    return StreamMeasurement(error=err, errors=[err], **extra)


class BudgetStop:
    """The budget's refusal of one block or worker share, once it came.

    Use one per task group: :meth:`hold` when a request is refused,
    :meth:`unsent` for the record of each request not sent, :meth:`raise_held`
    after the task group ended (every admitted request finished).
    """

    def __init__(self) -> None:
        self.refusal: LiveGateError | None = None

    @property
    def stopped(self) -> bool:
        """Whether the budget refused a request of this block (send nothing more)."""
        return self.refusal is not None

    def hold(self, exc: LiveGateError) -> None:
        """Hold ``exc`` (the first refusal is kept) when it is a spent budget.

        Raises:
            LiveGateError: ``exc`` itself when it is not only a spent budget (a
                refused host, a client the gate does not wrap): not held.
        """
        if not is_budget_refusal(exc):
            raise exc
        if self.refusal is None:
            self.refusal = exc

    def unsent(self, route: EngineRoute) -> StreamMeasurement:
        """The record of a request to ``route`` not sent because the budget refused
        (error kind ``budget_refused``, the refusal's message, nothing measured)."""
        assert self.refusal is not None, "unsent() before a refusal was held"
        return client_fault_measurement(route, ErrorKind.budget_refused, str(self.refusal))

    def raise_held(self) -> None:
        """Raise the held refusal (and forget it); nothing when none was held.

        Raises:
            LiveGateError: the budget's refusal of this block or share.
        """
        refusal, self.refusal = self.refusal, None
        if refusal is not None:
            raise refusal
