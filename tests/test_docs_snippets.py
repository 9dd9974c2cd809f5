"""The python blocks of docs/quickstart.md "Measure one request" run as written.

Each block is notebook code (top-level ``await`` / ``async with``), so it is
indented into an ``async def``, executed under anyio against the embedded
loopback engine, and every ``StreamMeasurement`` it leaves behind is checked.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from deepseekbench import StreamMeasurement

QUICKSTART = Path(__file__).resolve().parent.parent / "docs" / "quickstart.md"
SECTION = "Measure one request"


def _section_blocks() -> list[str]:
    text = QUICKSTART.read_text(encoding="utf-8")
    heading = re.search(rf"^## [^\n]*{re.escape(SECTION)}[^\n]*$", text, re.MULTILINE)
    assert heading is not None, f"docs/quickstart.md has no '{SECTION}' section"
    rest = text[heading.end() :]
    nxt = re.search(r"^## ", rest, re.MULTILINE)
    body = rest[: nxt.start()] if nxt else rest
    return re.findall(r"^```python\n(.*?)^```", body, re.MULTILINE | re.DOTALL)


def _measurements(ns: dict[str, Any]) -> list[StreamMeasurement]:
    found: list[StreamMeasurement] = []
    for value in ns.values():
        if isinstance(value, StreamMeasurement):
            found.append(value)
        elif isinstance(value, list):
            found.extend(v for v in value if isinstance(v, StreamMeasurement))
    return found


BLOCKS = _section_blocks()


def test_section_has_both_examples() -> None:
    assert len(BLOCKS) >= 2
    assert any("gate.client()" in b and "create_task_group" in b for b in BLOCKS)
    assert all('model="deepseekbench-ref"' in b for b in BLOCKS)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_block_runs(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    source = BLOCKS[index]
    code = "async def _snippet():\n" + textwrap.indent(source, "    ") + "\n    return locals()\n"
    namespace: dict[str, Any] = {}
    exec(compile(code, f"docs/quickstart.md[{SECTION} #{index}]", "exec"), namespace)
    snippet: Callable[[], Awaitable[dict[str, Any]]] = namespace["_snippet"]

    async def main() -> dict[str, Any]:
        with anyio.fail_after(60):
            return await snippet()

    local_vars = anyio.run(main)
    measured = _measurements(local_vars)
    assert measured, "the snippet left no StreamMeasurement behind"
    for m in measured:
        assert m.error is None, m.error
        assert m.ttft_ms is not None and m.e2e_ms is not None and m.e2e_ms >= m.ttft_ms
        assert m.completion_tokens is not None and 1 <= m.completion_tokens <= 64  # max_tokens
        assert m.accepted_token_ratio is not None and 0.0 <= m.accepted_token_ratio <= 1.0
        assert m.acceptance_length is not None and m.acceptance_length >= 1.0
    out = capsys.readouterr().out
    assert " ms" in out
