"""Token counting with the served model's tokenizer.

Two sources, one interface (:class:`TokenCounter`, ``await counter.count(texts)``):

* :class:`EndpointTokenCounter`: the engine's own ``POST /tokenize`` (at the
  server root, next to ``/metrics``), always through a
  :class:`~deepseekbench.LiveGate`-wrapped client. Request and response shapes
  per dialect:

  - ``vllm``, ``sglang``, ``auto``, ``openai``: ``{"model": m, "prompt": text,
    "add_special_tokens": false}`` → ``{"tokens": [ids], "count": n, ...}``
    (vLLM ``TokenizeCompletionRequest``; SGLang's ``/tokenize`` takes the same
    fields);
  - ``llamacpp``: ``{"content": text, "add_special": false}`` →
    ``{"tokens": [ids]}`` (llama-server ``/tokenize``);
  - the embedded engine answers both shapes.

* :class:`HFTokenizerCounter`: a local Hugging Face ``tokenizer.json`` read with
  the ``tokenizers`` package (``pip install 'deepseekbench[tokenizers]'``).

Counts are of the text alone, without special tokens and without the chat
template's role markers (a template adds a few tokens per message; the bucket
ranges in ``docs/plan.md`` are wide enough that this never moves a prompt
across a bucket boundary in practice, and the embedded engine's template is
documented in ``docs/engine.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson

from deepseekbench._errors import TokenizeError
from deepseekbench._measure._measure import _check_gated
from deepseekbench._net._bounded import BoundedReadError, read_bounded
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._records._figures import output_toks_per_s, tpot_ms
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._types._tokens import TokenCounter

__all__ = [
    "EndpointTokenCounter",
    "HFTokenizerCounter",
    "TokenCounter",
    "TokenizeError",
    "recount_output",
    "tokenize_url",
]

_ERROR_TEXT_LIMIT = 300


def tokenize_url(route: EngineRoute) -> str:
    """``POST`` URL of the route's tokenize endpoint: the base URL without a
    trailing ``/v1``, plus ``/tokenize`` (vLLM, SGLang, llama.cpp, embedded)."""
    return route.metrics_url.removesuffix("/metrics") + "/tokenize"


def _tokenize_body(route: EngineRoute, text: str) -> dict[str, Any]:
    return route.adapter.tokenize_body(route.model, text)


def _count_from(payload: Any) -> int | None:
    if not isinstance(payload, dict):
        return None
    tokens = payload.get("tokens")
    if isinstance(tokens, list):
        return len(tokens)
    count = payload.get("count")
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        return count
    return None


class EndpointTokenCounter:
    """Counts tokens with the engine's ``POST /tokenize`` (one request per text).

    Args:
        route: the route whose engine tokenizes (dialect picks the body shape;
            the route's headers and key are sent).
        gate: the :class:`~deepseekbench.LiveGate`; every tokenize request is
            admitted by it (and counts against ``max_requests``).
        client: an ``httpx.AsyncClient`` made by ``gate.client()``.
        deadline_s: each tokenize answer is read whole within this many seconds
            in total (the plan's ``timeout_s``) and under the 64 MiB cap
            (:func:`~deepseekbench._net._bounded.read_bounded`).

    Raises:
        LiveGateError: (from :meth:`count`) the gate refuses the URL, or the
            client is not gated by ``gate``.
        TokenizeError: (from :meth:`count`) a non-2xx answer, a transport
            failure, no whole answer within ``deadline_s`` or over the cap, or a
            body without a ``tokens`` list or ``count``.
    """

    def __init__(
        self,
        route: EngineRoute,
        *,
        gate: LiveGate,
        client: httpx.AsyncClient,
        deadline_s: float = 60.0,
    ) -> None:
        self._route = route
        self._deadline_s = deadline_s
        self._gate = gate
        self._client = client
        self._url = tokenize_url(route)

    @property
    def name(self) -> str:
        """``endpoint:<tokenize URL>``."""
        return f"endpoint:{self._url}"

    async def count(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each text, asked of the engine one text at a time (tokens).

        Raises:
            LiveGateError: the gate refuses the URL, or the client is not gated
                by this counter's gate (before any request).
            TokenizeError: a non-2xx answer, a transport failure, or a body
                without a ``tokens`` list or ``count`` (the URL named).
        """
        headers = {k: v for k, v in self._route.request_headers().items() if k.lower() != "accept"}
        refusal = self._gate.refusal(self._url, has_auth_header="authorization" in headers)
        if refusal is not None:
            raise refusal
        _check_gated(self._client, self._gate, httpx.URL(self._url))
        return [await self._one(text, headers) for text in texts]

    async def _one(self, text: str, headers: dict[str, str]) -> int:
        body = orjson.dumps(_tokenize_body(self._route, text))
        response = await read_bounded(
            self._client, "POST", self._url, deadline_s=self._deadline_s, content=body,
            headers=headers,
        )  # fmt: skip
        if isinstance(response, BoundedReadError):
            raise TokenizeError(
                f"tokenize request to {self._url} failed: {response.reason}: {response}",
                source=self._url,
            ) from response
        if not response.is_success:
            detail = response.text[:_ERROR_TEXT_LIMIT]
            raise TokenizeError(
                f"{self._url} answered HTTP {response.status_code}: {detail}", source=self._url
            )
        try:
            payload = orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise TokenizeError(f"{self._url} did not answer JSON", source=self._url) from exc
        n = _count_from(payload)
        if n is None:
            raise TokenizeError(
                f"{self._url} answered without a 'tokens' list or 'count'", source=self._url
            )
        return n


class HFTokenizerCounter:
    """Counts tokens with a local Hugging Face ``tokenizer.json``.

    Args:
        path: the ``tokenizer.json`` file, or a folder holding one.

    Raises:
        TokenizeError: the ``tokenizers`` package is not installed, or the file
            is missing or not a tokenizer (the message names the file).
    """

    def __init__(self, path: str | Path) -> None:
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        self._path = p
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - the test extra installs it
            raise TokenizeError(
                "counting with a tokenizer.json needs the 'tokenizers' package: "
                "pip install 'deepseekbench[tokenizers]'",
                source=str(p),
            ) from exc
        try:
            self._tok = Tokenizer.from_file(str(p))
        except Exception as exc:  # tokenizers raises plain Exception subclasses
            raise TokenizeError(f"cannot read tokenizer {p}: {exc}", source=str(p)) from exc

    @property
    def name(self) -> str:
        """``tokenizer.json:<path>``."""
        return f"tokenizer.json:{self._path}"

    async def count(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each text, special tokens excluded (tokens)."""
        encodings = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encodings]


async def recount_output(m: StreamMeasurement, counter: TokenCounter) -> StreamMeasurement:
    """``m`` with its output tokens counted by ``counter`` when usage gave none.

    A measurement with ``completion_tokens`` from usage is returned unchanged.
    Otherwise the received text (reasoning plus content) is counted, and
    ``estimated_completion_tokens``, ``tpot_ms`` ((E2E − TTFT) / (tokens − 1), ms)
    and ``output_toks_per_s`` (tokens / E2E, tokens/s) are recomputed from that
    count; ``tokens_estimated`` stays True (it is still not the engine's count)
    and ``tokens_estimated_by`` names the tokenizer.

    Raises:
        TokenizeError, LiveGateError: as ``counter.count``.
    """
    if not m.tokens_estimated or m.completion_tokens is not None:
        return m
    text = (m.reasoning_text or "") + m.text
    (n,) = await counter.count([text])
    return m.model_copy(
        update={
            "estimated_completion_tokens": n,
            "tpot_ms": tpot_ms(m.ttft_ms, m.e2e_ms, n),
            "output_toks_per_s": output_toks_per_s(m.e2e_ms, n),
            "tokens_estimated_by": counter.name,
        }
    )
