"""Every library-looking name the docs cite in backticks is importable from the package.

A backticked CamelCase identifier in ``docs/*.md`` (``RunResult``, ``RunResult.samples``,
``WorkerDeath(worker, pid, ...)``) must resolve to ``deepseekbench.<name>``, unless it is
one of the few other projects' names below (or a Python builtin). A name that is the
library's own but internal is cited by its module path instead (lower-case: not matched).
"""

from __future__ import annotations

import builtins
import re
from pathlib import Path

import deepseekbench

DOCS = Path(__file__).resolve().parent.parent / "docs"

NAME = re.compile(r"`([A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+)(?=[`(.\[])")
"""A backticked CamelCase identifier (two humps at least), bare, called, or dotted."""

OTHER_PROJECTS: dict[str, str] = {
    "AttentionBackendEnum": "vLLM",
    "ChatCompletionRequest": "vLLM / OpenAI",
    "ClientRequest": "aiohttp",
    "ClientSession": "aiohttp",
    "ChatCompletionResponseStreamChoice": "vLLM",
    "CpuPlatform": "vLLM",
    "DeepseekV3ForCausalLM": "Hugging Face transformers / vLLM",
    "LlamaForCausalLM": "Hugging Face transformers / vLLM",
    "SamplingMetadata": "vLLM",
    "SamplingParams": "vLLM",
    "ServerArgs": "SGLang",
    "SpecDecodingProm": "vLLM",
    "SpeculativeConfig": "vLLM",
    "PromptTokenStats": "vLLM (vllm/v1/metrics/stats.py)",
    "StreamOptions": "vLLM / OpenAI",
    "UsageInfo": "vLLM / OpenAI",
    "SecretStr": "pydantic",
    "TraceConfig": "aiohttp",
    "UsageStatsHead": "Ray",
    "ServerPool": "this repository's test suite (tests/vllm/pool.py), not the library",
}
"""Names of other projects the docs cite, with whose they are."""


def cited_names(text: str) -> set[str]:
    """The library-looking names cited in ``text``."""
    return set(NAME.findall(text))


def test_the_pattern_finds_bare_called_and_dotted_names() -> None:
    text = "`RunResult`, `RunResult.samples(load=...)`, `WorkerDeath(worker, pid)`, `x.Y`, `Row`"
    assert cited_names(text) == {"RunResult", "WorkerDeath"}


def test_every_name_the_docs_cite_is_exported() -> None:
    missing: list[str] = []
    for page in sorted(DOCS.glob("*.md")):
        for name in sorted(cited_names(page.read_text(encoding="utf-8"))):
            if name in OTHER_PROJECTS or hasattr(builtins, name):
                continue
            if not hasattr(deepseekbench, name):
                missing.append(f"{page.name}: {name}")
    assert not missing, (
        "docs cite names deepseekbench does not export (export them with a docstring, "
        f"name the module path instead, or list another project's name): {missing}"
    )


def test_the_allow_list_holds_no_library_name() -> None:
    assert not [n for n in OTHER_PROJECTS if hasattr(deepseekbench, n)]


def test_every_row_field_is_named_in_the_row_contract() -> None:
    """docs/rows-and-gate.md's row contract names every ``Row`` field in backticks
    (in its tables or its prose), so a field added to the model cannot go undocumented."""
    text = (DOCS / "rows-and-gate.md").read_text(encoding="utf-8")
    start = text.index("## The row contract")
    end = text.index("\n## ", start + 1)
    named = set(re.findall(r"`([a-z][a-z0-9_]*)`", text[start:end]))
    missing = [name for name in deepseekbench.Row.model_fields if name not in named]
    assert not missing, f"Row fields the row contract does not name: {missing}"
