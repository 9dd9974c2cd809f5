"""Route identity: does each route serve what its label says?

A plan names each route's method (``speculative``) and, optionally, its depth
(``spec_tokens``); nothing stops a user from pointing ``off`` at the MTP server and
``mtp`` at the plain one (ports swapped). Tried on the embedded engine, such a run
credited "mtp 0.85× slower, verified" while the ``off`` route drafted 138 tokens per
request and ``mtp`` none. This module reads what each route's engine *reported*
(drafted tokens per request or in the route's server-wide window, and the depth it
served) and judges every route of one cell and load point together:

* an ``off`` route that drafted tokens is **refused**;
* a speculative route that drafted none while a route on the same engine (same
  dialect, or either ``auto``) drafted is **refused** (its server does not speculate,
  or the ports are swapped), except an ``ngram`` route beside a non-drafting
  ``off``: n-gram lookup may find nothing to draft in a workload, so it is flagged;
* a speculative route whose served depth (per-request ``spec_tokens``, else the
  length of its per-position acceptance) differs from the declared ``spec_tokens``
  is **refused**;
* a speculative route whose engine reports no acceptance at all (nothing drafted
  on any route of its engine in the cell and load) is **flagged**: an engine may simply
  not report it (the OpenAI dialect), but nothing confirms it speculated, so where its
  server exported no speculative counter at all :func:`~deepseekbench.compare_speedup`
  refuses its speed verdict (``RefusalReason.speculative_counters_missing``).

Each refused or flagged row gets one line naming both routes (the row and the one
it is compared with or contradicted by); :func:`~deepseekbench.compare_speedup`
refuses a pair where either row is refused (``RefusalReason.route_identity_refused``).
Pure: from measurements and the plan's routes, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import Dialect, Speculative
from deepseekbench._types._identity import RouteIdentity

__all__ = ["IdentityVerdict", "RouteEvidence", "judge_route_identity", "route_evidence"]


@dataclass(frozen=True, slots=True)
class RouteEvidence:
    """What one route's engine reported in one cell and load point.

    Attributes:
        label: the route's label. speculative: its declared method.
        dialect: its engine dialect (routes on the same engine are compared).
        drafted: drafted tokens reported (sum over requests that report them, else
            the route's server-wide window), tokens; ``None`` when nothing reported.
        served_depths: the depths the engine said it served (draft tokens per
            verify step), from requests or per-position acceptance.
        declared_depth: the route's declared ``spec_tokens`` (``None``: not declared).
    """

    label: str
    speculative: Speculative
    dialect: Dialect
    drafted: int | None
    served_depths: frozenset[int]
    declared_depth: int | None

    @property
    def drafts(self) -> bool:
        """True when the engine reported at least one drafted token."""
        return bool(self.drafted)

    def name(self) -> str:
        """``'mtp' (speculative=mtp)``: how a reason names the route."""
        return f"route {self.label!r} (speculative={self.speculative.value})"


@dataclass(frozen=True, slots=True)
class IdentityVerdict:
    """One row's identity status and, unless ``ok``, its one-line reason."""

    status: RouteIdentity
    detail: str | None = None


def _served(ok: Sequence[StreamMeasurement]) -> frozenset[int]:
    depths: set[int] = set()
    for m in ok:
        if m.spec_tokens is not None:
            depths.add(m.spec_tokens)
        elif m.acceptance is not None and m.acceptance.acceptance_by_position:
            depths.add(len(m.acceptance.acceptance_by_position))
    return frozenset(depths)


def route_evidence(
    label: str,
    speculative: Speculative,
    dialect: Dialect,
    measured: Sequence[StreamMeasurement],
    server: AcceptanceRecord | None,
    declared_depth: int | None = None,
) -> RouteEvidence:
    """The :class:`RouteEvidence` of one route from its measured requests (errored
    ones ignored) and its server-wide acceptance window (``None``: none scraped)."""
    ok = [m for m in measured if m.error is None]
    counts = [m.draft_tokens for m in ok if m.draft_tokens is not None]
    drafted: int | None = sum(counts) if counts else None
    if drafted is None and server is not None:
        drafted = server.draft_tokens
    return RouteEvidence(label, speculative, dialect, drafted, _served(ok), declared_depth)


def _same_engine(a: RouteEvidence, b: RouteEvidence) -> bool:
    return a.dialect is b.dialect or Dialect.auto in (a.dialect, b.dialect)


def _off_verdict(off: RouteEvidence, specs: Sequence[RouteEvidence]) -> IdentityVerdict:
    if not off.drafts:
        return IdentityVerdict(RouteIdentity.ok)
    silent = [s for s in specs if not s.drafts]
    head = f"{off.name()} drafted {off.drafted} tokens"
    if silent:
        tail = f" while {silent[0].name()} drafted none: their servers look swapped"
    else:
        others = ", ".join(repr(s.label) for s in specs) or "none"
        tail = f": its server speculates, so no route can be compared with it ({others})"
    return IdentityVerdict(RouteIdentity.refused, head + tail)


def _spec_verdict(
    spec: RouteEvidence, off: RouteEvidence, others: Sequence[RouteEvidence]
) -> IdentityVerdict:
    if not spec.drafts:
        drafting = [o for o in others if o.drafts and _same_engine(spec, o)]
        if drafting and spec.speculative is Speculative.ngram and not off.drafts:
            # n-gram lookup may find nothing to draft in a workload: not a contradiction
            return IdentityVerdict(
                RouteIdentity.flagged,
                f"{spec.name()} drafted none while {drafting[0].name()} on the same engine "
                "drafted: n-gram lookup found nothing to draft here, or its server does not "
                "speculate",
            )
        if drafting:
            d = drafting[0]
            why = (
                "their servers look swapped"
                if d.speculative is Speculative.off
                else "its server does not speculate as declared"
            )
            return IdentityVerdict(
                RouteIdentity.refused,
                f"{spec.name()} drafted none while {d.name()} on the same engine drafted "
                f"{d.drafted} tokens: {why}",
            )
    wrong = sorted(spec.served_depths - {spec.declared_depth})
    if spec.declared_depth is not None and wrong:
        return IdentityVerdict(
            RouteIdentity.refused,
            f"{spec.name()} declares spec_tokens={spec.declared_depth} but its server served "
            f"{', '.join(map(str, wrong))} draft tokens per verify step (baseline {off.name()})",
        )
    if not spec.drafts:  # no route on its engine drafted either (else refused above)
        return IdentityVerdict(
            RouteIdentity.flagged,
            f"{spec.name()} reports no acceptance and no route on its engine does (baseline "
            f"{off.name()}): nothing confirms it speculated",
        )
    return IdentityVerdict(RouteIdentity.ok)


def judge_route_identity(evidence: Sequence[RouteEvidence]) -> Mapping[str, IdentityVerdict]:
    """Judge every route of one cell and load point together (module docstring).

    Args:
        evidence: one :class:`RouteEvidence` per route, exactly one of them ``off``.

    Returns:
        An :class:`IdentityVerdict` per route label.

    Raises:
        ValueError: ``evidence`` holds no ``off`` route or more than one.
    """
    offs = [e for e in evidence if e.speculative is Speculative.off]
    if len(offs) != 1:
        raise ValueError(f"route identity needs exactly one off route, got {len(offs)}")
    off = offs[0]
    specs = [e for e in evidence if e is not off]
    out: dict[str, IdentityVerdict] = {off.label: _off_verdict(off, specs)}
    for s in specs:
        out[s.label] = _spec_verdict(s, off, [e for e in evidence if e is not s])
    return out
