"""What counts tokens: the one interface the workload builders and the measurers share.

Holds the :class:`TokenCounter` protocol; the counters themselves (the engine's
``/tokenize``, a local Hugging Face tokenizer) live with the measurement code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["TokenCounter"]


class TokenCounter(Protocol):
    """Anything that counts tokens of texts with one model's tokenizer.

    ``name`` says which tokenizer (recorded on rows and in errors);
    ``count(texts)`` returns one count per text (tokens, special tokens excluded).

    Raises:
        TypeError: instantiated directly (a ``Protocol`` is a type, not a counter).
    """

    @property
    def name(self) -> str:
        """Which tokenizer this is, e.g. ``endpoint:http://127.0.0.1:8000/tokenize``."""
        ...

    async def count(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each text (same order and length as ``texts``)."""
        ...
