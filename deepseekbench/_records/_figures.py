"""Derived per-request figures, each defined once (pure, no I/O).

Every stage that needs one of these figures calls the function here: the
measurement itself (``_measure``), the token recount (``_tokens``), the worker
pools' budget charge (``_execute``), and the row and slice statistics
(``_analysis``). Definitions and sources: ``docs/measurement.md``.

* :func:`output_tokens`: a request's output length (tokens), ``None`` when unknown.
* :func:`counted_output_tokens`: the same with unknown counted as 0 tokens, for sums.
* :func:`tpot_ms`: time per output token (ms/token).
* :func:`output_toks_per_s`: a request's output speed (tokens/s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deepseekbench._records._measurement import StreamMeasurement

__all__ = ["counted_output_tokens", "output_tokens", "output_toks_per_s", "tpot_ms"]


def output_tokens(m: StreamMeasurement) -> int | None:
    """Output tokens of one request (tokens); ``None`` when unknown.

    The engine's usage count (``completion_tokens``) when it sent one, else the
    client's estimate (``estimated_completion_tokens``: token ids or token-bearing
    chunks streamed, or a tokenizer recount). ``None`` only when neither exists
    (e.g. a request that failed before the stream was read), following
    :class:`~deepseekbench.StreamMeasurement`'s rule that unknown is ``None``,
    never 0. Source: the usage block of OpenAI's chat completions API
    (``usage.completion_tokens``), as vLLM's ``bench serve`` reads it.
    """
    if m.completion_tokens is not None:
        return m.completion_tokens
    return m.estimated_completion_tokens


def counted_output_tokens(m: StreamMeasurement) -> int:
    """:func:`output_tokens` with unknown counted as 0 (tokens).

    For sums over requests, where a request with no known output adds nothing:
    the output-token budget a finished request is charged
    (``LiveGate.charge_output_tokens``) and the tokens of a row's window
    throughput. Figures of one request (percentiles, "short output") use
    :func:`output_tokens` and treat ``None`` as unknown.
    """
    n = output_tokens(m)
    return 0 if n is None else n


def tpot_ms(ttft_ms: float | None, e2e_ms: float | None, n_tokens: int | None) -> float | None:
    """Time per output token after the first: ``(e2e − ttft) / (tokens − 1)`` (ms/token).

    Args:
        ttft_ms: time to first token (ms).
        e2e_ms: time to last token (ms).
        n_tokens: output tokens of the request (tokens).

    Returns:
        ``None`` when a time or the count is unknown, or fewer than 2 tokens came
        (no decode interval to divide). Source: vLLM ``bench serve``'s TPOT
        (latency minus TTFT over output length minus one), ``docs/measurement.md``.
    """
    if ttft_ms is None or e2e_ms is None or n_tokens is None or n_tokens < 2:
        return None
    return (e2e_ms - ttft_ms) / (n_tokens - 1)


def output_toks_per_s(e2e_ms: float | None, n_tokens: int | None) -> float | None:
    """One request's output speed: ``tokens / e2e`` (tokens/s).

    ``None`` when E2E latency is unknown or not positive, or the count is unknown
    or 0. Source: per-request output throughput as vLLM's ``bench serve``
    reports it (``docs/measurement.md``, ``output_toks_per_s``).
    """
    if e2e_ms is None or e2e_ms <= 0 or not n_tokens:
        return None
    return n_tokens / (e2e_ms / 1000.0)
