"""Every known name of a speculative-decoding count, per engine, in one table.

Engines report the same three counts under many names, per request (a JSON
field of the response) and server-wide (a Prometheus counter family). Both
readers ask this table, so a name learnt for one place is never missing from
the other, and each name is read as one of three kinds:

* ``verify_steps``: target-model verify passes (a "draft round", a "spec
  step"): any round count an engine reports beside its drafted tokens is a
  verify-step count, and acceptance length = 1 + accepted / verify steps;
* ``draft_tokens``: draft tokens proposed (tokens);
* ``accepted_tokens``: draft tokens accepted (tokens, the bonus token excluded);
* ``accepted_per_position`` (Prometheus only): accepted draft tokens per 0-based
  ``position`` label.

Sources: vLLM ``v1/spec_decode/metrics.py`` (``vllm:spec_decode_num_drafts``,
``..._num_draft_tokens``, ``..._num_accepted_tokens``, ``..._per_pos``) and its
per-request ``speculative_decoding`` stats (``num_spec_steps`` / ``num_drafts``,
``num_draft_tokens``, ``num_accepted_draft_tokens`` / ``num_accepted_tokens``);
SGLang ``tokenizer_manager`` meta info (``spec_verify_ct``,
``spec_num_correct_drafts`` and its older names, ``spec_num_proposed_drafts``
and its older names; its ``/metrics`` has gauges only, see ``sglang.py``);
llama.cpp ``tools/server`` ``timings`` (``draft_n``, ``draft_n_accepted``, and
``draft_rounds`` where a build reports its rounds) and ``llamacpp:spec_decode_*``
(PR #26389); TensorRT-LLM ``trtllm_spec_decode_*`` (iteration stats, and the
per-request totals; no verify-step counter).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from deepseekbench._dialects._base import CounterSet
from deepseekbench._types._axes import Dialect

__all__ = [
    "SPEC_COUNTERS",
    "CounterKind",
    "SpecCounter",
    "first_count",
    "prometheus_sets",
    "request_names",
]


class CounterKind(StrEnum):
    """What a speculative count counts (module docstring)."""

    verify_steps = "verify_steps"
    draft_tokens = "draft_tokens"
    accepted_tokens = "accepted_tokens"
    accepted_per_position = "accepted_per_position"


@dataclass(frozen=True)
class SpecCounter:
    """One name of one count: where it is read (``request``: a per-request JSON
    field; ``prometheus``: a counter family, written without ``_total``), and the
    group it belongs to (a Prometheus family set's ``source``; the JSON block)."""

    engine: Dialect
    place: Literal["request", "prometheus"]
    group: str
    kind: CounterKind
    name: str


def _rows(
    engine: Dialect, place: Literal["request", "prometheus"], group: str, **names: tuple[str, ...]
) -> tuple[SpecCounter, ...]:
    return tuple(
        SpecCounter(engine, place, group, CounterKind(kind), name)
        for kind, aliases in names.items()
        for name in aliases
    )


_V, _S, _L, _T = Dialect.vllm, Dialect.sglang, Dialect.llamacpp, Dialect.trtllm

SPEC_COUNTERS: tuple[SpecCounter, ...] = (
    # vLLM per request: metrics.speculative_decoding, choices[].speculative_decoding_stats
    *_rows(
        _V,
        "request",
        "speculative_decoding",
        verify_steps=("num_spec_steps", "num_drafts"),
        draft_tokens=("num_draft_tokens",),
        accepted_tokens=("num_accepted_draft_tokens", "num_accepted_tokens"),
    ),
    *_rows(
        _V,
        "prometheus",
        "prometheus:vllm:spec_decode_*",
        verify_steps=("vllm:spec_decode_num_drafts",),
        draft_tokens=("vllm:spec_decode_num_draft_tokens",),
        accepted_tokens=("vllm:spec_decode_num_accepted_tokens",),
        accepted_per_position=("vllm:spec_decode_num_accepted_tokens_per_pos",),
    ),
    # SGLang per request: sglext.spec_tokens_details, meta_info
    *_rows(
        _S,
        "request",
        "meta_info",
        verify_steps=("spec_verify_ct",),
        draft_tokens=("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num"),
        accepted_tokens=(
            "spec_num_correct_drafts",
            "spec_accepted_drafts",
            "spec_accept_token_num",
            "spec_accepted_tokens",
        ),
    ),
    # llama.cpp per request: timings
    *_rows(
        _L,
        "request",
        "timings",
        verify_steps=("draft_rounds",),
        draft_tokens=("draft_n",),
        accepted_tokens=("draft_n_accepted",),
    ),
    *_rows(
        _L,
        "prometheus",
        "prometheus:llamacpp:spec_decode_*",
        verify_steps=("llamacpp:spec_decode_num_drafts",),
        draft_tokens=("llamacpp:spec_decode_num_draft_tokens",),
        accepted_tokens=("llamacpp:spec_decode_num_accepted_tokens",),
        accepted_per_position=("llamacpp:spec_decode_num_accepted_tokens_per_pos",),
    ),
    # TensorRT-LLM: iteration stats, else the per-request totals
    *_rows(
        _T,
        "prometheus",
        "prometheus:trtllm_spec_decode_num_*",
        draft_tokens=("trtllm_spec_decode_num_draft_tokens",),
        accepted_tokens=("trtllm_spec_decode_num_accepted_tokens",),
    ),
    *_rows(
        _T,
        "prometheus",
        "prometheus:trtllm_spec_decode_*_tokens",
        draft_tokens=("trtllm_spec_decode_drafted_tokens",),
        accepted_tokens=("trtllm_spec_decode_accepted_tokens",),
    ),
)
"""Every known name (module docstring); the first name of a kind is preferred."""


def request_names(engine: Dialect, kind: CounterKind) -> tuple[str, ...]:
    """The per-request JSON field names of ``kind`` for ``engine``, preferred first."""
    return tuple(
        c.name for c in SPEC_COUNTERS if (c.engine, c.place, c.kind) == (engine, "request", kind)
    )


def first_count(block: Mapping[str, Any], engine: Dialect, kind: CounterKind) -> Any:
    """The raw value of the first of :func:`request_names` present (not null) in
    ``block``, else ``None`` (validated by the record, never here)."""
    for name in request_names(engine, kind):
        value = block.get(name)
        if value is not None:
            return value
    return None


def prometheus_sets(engine: Dialect) -> tuple[CounterSet, ...]:
    """``engine``'s Prometheus counter family sets, one per group, in table order.

    Raises:
        ValueError: a group of the table lacks its drafted or accepted family.
    """
    groups: dict[str, dict[CounterKind, str]] = {}
    for c in SPEC_COUNTERS:
        if (c.engine, c.place) == (engine, "prometheus"):
            groups.setdefault(c.group, {}).setdefault(c.kind, c.name)
    sets = []
    for group, names in groups.items():
        if CounterKind.draft_tokens not in names or CounterKind.accepted_tokens not in names:
            raise ValueError(f"{group}: a counter set needs drafted and accepted families")
        sets.append(
            CounterSet(
                source=group,
                drafts=names.get(CounterKind.verify_steps),
                draft_tokens=names[CounterKind.draft_tokens],
                accepted=names[CounterKind.accepted_tokens],
                per_position=names.get(CounterKind.accepted_per_position),
            )
        )
    return tuple(sets)
