"""In-memory test doubles: an HTTP transport that records requests, and a token
counter that counts one token per character."""

from __future__ import annotations

from collections.abc import Sequence

import httpx


class Spy(httpx.AsyncBaseTransport):
    """Records requests and answers them in memory (opens no socket)."""

    def __init__(self, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.status = status
        self.headers = headers or {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(self.status, headers=self.headers, text="ok")


class CharCounter:
    """One token per character (the embedded engine's tokenizer); counts its calls
    and the texts it was given."""

    name = "chars"

    def __init__(self) -> None:
        self.calls = 0
        self.texts = 0

    async def count(self, texts: Sequence[str]) -> list[int]:
        self.calls += 1
        self.texts += len(texts)
        return [len(t) for t in texts]
