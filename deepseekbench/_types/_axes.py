"""The benchmark's axis vocabularies: closed ``StrEnum`` sets.

Every axis is a closed vocabulary. An unknown value fails at the edge with a
message that lists the allowed values (``ValueError`` from the enum
constructor, ``pydantic.ValidationError`` inside a model).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal


class _ClosedEnum(StrEnum):
    """A ``StrEnum`` whose unknown-value error lists the allowed values."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        allowed = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"{value!r} is not a valid {cls.__name__}; allowed: {allowed}")


class ContextBucket(_ClosedEnum):
    """Prompt-length bucket: prompts of ``min_prompt_tokens``..``max_prompt_tokens`` tokens.

    The buckets tile the token line without overlap: ``1k`` = 1..1,024,
    ``8k`` = 1,025..8,192, ``32k`` = 8,193..32,768, ``128k`` = 32,769..131,072,
    ``1m`` = 131,073..1,048,576 prompt tokens (``docs/plan.md``).
    """

    k1 = "1k"
    k8 = "8k"
    k32 = "32k"
    k128 = "128k"
    m1 = "1m"

    @property
    def max_prompt_tokens(self) -> int:
        """Upper bound of the bucket, in prompt tokens (1,024 … 1,048,576)."""
        return _CONTEXT_BOUNDS[self.value]

    @property
    def min_prompt_tokens(self) -> int:
        """Lower bound of the bucket, in prompt tokens: one above the next smaller
        bucket's upper bound (1 for ``1k``)."""
        below = [b for b in _CONTEXT_BOUNDS.values() if b < self.max_prompt_tokens]
        return max(below, default=0) + 1

    @classmethod
    def for_tokens(cls, n: int) -> ContextBucket | None:
        """The bucket whose range holds ``n`` prompt tokens, or ``None`` (below 1 or
        above 1,048,576 tokens)."""
        return next((b for b in cls if b.min_prompt_tokens <= n <= b.max_prompt_tokens), None)


_CONTEXT_BOUNDS: dict[str, int] = {
    "1k": 1_024,
    "8k": 8_192,
    "32k": 32_768,
    "128k": 131_072,
    "1m": 1_048_576,
}


class OutputTarget(_ClosedEnum):
    """The request's ``max_tokens``: ``max_output_tokens`` output tokens."""

    t256 = "256"
    k1 = "1k"
    k8 = "8k"
    k32 = "32k"

    @property
    def max_output_tokens(self) -> int:
        """The request's max output tokens (256 … 32,768 tokens)."""
        return _OUTPUT_BOUNDS[self.value]


_OUTPUT_BOUNDS: dict[str, int] = {"256": 256, "1k": 1_024, "8k": 8_192, "32k": 32_768}


class ReasoningMode(_ClosedEnum):
    """DeepSeek V4's three reasoning-effort modes.

    ``non_think``: thinking disabled; ``think_high``: thinking with reasoning
    effort ``high``; ``think_max``: thinking with reasoning effort ``max``.
    How each engine dialect is told is documented in ``docs/measurement.md``.
    """

    non_think = "non_think"
    think_high = "think_high"
    think_max = "think_max"


class Speculative(_ClosedEnum):
    """The speculative-decoding method a route serves; ``off`` is the baseline.

    ``mtp``: Multi-Token Prediction heads (DeepSeek V3/V4 NextN layers);
    ``dspark``: DSpark drafting; ``eagle3``: EAGLE-3 draft head;
    ``draft``: a separate small draft model; ``ngram``: prompt n-gram lookup.
    """

    off = "off"
    mtp = "mtp"
    dspark = "dspark"
    eagle3 = "eagle3"
    draft = "draft"
    ngram = "ngram"


class QualityParity(_ClosedEnum):
    """Whether a row's outputs were shown equal to plain decoding.

    ``verified``: shown (exact acceptance and task parity for a speculative row;
    a passing determinism control with complete references for ``off``);
    ``differs``: a mismatch was seen; ``unknown``: not established.
    """

    unknown = "unknown"
    verified = "verified"
    differs = "differs"


class Hosting(_ClosedEnum):
    """Where the engine runs.

    ``embedded``: this library's loopback reference engine; ``self_hosted``: an
    engine the user runs (vLLM, SGLang, llama.cpp); ``managed_api``: a
    provider's hosted API, reached only through an open ``LiveGate``.
    """

    embedded = "embedded"
    self_hosted = "self_hosted"
    managed_api = "managed_api"


class Dialect(_ClosedEnum):
    """Which engine's wire extras a route speaks (see ``docs/measurement.md``).

    ``auto`` reads every known place for acceptance counts.
    """

    auto = "auto"
    vllm = "vllm"
    sglang = "sglang"
    llamacpp = "llamacpp"
    openai = "openai"
    deepseek = "deepseek"
    trtllm = "trtllm"


class AcceptanceScope(_ClosedEnum):
    """Where acceptance figures came from.

    ``per_request``: the engine reported them on each response (usage block or
    the fields beside it); ``server_wide``: a delta of the engine's Prometheus
    counters over the run, covering every request the server saw in that window.
    """

    per_request = "per_request"
    server_wide = "server_wide"


class Arrival(_ClosedEnum):
    """How requests arrive at a load point.

    ``closed``: a closed loop of ``concurrency`` streams, each sending its next
    request when the previous one ends; ``poisson``: an open loop at a fixed
    rate with exponential gaps (a Poisson process); ``gamma``: an open loop
    with gamma-distributed gaps (shape < 1 is burstier than Poisson).
    """

    closed = "closed"
    poisson = "poisson"
    gamma = "gamma"


LOAD_AXES: tuple[str, ...] = ("concurrency", "request_rate_per_s", "arrival")
"""The key axes that describe the offered load (a subset of :data:`KEY_AXES`)."""

KEY_AXES: tuple[str, ...] = (
    "model_id",
    "provider_route",
    "engine_route",
    "hosting",
    "context_bucket",
    "output_target",
    "reasoning_mode",
    "stream",
    "speculative",
    *LOAD_AXES,
)
"""The fields that key a ``Row``: a cell of the benchmark grid at one load point."""


# String forms of each enum, for signatures: ``EngineRoute(dialect="vllm")`` type-checks
# (mypy --strict) in user code as the docs write it; the value is still validated and
# stored as the enum. tests/test_typing_for_users.py keeps them equal to the enums.
ContextBucketName = Literal["1k", "8k", "32k", "128k", "1m"]
"""The values of :class:`ContextBucket` as strings."""
OutputTargetName = Literal["256", "1k", "8k", "32k"]
"""The values of :class:`OutputTarget` as strings."""
ReasoningModeName = Literal["non_think", "think_high", "think_max"]
"""The values of :class:`ReasoningMode` as strings."""
SpeculativeName = Literal["off", "mtp", "dspark", "eagle3", "draft", "ngram"]
"""The values of :class:`Speculative` as strings."""
QualityParityName = Literal["unknown", "verified", "differs"]
"""The values of :class:`QualityParity` as strings."""
HostingName = Literal["embedded", "self_hosted", "managed_api"]
"""The values of :class:`Hosting` as strings."""
DialectName = Literal["auto", "vllm", "sglang", "llamacpp", "openai", "deepseek", "trtllm"]
"""The values of :class:`Dialect` as strings."""
AcceptanceScopeName = Literal["per_request", "server_wide"]
"""The values of :class:`AcceptanceScope` as strings."""
ArrivalName = Literal["closed", "poisson", "gamma"]
"""The values of :class:`Arrival` as strings."""
