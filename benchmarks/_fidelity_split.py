"""Where a request's TTFT excess from the call lives, and how a reader's starts are spread.

Used by ``bench_fidelity.py``. No I/O, no clock: every input is a recorded stamp
(perf_counter ns, the client's and the engine's on one clock).

TTFT excess from the call (AIPerf's clock) = client TTFT from the call − engine TTFT
(engine first-token send − engine arrival). It splits exactly into three parts:

* **client wait**: the call → the client's send of the body (pool wait + the wait to
  write: ``measure_streamed``'s ``pool_wait_ms + send_wait_ms``; AIPerf's
  ``http_req_blocked + http_req_dns_lookup + http_req_connecting``); ``None`` where the
  reader does not stamp its send (the raw aiohttp loop), its wait then sits in the next;
* **send → engine arrival**: the client's send (else the call) → the engine's arrival
  stamp (the kernel, the wire, and the engine's own loop reading the request);
* **the rest**: client arrival of the first token − engine send of it (the
  receive-side TTFT error).

Start spread: a closed loop's first ``C`` calls (wave 1) and the next ``C`` (wave 2),
each as the span from its first to its last call (ms), in call order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ExcessSplit:
    """One request's TTFT excess from the call and its parts (ms); ``client_wait`` is
    ``None`` where the reader does not stamp its send. ``excess`` equals the sum of the
    parts (``client_wait`` counted as 0 when ``None``) up to float rounding of ns / 1e6."""

    excess: float
    client_wait: float | None
    send_to_arrival: float
    rest: float


def excess_split(
    call_ns: int, send_ns: int | None, first_chunk_ns: int, arrival_ns: int, engine_first_ns: int
) -> ExcessSplit:
    """Split ``(first_chunk − call) − (engine_first − arrival)`` (all perf_counter ns;
    ``send_ns``: the client's send stamp or ``None``) into client wait, send → engine
    arrival and the rest (ms). Raises nothing: negative parts are kept (a clock
    offset or a stamp taken late shows as one)."""
    sent = call_ns if send_ns is None else send_ns
    excess = (first_chunk_ns - call_ns) - (engine_first_ns - arrival_ns)
    wait = None if send_ns is None else (send_ns - call_ns) / 1e6
    return ExcessSplit(
        excess=excess / 1e6,
        client_wait=wait,
        send_to_arrival=(arrival_ns - sent) / 1e6,
        rest=(first_chunk_ns - engine_first_ns) / 1e6,
    )


def wave_spans_ms(calls_ns: Sequence[int], concurrency: int, waves: int = 2) -> list[float]:
    """Per wave ``k < waves`` (calls ``k·C .. (k+1)·C − 1`` in call order): last call −
    first call (ms). A wave with fewer than two calls is left out. Raises ``ValueError``
    when ``concurrency`` is below 1."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1 (got {concurrency})")
    ordered = sorted(calls_ns)
    spans: list[float] = []
    for k in range(waves):
        wave = ordered[k * concurrency : (k + 1) * concurrency]
        if len(wave) >= 2:
            spans.append((wave[-1] - wave[0]) / 1e6)
    return spans


def ramp_for_span_ms(span_ms: float, concurrency: int) -> float:
    """The ramp (``arrival.ramp_ms``: stream ``s`` of ``C`` starts at ``s·R/C``) whose
    last stream starts ``span_ms`` after the first: ``span_ms · C / (C − 1)`` (``0``
    at ``C = 1``). Raises ``ValueError`` when ``concurrency`` is below 1."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1 (got {concurrency})")
    return 0.0 if concurrency == 1 else span_ms * concurrency / (concurrency - 1)
