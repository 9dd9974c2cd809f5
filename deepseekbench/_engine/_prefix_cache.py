"""The embedded engine's prefix cache: prompt blocks kept across requests.

Modelled on vLLM's automatic prefix caching: a prompt is cut into full blocks of
``block_tokens`` tokens, each block named by a hash chained over every block
before it, so a block is found only when the whole prefix up to it matches. A
lookup counts the prompt's tokens as queried and the tokens of its leading
cached blocks as hits (vLLM ``vllm:prefix_cache_queries`` /
``vllm:prefix_cache_hits``, in tokens), then stores the prompt's blocks,
evicting the least recently used past ``capacity_blocks``. A disabled cache
(vLLM #54360: speculation turning it off) still counts queries, never hits.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

__all__ = ["PrefixCache"]


class PrefixCache:
    """Hash-chained prompt blocks, least recently used evicted first.

    ``block_tokens``: tokens per block (the engine's tokenizer is one character
    per token); ``capacity_blocks``: blocks kept; ``enabled``: whether lookups may
    hit. Raises ``ValueError`` for a block size or capacity below 1.
    """

    def __init__(
        self, *, block_tokens: int = 16, capacity_blocks: int = 4096, enabled: bool = True
    ):
        if block_tokens < 1 or capacity_blocks < 1:
            raise ValueError("block_tokens and capacity_blocks must be >= 1")
        self.block_tokens = block_tokens
        self.capacity_blocks = capacity_blocks
        self.enabled = enabled
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def _hashes(self, prompt: str) -> list[bytes]:
        out: list[bytes] = []
        parent = b""
        n = self.block_tokens
        for start in range(0, len(prompt) - n + 1, n):
            parent = hashlib.blake2b(
                parent + prompt[start : start + n].encode(), digest_size=16
            ).digest()
            out.append(parent)
        return out

    def lookup(self, prompt: str) -> int:
        """Cached tokens at the head of ``prompt`` (a multiple of ``block_tokens``,
        0 when disabled); the prompt's full blocks are stored afterwards."""
        hashes = self._hashes(prompt)
        hit_blocks = 0
        if self.enabled:
            for h in hashes:
                if h not in self._blocks:
                    break
                hit_blocks += 1
            for h in hashes:
                self._blocks[h] = None
                self._blocks.move_to_end(h)
            while len(self._blocks) > self.capacity_blocks:
                self._blocks.popitem(last=False)
        return hit_blocks * self.block_tokens
