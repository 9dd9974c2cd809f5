"""The follow-up record: one divergence the forensics step asks ``off`` to explain.

Holds :class:`FollowUp`, chosen by the analysis (which divergences to ask about)
and sent by the execute stage (``off``'s log-probabilities at the divergence).
"""

from __future__ import annotations

from dataclasses import dataclass

from deepseekbench._types._request import ChatRequest

__all__ = ["FollowUp"]


@dataclass(frozen=True, slots=True)
class FollowUp:
    """One divergence to explain: the request both sides were sent, the diverging
    side's text, and where it was found (``source`` ``parity`` or ``traffic``;
    ``cell``/``load`` for traffic). ``other_text`` is ``off``'s own output: when the
    follow-up reproduces the candidate's text (``off`` flipped between its measured
    run and the follow-up), the divergence is located against ``other_text`` instead."""

    prompt_id: str
    candidate: str
    request: ChatRequest
    candidate_text: str
    source: str = "parity"
    reasoning_mode: str = ""
    cell: str | None = None
    load: str | None = None
    other_text: str | None = None
