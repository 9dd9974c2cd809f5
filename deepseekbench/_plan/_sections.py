"""What a plan sends and how it judges parity: the ``[workload]`` and ``[parity]`` sections.

Holds :class:`WorkloadPlan` (the prompt source, tokenizer, shared prefixes or a
trace, and the output length rule) and :class:`ParityPlan` (the deterministic
parity set and its verdict rule), with :data:`DATASET_SOURCES`.
"""

from __future__ import annotations

import warnings
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, model_validator

from deepseekbench._plan._model_config import PLAN_CONFIG, Seed
from deepseekbench._plan._output_length import OutputLength, OutputLengthMode
from deepseekbench._plan._prefix import SharedPrefix
from deepseekbench._plan._tasks import DEFAULT_TOLERANCE
from deepseekbench._plan._trace import TracePlan
from deepseekbench._plan._workload import MAX_CONTEXT_TOKENS, InputLength
from deepseekbench._types._fraction import parse_fraction

__all__ = ["DATASET_SOURCES", "ParityPlan", "WorkloadPlan"]

DATASET_SOURCES = ("speed_bench", "mt_bench")
"""Dataset sources read by ``deepseekbench._plan._datasets``."""


class WorkloadPlan(BaseModel):
    """The prompts measured for speed, cycled over each cell's requests.

    Sources (``source``):

    * ``default``: ``prompts`` inline, or ``prompts_file`` (JSONL of
      ``{"prompt": "..."}`` lines, relative to the plan file), else the built-in
      smoke tasks' prompts;
    * ``sharegpt``, ``spec_bench``, ``jsonl``, ``speed_bench`` (SPEED-Bench rows;
      ``speed_bench_by`` groups them by ``category`` or entropy ``tier``),
      ``mt_bench`` (MT-bench ``question.jsonl``): the file at ``path`` in that
      format (``path = "sample"`` picks the small sample shipped with the
      package); ``categories`` keeps only those categories;
    * ``synthetic``: ``n_prompts`` prompts per cell generated to
      ``input_length`` tokens (default: fixed at ¾ of the cell's bucket bound),
      sized with ``tokenizer`` (required); or, with ``shared_prefix``
      (:class:`~deepseekbench.SharedPrefix`), groups of prompts opening with
      one shared prefix each, optionally multi-turn; or, with ``trace``
      (:class:`~deepseekbench.TracePlan`), a Mooncake trace replayed at its own
      arrival times and with its shared blocks.

    ``tokenizer``: ``"endpoint"`` (the ``off`` route's ``POST /tokenize``) or a
    path to a Hugging Face ``tokenizer.json`` (or its folder); with it every
    cell's prompts are counted and must fall in the bucket's token range, and
    outputs without usage are counted with it. Without it only the byte bound is
    checked (a prompt of fewer UTF-8 bytes than the bucket's lower bound is
    refused).

    ``output_length``: ``pinned`` (default: a calibration pass on
    ``off`` finds each prompt's natural length, every route decodes exactly
    that), ``natural`` (stop at EOS under the cap) or ``forced`` (decode to the
    cap past EOS; rows carry ``tokens_past_eos``); parity requests always stop
    at EOS. ``output_tokens``: an :class:`OutputLength` distribution of per-item
    caps (tokens). The deprecated ``reach_max_tokens`` reads as ``forced``
    (true) or ``natural`` (false). See ``deepseekbench._plan._output_length``.

    Raises:
        pydantic.ValidationError: an unknown field or source, a non-string
            prompt, a file source without ``path``, ``input_length`` or
            ``n_prompts`` on a non-synthetic source, a synthetic source without
            ``tokenizer``, ``prompts``/``prompts_file`` with another source, an
            ``output_tokens`` ``dataset`` distribution without reference answers
            or a tokenizer, or ``reach_max_tokens`` contradicting ``output_length``.
    """

    model_config = PLAN_CONFIG

    source: Literal[
        "default", "sharegpt", "spec_bench", "jsonl", "synthetic", "speed_bench", "mt_bench"
    ] = "default"  # speed_bench, mt_bench
    prompts: tuple[str, ...] = ()
    prompts_file: str | None = None
    path: str | None = None
    categories: tuple[str, ...] = ()
    input_length: InputLength | None = None
    n_prompts: int | None = Field(default=None, ge=1, le=10_000)
    tokenizer: str | None = Field(default=None, min_length=1)
    # shared-prefix workloads (groups x prefix x suffixes, multi-turn)
    shared_prefix: SharedPrefix | None = Field(
        default=None,
        description="synthetic only: groups x a shared prefix of prefix_tokens tokens x "
        "suffixes unique suffixes of suffix_tokens tokens (turns > 1: growing chats)",
    )

    speed_bench_by: Literal["category", "tier"] = Field(
        default="category",
        description="source='speed_bench': group items by category (domain) or entropy tier",
    )
    trace: TracePlan | None = Field(
        default=None,
        description="synthetic only: replay a Mooncake JSONL trace (timestamp ms, "
        "input_length, output_length, hash_ids) at its own arrival times / speedup",
    )

    @model_validator(mode="after")
    def _shared_prefix_fields(self) -> WorkloadPlan:
        for key in ("shared_prefix", "trace"):
            if getattr(self, key) is None:
                continue
            if self.source != "synthetic":
                raise ValueError(f"{key} is for source='synthetic'")
            if self.input_length is not None or self.n_prompts is not None:
                raise ValueError(
                    f"{key} sets the lengths and the count: drop input_length and n_prompts"
                )
        if self.shared_prefix is not None and self.trace is not None:
            raise ValueError("give one of shared_prefix or trace (a trace has its own prefixes)")
        return self

    # output length (replaces reach_max_tokens; see _output_length)
    output_length: OutputLengthMode = Field(
        default="pinned",
        description="pinned: decode each prompt's natural length (calibrated on off) on "
        "every route; natural: stop at EOS under the cap; forced: decode to the cap past EOS",
    )
    output_tokens: OutputLength | None = Field(
        default=None, description="per-item output cap distribution (tokens); None: the cell's"
    )
    require_all_items: bool = Field(
        default=False,
        description="refuse a plan whose requests_per_cell leaves workload items unsent "
        "(default: a WorkloadCoverageWarning)",
    )

    @model_validator(mode="before")
    @classmethod
    def _old_reach_max_tokens(cls, data: Any) -> Any:
        """Plans written before natural-length decode: ``reach_max_tokens`` true → ``forced``,
        false → ``natural`` (deprecated; a FutureWarning says so)."""
        if not isinstance(data, dict) or "reach_max_tokens" not in data:
            return data
        data = dict(data)
        old = data.pop("reach_max_tokens")
        if not isinstance(old, bool):
            raise ValueError("reach_max_tokens (deprecated) must be true or false")
        mapped = "forced" if old else "natural"
        if data.get("output_length", mapped) != mapped:
            raise ValueError(
                f"reach_max_tokens = {str(old).lower()} contradicts output_length = "
                f"{data['output_length']!r}: give output_length only"
            )
        warnings.warn(
            f"workload.reach_max_tokens is deprecated: read as output_length = {mapped!r}",
            FutureWarning,
            stacklevel=2,
        )
        data["output_length"] = mapped
        return data

    @model_validator(mode="after")
    def _output_fields(self) -> WorkloadPlan:
        ol = self.output_tokens
        if ol is not None and ol.distribution == "dataset":
            if self.source not in ("sharegpt", "jsonl"):
                raise ValueError(
                    "output_tokens distribution 'dataset' needs reference answers: "
                    "source 'sharegpt' or 'jsonl'"
                )
            if self.tokenizer is None:
                raise ValueError("output_tokens distribution 'dataset' needs a tokenizer")
        return self

    @model_validator(mode="after")
    def _source_fields(self) -> WorkloadPlan:
        file_source = self.source in ("sharegpt", "spec_bench", "jsonl", *DATASET_SOURCES)
        if file_source and self.path is None:
            raise ValueError(f"source={self.source!r} needs a path (or path='sample')")
        if not file_source and (self.path is not None or self.categories):
            raise ValueError(
                "path and categories are for the sharegpt, spec_bench, jsonl, speed_bench, "
                "mt_bench sources"
            )
        if self.source != "synthetic" and (
            self.input_length is not None or self.n_prompts is not None
        ):
            raise ValueError("input_length and n_prompts are for source='synthetic'")
        if self.source == "synthetic" and self.tokenizer is None:
            raise ValueError("source='synthetic' needs a tokenizer ('endpoint' or a path)")
        if self.source != "default" and (self.prompts or self.prompts_file):
            raise ValueError("prompts and prompts_file are for source='default'")
        return self


def _percent(value: object) -> object:
    """A plan's share given as a percent string (``"5%"``) as its fraction; any other
    value is left to the field's own check (``deepseekbench._types._fraction``)."""
    if isinstance(value, str):
        return parse_fraction(value, name="parity.tolerance")
    return value


class ParityPlan(BaseModel):
    """The deterministic parity set run on every route.

    Attributes:
        prompts: extra parity prompts (exact acceptance only).
        tasks: ``"smoke"`` (built-in set), ``"none"``, or a JSONL task file path.
        task_mode: ``strict`` or ``lenient`` (see :func:`~deepseekbench.task_parity`).
        tolerance: lenient bound on the pass → fail rate (fraction of tasks).
        alpha: lenient McNemar level.
        max_tokens: output bound for parity requests (tokens).
        seed: the fixed ``seed`` sent with every parity request.
        task_temperature: 0 (default) makes task prompts deterministic and part
            of exact acceptance; above 0 they are sampled and judged by task
            parity alone.
        determinism_control: run ``off`` twice (needed for a verified ``off`` row).
        concurrency: parity requests in flight per route (requests, 1..256).
        exact: the parity verdict's rule: ``bit_exact`` (default; every output identical
            to ``off``'s) or ``within_noise`` (every divergence a near-tie of ``off``'s
            own logprobs, no more diverged outputs than near-tie opportunities in
            ``off``'s outputs, and a sample that could catch a lossy route;
            docs/rows-and-gate.md, "Parity within noise").
        tau_nats: the near-tie bound τ (nats, >= 0); ``None`` measures it from the
            engine's decode-vs-one-pass jitter, else the bfloat16 default (0.05 nats).
        forensics: after measurement, ask ``off`` for logprobs at every divergence and
            over its compared outputs (one follow-up at a time; never the speculative
            route).
        profile_outputs: most ``off`` outputs profiled per parity set and per cell and
            load point (outputs some route diverged from first; 0: none): each costs
            one follow-up request to ``off`` (and one one-pass scoring request).
        lossy_rate: the decisive-divergence rate per compared output (a fraction) a
            ``verified`` within-noise verdict must exclude at ``alpha`` (the
            Clopper-Pearson bound); a smaller sample gives ``unknown``.
        witness: above temperature 0, after measurement, ask ``off`` to score every
            route's sampled outputs in one pass (teacher forcing) and test that the
            tokens are draws from ``off``'s distribution (the distribution witness,
            docs/rows-and-gate.md); one follow-up request per output, to ``off`` only.
        witness_top_k: alternatives asked per scored position (tokens, 1..20).
        witness_min_tokens: tested (informative: selected by ``witness_max_top1``)
            tokens a route needs before its witness can verify (tokens; at the default
            the KS test detects a PIT-CDF distance of 0.087 and the log-score test a
            shift of 0.116 standard deviations per token, each at power 0.9).
        witness_max_top1: the witness's selection rule: a position whose tempered
            top-1 probability under ``off`` exceeds it is left out as near-certain
            (a probability in (0, 1]; 1 keeps every position). A function of ``off``'s
            distribution only, so a correct sampler's selected tokens stay iid draws.
        witness_max_requests / witness_max_tokens: bounds per route on the witness's
            follow-up requests, and on the output tokens they score (tokens).

    Raises:
        pydantic.ValidationError: ``tolerance`` outside [0, 1), ``alpha`` or
            ``lossy_rate`` outside (0, 1), ``profile_outputs`` negative,
            ``max_tokens`` below 1 or above ``MAX_CONTEXT_TOKENS``,
            ``task_temperature`` outside [0, 2], an unknown ``task_mode``, or an
            unknown field.
    """

    model_config = PLAN_CONFIG

    prompts: tuple[str, ...] = ()
    tasks: str = "smoke"
    task_mode: Literal["strict", "lenient"] = "strict"
    tolerance: Annotated[float, BeforeValidator(_percent)] = Field(
        default=DEFAULT_TOLERANCE, ge=0, lt=1
    )
    alpha: float = Field(default=0.05, gt=0, lt=1)
    max_tokens: int = Field(default=128, ge=1, le=MAX_CONTEXT_TOKENS)
    seed: Seed = 1234
    task_temperature: float = Field(default=0.0, ge=0, le=2)
    determinism_control: bool = True
    concurrency: int = Field(default=1, ge=1, le=256)
    # parity within the engine's own numerics (analysis keys: not hashed)
    exact: Literal["bit_exact", "within_noise"] = "bit_exact"
    tau_nats: float | None = Field(
        default=None, ge=0, description="near-tie bound τ (nats); None: calibrated"
    )
    forensics: bool = True
    profile_outputs: int = Field(default=64, ge=0, le=100_000)
    lossy_rate: float = Field(default=0.125, gt=0, lt=1)
    witness: bool = True
    witness_top_k: int = Field(default=20, ge=1, le=20)
    witness_min_tokens: int = Field(default=1000, ge=1)
    witness_max_top1: float = Field(default=0.999, gt=0, le=1)
    witness_max_requests: int = Field(default=200, ge=0)
    witness_max_tokens: int = Field(default=50_000, ge=0)
