"""``dialect = "auto"``: an engine not named; read every engine's places.

* Request: vLLM's fields (``chat_template_kwargs``, ``ignore_eos`` +
  ``min_tokens``, ``continuous_usage_stats``) plus SGLang's
  ``return_spec_tokens_details: true``.
* Response: acceptance from vLLM's places, then SGLang's, then llama.cpp's, then
  TensorRT-LLM's (first hit wins); vLLM's server times.
* ``/metrics`` is read the same for every dialect (every registered counter set).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from deepseekbench._dialects._base import EngineDialect
from deepseekbench._dialects.llamacpp import DIALECT as LLAMACPP
from deepseekbench._dialects.sglang import DIALECT as SGLANG
from deepseekbench._dialects.trtllm import DIALECT as TRTLLM
from deepseekbench._dialects.vllm import DIALECT as VLLM
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._clock import ServerRateSpan

__all__ = ["DIALECT", "AutoDialect"]

_READERS: tuple[EngineDialect, ...] = (VLLM, SGLANG, LLAMACPP, TRTLLM)


class AutoDialect(EngineDialect):
    """Every known place (module docstring)."""

    name: ClassVar[str] = "auto"
    # tried with vLLM's wire; a host that ignores prompt_logprobs answers without the
    # list, which is then the recorded reason
    teacher_forcing: ClassVar[str | None] = "vllm_prompt_logprobs"
    continuous_usage: ClassVar[bool] = True
    server_rate_span: ClassVar[ServerRateSpan | None] = VLLM.server_rate_span  # its times
    server_rate_source: ClassVar[str] = VLLM.server_rate_source
    spec_keys: ClassVar[frozenset[str]] = frozenset().union(*(d.spec_keys for d in _READERS))
    choice_spec_keys: ClassVar[frozenset[str]] = frozenset().union(
        *(d.choice_spec_keys for d in _READERS)
    )

    def eos_controls(self, max_tokens: int | None) -> dict[str, Any]:
        """vLLM's (``ignore_eos`` + ``min_tokens``)."""
        return VLLM.eos_controls(max_tokens)

    def pinned_controls(self, max_tokens: int | None) -> dict[str, Any]:
        """vLLM's (``min_tokens`` one below ``max_tokens``)."""
        return VLLM.pinned_controls(max_tokens)

    def report_extras(self) -> dict[str, Any]:
        """SGLang's (``return_spec_tokens_details: true``)."""
        return SGLANG.report_extras()

    def read_acceptance(self, chunk: Mapping[str, Any]) -> AcceptanceRecord | None:
        """vLLM's places, then SGLang's, llama.cpp's, TensorRT-LLM's; first hit wins."""
        for reader in _READERS:
            record = reader.read_acceptance(chunk)
            if record is not None:
                return record
        return None

    def server_times(self, chunk: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """vLLM's."""
        return VLLM.server_times(chunk)


DIALECT = AutoDialect()
