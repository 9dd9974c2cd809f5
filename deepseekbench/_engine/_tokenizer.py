"""A fixed-vocabulary character tokenizer for the embedded reference engine.

One token is one character from a closed vocabulary: printable ASCII, newline,
and the few non-ASCII symbols the generated corpus uses (``×``, ``→``, ``·``),
so that streamed text exercises multi-byte UTF-8. Id 0 is end-of-sequence.
Characters outside the vocabulary encode to the ``UNK`` id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

EOS: Final[int] = 0
"""Token id of end-of-sequence (not a character; never decoded to text)."""
UNK: Final[int] = 1
"""Token id of any character outside the vocabulary (decodes to ``?``)."""

_CHARS: Final[str] = "\n" + "".join(chr(c) for c in range(32, 127)) + "×→·"
_SPECIAL: Final[int] = 2


class CharTokenizer:
    """Maps characters to ids and back; vocabulary size is fixed (102 ids).

    ``encode(text) -> list[int]`` (one id per character); ``decode(ids) -> str``
    (``EOS`` dropped, ``UNK`` rendered as ``?``). Never raises on any ``str``.
    """

    def __init__(self) -> None:
        self._to_id: dict[str, int] = {ch: i + _SPECIAL for i, ch in enumerate(_CHARS)}
        self._to_ch: dict[int, str] = {i: ch for ch, i in self._to_id.items()}
        self._to_ch[UNK] = "?"
        self._to_ch[EOS] = ""

    @property
    def vocab_size(self) -> int:
        """Number of ids, special ids included (tokens)."""
        return len(self._to_id) + _SPECIAL

    def encode(self, text: str) -> list[int]:
        """Return one id per character of ``text`` (length ``len(text)`` tokens)."""
        get = self._to_id.get
        return [get(ch, UNK) for ch in text]

    def decode(self, ids: Iterable[int]) -> str:
        """Return the text of ``ids``; ``EOS`` contributes nothing."""
        return "".join(self._to_ch.get(i, "?") for i in ids)

    def count(self, text: str) -> int:
        """Number of tokens ``text`` encodes to (characters)."""
        return len(text)

    def token_text(self, ids: Sequence[int]) -> list[str]:
        """Per-token text pieces of ``ids`` (``EOS`` gives ``""``)."""
        return [self._to_ch.get(i, "?") for i in ids]


TOKENIZER: Final[CharTokenizer] = CharTokenizer()
"""The process-wide tokenizer instance (stateless after construction)."""
