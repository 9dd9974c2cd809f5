"""A test-only fix for vLLM 0.32's CPU ``expand_kernel`` override, for a vLLM server.

vLLM 0.32's CPU build (no Triton CPU backend) replaces the rejection sampler's Triton
``expand_kernel`` (``vllm/v1/sample/rejection_sampler.py``, launched by ``_expand``
from ``expand_batch_to_tokens``) with ``vllm/utils/cpu_triton_utils.py``
``_expand_kernel_impl``, registered by ``vllm/platforms/cpu.py``
``CpuPlatform.register_triton_kernel_overrides``. That function hands the C++ op
``_ensure_int64(output)``: for a float32 ``output`` a new int64 copy, never copied
back (and the values truncated to integers). ``expand_batch_to_tokens`` allocates
``output`` with ``new_empty``, so the per-token temperature of the speculative verify
pass (``apply_sampling_constraints``) is uninitialised memory, and the verify pass
samples its tokens from the target logits divided by garbage.

:func:`install` (run in the vLLM server's interpreters by a ``sitecustomize.py``
written by :func:`sitecustomize_dir`, put first on their ``PYTHONPATH``) replaces
``_expand_kernel_impl`` in ``vllm.utils.cpu_triton_utils`` as that module is imported,
before the platform registers it, with :func:`expand_kernel_impl`: the Triton kernel's
semantics in torch, keeping ``output``'s dtype. This file imports only the standard
library at module level (torch is vLLM's, imported when the kernel runs), so it is
copied as it is into the ``sitecustomize.py``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

TARGET = "vllm.utils.cpu_triton_utils"
BUG = (
    "vLLM 0.32 CPU: vllm/utils/cpu_triton_utils.py _expand_kernel_impl writes the "
    "verify pass's per-token temperature into an int64 copy of its float32 output "
    "(_ensure_int64) and never copies it back, so rejection_sampler.py "
    "expand_batch_to_tokens returns uninitialised memory and apply_sampling_constraints "
    "divides the target logits by it"
)
MARK = "[deepseekbench expand_fix] replaced vllm.utils.cpu_triton_utils._expand_kernel_impl"


def expand_kernel_impl(
    output: Any,
    input_val: Any,
    cu_num_tokens: Any,
    replace_from: int,
    replace_to: int,
    MAX_NUM_TOKENS: int | None = None,
) -> None:
    """``expand_kernel``'s semantics (``vllm/v1/sample/rejection_sampler.py``), same
    argument order as ``_expand_kernel_impl``: request ``i``'s value of ``input_val``
    ([batch_size]), ``replace_to`` where it equals ``replace_from``, written to
    ``output[cu_num_tokens[i-1]:cu_num_tokens[i]]`` (``output``: [num_tokens], its
    dtype kept). Raises nothing of its own (torch's errors on mismatched shapes)."""
    import torch

    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=torch.zeros(1, dtype=torch.int64))
    values = input_val.masked_fill(input_val == replace_from, replace_to)
    expanded = values.repeat_interleave(counts)
    output[: expanded.shape[0]].copy_(expanded.to(output.dtype))


class _Patcher(importlib.abc.MetaPathFinder):
    """Finds ``TARGET`` with the other finders and patches it once it has run."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            module._expand_kernel_impl = expand_kernel_impl  # type: ignore[attr-defined]
            print(MARK, file=sys.stderr, flush=True)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Patch ``TARGET`` when it is imported (or now, if it already was)."""
    module = sys.modules.get(TARGET)
    if module is not None:
        module._expand_kernel_impl = expand_kernel_impl  # type: ignore[attr-defined]
        print(MARK, file=sys.stderr, flush=True)
        return
    sys.meta_path.insert(0, _Patcher())


def sitecustomize_dir() -> Path:
    """A fresh temp folder holding ``sitecustomize.py``: this file's source followed by
    ``install()``; put it first on the vLLM server's ``PYTHONPATH``."""
    folder = Path(tempfile.mkdtemp(prefix="deepseekbench-expand-fix-"))
    source = Path(__file__).read_text()
    (folder / "sitecustomize.py").write_text(source + "\n\ninstall()\n")
    return folder
