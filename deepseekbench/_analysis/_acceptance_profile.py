"""A portable acceptance profile per route: conditional and marginal acceptance per position.

The file a simulator or a synthetic-acceptance sampler reads to reproduce a route's
acceptance without its draft head (vLLM's synthetic acceptance sampler, llama.cpp's
draft at a synthetic rate). NVIDIA specdec_bench's ``speculation_profile.json`` is the
nearest published format; this one is deepseekbench's own, documented in
``docs/scorecard.md`` ("Acceptance profile"), and not claimed to be byte-compatible
with it. One JSON object:

* ``format``: ``"deepseekbench.acceptance_profile"``; ``version``: ``1``;
* ``route``, ``speculative``, ``cell``, ``load``: where it was measured;
* ``depth``: draft tokens per verify step ``k``;
* ``marginal``: for position ``i = 1 .. k``, the fraction of verify steps whose ``i``-th
  draft token was accepted (``Row.acceptance_by_position``; vLLM's
  ``spec_decode_num_accepted_tokens_per_pos / num_drafts``); never rising with ``i``;
* ``conditional``: ``marginal[i] / marginal[i-1]`` (``marginal[0] = 1``): the chance the
  ``i``-th draft token is accepted given every earlier one was (0 after a 0);
* ``acceptance_length``: tokens per verify step, which must equal ``1 + Σ marginal``
  (each accepted draft token adds one, the bonus token the 1) within
  :data:`PROFILE_TOLERANCE`;
* ``accepted_per_step``: verify steps by accepted draft tokens ``0 .. k`` (``null``
  when the engine gave no per-step figures).

:func:`read_acceptance_profile` refuses a file that breaks any of these with
:class:`~deepseekbench.AcceptanceProfileError`.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from deepseekbench._errors import AcceptanceProfileError
from deepseekbench._types._row import Row

__all__ = [
    "PROFILE_FORMAT",
    "PROFILE_TOLERANCE",
    "AcceptanceProfile",
    "acceptance_profile",
    "read_acceptance_profile",
    "write_acceptance_profile",
]

PROFILE_FORMAT: Final = "deepseekbench.acceptance_profile"
"""The ``format`` tag of a profile file."""

PROFILE_TOLERANCE: Final = 0.01
"""Largest ``|acceptance_length − (1 + Σ marginal)|`` a profile may have (tokens): the
row's figures are rounded to whole steps per request."""


class AcceptanceProfile(BaseModel):
    """One route's acceptance per draft position (module docs for every field).

    Raises:
        pydantic.ValidationError: a fraction outside [0, 1], ``marginal`` rising with the
            position, ``conditional`` not ``marginal[i] / marginal[i-1]``, lengths not
            equal to ``depth``, ``acceptance_length`` not ``1 + Σ marginal`` within
            :data:`PROFILE_TOLERANCE`, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    format: Literal["deepseekbench.acceptance_profile"] = PROFILE_FORMAT
    version: Literal[1] = 1
    route: str = Field(min_length=1)
    speculative: str
    cell: str
    load: str | None = None
    depth: int = Field(ge=1, description="draft tokens per verify step")
    marginal: tuple[float, ...]
    conditional: tuple[float, ...]
    acceptance_length: float = Field(ge=1, description="tokens per verify step")
    accepted_per_step: tuple[int, ...] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> AcceptanceProfile:
        k = self.depth
        if len(self.marginal) != k or len(self.conditional) != k:
            raise ValueError(f"marginal and conditional need {k} positions (depth)")
        if any(not 0.0 <= x <= 1.0 for x in (*self.marginal, *self.conditional)):
            raise ValueError("acceptance fractions must be in [0, 1]")
        if any(b > a + 1e-9 for a, b in itertools.pairwise(self.marginal)):
            raise ValueError("marginal acceptance rises with the position")
        if any(
            not math.isclose(c, want, abs_tol=1e-6)
            for c, want in zip(self.conditional, conditional_of(self.marginal), strict=True)
        ):
            raise ValueError("conditional is not marginal[i] / marginal[i-1]")
        implied = 1.0 + sum(self.marginal)
        if abs(self.acceptance_length - implied) > PROFILE_TOLERANCE:
            raise ValueError(
                f"acceptance_length {self.acceptance_length:.4f} is not 1 + Σ marginal "
                f"= {implied:.4f}"
            )
        if self.accepted_per_step is not None and len(self.accepted_per_step) != k + 1:
            raise ValueError(f"accepted_per_step needs {k + 1} buckets (0 .. depth)")
        return self

    def to_json(self) -> str:
        """The profile as indented JSON text (the file's contents)."""
        return orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_INDENT_2).decode()


def conditional_of(marginal: tuple[float, ...]) -> tuple[float, ...]:
    """``marginal[i] / marginal[i-1]`` with ``marginal[0] = 1`` (0 after a 0)."""
    prev = (1.0, *marginal[:-1])
    return tuple(m / p if p > 0 else 0.0 for m, p in zip(marginal, prev, strict=True))


def acceptance_profile(row: Row, *, load: str | None = None) -> AcceptanceProfile | None:
    """The profile of a speculative ``row`` (route label, cell, ``load`` label), or
    ``None`` when it has no per-position acceptance or no acceptance length.

    Raises:
        AcceptanceProfileError: the row's figures break the profile's consistency
            check (``acceptance_length = 1 + Σ marginal`` and the rest, module docs).
    """
    marginal = row.acceptance_by_position
    if not marginal or row.acceptance_length is None:
        return None
    cell = f"{row.context_bucket.value}/{row.output_target.value}/{row.reasoning_mode.value}"
    try:
        return AcceptanceProfile(
            route=row.route_label or row.speculative.value,
            speculative=row.speculative.value,
            cell=cell,
            load=load,
            depth=len(marginal),
            marginal=marginal,
            conditional=conditional_of(marginal),
            acceptance_length=row.acceptance_length,
            accepted_per_step=row.accepted_per_step,
        )
    except ValidationError as exc:
        raise AcceptanceProfileError(f"row {cell}: {_first_error(exc)}") from None


def write_acceptance_profile(profile: AcceptanceProfile, path: str | Path) -> Path:
    """Write ``profile`` to ``path`` as JSON; returns the path.

    Raises:
        OSError: the file cannot be written.
    """
    out = Path(path)
    out.write_text(profile.to_json() + "\n", encoding="utf-8")
    return out


def read_acceptance_profile(path: str | Path) -> AcceptanceProfile:
    """Read a profile file back, checking it (module docs).

    Raises:
        AcceptanceProfileError: the file is not JSON, not a deepseekbench acceptance
            profile, or breaks its consistency check (the message names which).
        OSError: the file cannot be read.
    """
    raw = Path(path).read_bytes()
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise AcceptanceProfileError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
        raise AcceptanceProfileError(f"{path}: not a {PROFILE_FORMAT} file")
    try:
        return AcceptanceProfile.model_validate(data)
    except ValidationError as exc:
        raise AcceptanceProfileError(f"{path}: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(x) for x in err.get("loc", ()))
    return f"{where + ': ' if where else ''}{err.get('msg', 'invalid')}"
