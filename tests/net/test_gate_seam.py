"""The LiveGate is the only seam: no library module opens an outgoing connection itself.

A static check over the package source: outgoing-connection APIs may appear only in
``_net/_gate.py`` (which builds the one gated client) and ``_net/_transport.py`` (the transport
under it, which only ``_gate.py`` constructs). The embedded engine *listens* on
loopback (``create_tcp_listener``), which opens no outgoing connection.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "deepseekbench"
OUTGOING = re.compile(
    r"httpx\.(Async)?Client\(|httpx\.(get|post|put|stream|request)\(|AsyncHTTPTransport\("
    r"|HTTPTransport\(|socket\.create_connection|\.connect\(|connect_tcp\(|open_tcp_stream"
    r"|urllib\.request|http\.client|aiohttp|(?<![\w.])requests\.(get|post|request|Session)\("
)


_SEAM = ("_net/_gate.py", "_net/_transport.py")
BUILDS_TRANSPORT = re.compile(r"BenchTransport\(|_AiohttpTransport\(|_HttpcoreTransport\(")


def offending_lines(root: Path) -> list[str]:
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).as_posix() in _SEAM:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("#", 1)[0]
            if OUTGOING.search(code):
                found.append(f"{path.relative_to(root.parent)}:{number}: {line.strip()}")
    return found


def test_only_the_gate_opens_connections() -> None:
    assert offending_lines(PACKAGE) == []


def test_only_the_gate_builds_the_transport() -> None:
    builders = [
        f"{path.name}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "_transport.py"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if BUILDS_TRANSPORT.search(line.split("#", 1)[0])
    ]
    assert builders and all(b.startswith("_gate.py:") for b in builders), builders


def test_the_check_catches_an_ungated_client(tmp_path: Path) -> None:
    pkg = tmp_path / "deepseekbench"
    pkg.mkdir()
    (pkg / "_sneaky.py").write_text("import httpx\nc = httpx.AsyncClient()\n")
    assert offending_lines(pkg) == ["deepseekbench/_sneaky.py:2: c = httpx.AsyncClient()"]
