"""The follow-up records: one divergence the forensics step asks ``off`` to explain, and
one compared ``off`` output it asks ``off`` to profile.

Holds :class:`FollowUp` and :class:`ProfileFollowUp`, chosen by the analysis (which
divergences and outputs to ask about) and sent by the execute stage (``off``'s
log-probabilities at the divergence, or over the whole output).
"""

from __future__ import annotations

from dataclasses import dataclass

from deepseekbench._types._request import ChatRequest

__all__ = ["FollowUp", "ProfileFollowUp"]


@dataclass(frozen=True, slots=True)
class FollowUp:
    """One divergence to explain: the request both sides were sent, the diverging
    side's text, and where it was found (``source`` ``parity`` or ``traffic``;
    ``cell``/``load`` for traffic). ``other_text`` is ``off``'s own output: when the
    follow-up reproduces the candidate's text (``off`` flipped between its measured
    run and the follow-up), the divergence is located against ``other_text`` instead.
    ``candidate_ids``: the token ids the candidate route sampled, where its engine
    returned them (the distribution witness then scores the ids, not the text)."""

    prompt_id: str
    candidate: str
    request: ChatRequest
    candidate_text: str
    source: str = "parity"
    reasoning_mode: str = ""
    cell: str | None = None
    load: str | None = None
    other_text: str | None = None
    candidate_ids: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class ProfileFollowUp:
    """One compared ``off`` output to profile (``off``'s margins over the whole output,
    :class:`~deepseekbench._types._noise.OffProfile`): the request ``off`` was sent,
    ``off_text`` its measured output (reasoning text then content, as compared), and
    where it was found (``source`` ``parity`` or ``traffic``; ``cell``/``load``)."""

    prompt_id: str
    request: ChatRequest
    off_text: str
    source: str = "parity"
    reasoning_mode: str = ""
    cell: str | None = None
    load: str | None = None
