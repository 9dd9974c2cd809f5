"""``llama_servers`` children die with their parent, however the parent dies.

A real parent process (``python -c``) starts two fake llama-servers (a Python script
serving ``/health``) through :func:`~deepseekbench.llama_servers`, prints their pids
and sleeps; the test then SIGKILLs or SIGTERMs the parent and checks that no server
survives it. Linux only (the parent-death signal is a Linux ``prctl``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests._procs import FAKE_HTTP_SERVE, python_script, running, wait_gone

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only"
)

FAKE_SERVER = (
    """\
import signal, sys, http.server
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])

def on_term(signum, frame):
    print("fake llama-server: SIGTERM, stopping", flush=True)
    sys.exit(0)

signal.signal(signal.SIGTERM, on_term)

def get(path):
    return 200, b'{"status":"ok"}'
"""
    + FAKE_HTTP_SERVE
)

PARENT = """\
import sys, anyio
from pathlib import Path
from deepseekbench import LlamaServerSpec, llama_servers

exe, model, logs, backend = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]

async def main() -> None:
    specs = [LlamaServerSpec.off("a", model), LlamaServerSpec.ngram("b", model)]
    async with llama_servers(specs, binary=exe, log_dir=logs, stop_grace_s=60) as running:
        print(" ".join(str(s.pid) for s in running.values()), flush=True)
        await anyio.sleep(120)

anyio.run(main, backend=backend)
"""


def _start_parent(tmp_path: Path, backend: str) -> tuple[subprocess.Popen[str], list[int]]:
    exe = python_script(tmp_path / "llama-server", FAKE_SERVER)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(exe), str(model), str(tmp_path / "logs"), backend],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert parent.stdout is not None
    line = parent.stdout.readline()  # the servers are healthy once this arrives
    if not line:
        parent.kill()
        raise AssertionError(f"parent failed: {parent.communicate()[1]}")
    pids = [int(p) for p in line.split()]
    assert len(pids) == 2 and all(running(p) for p in pids)
    return parent, pids


def _signal_parent(tmp_path: Path, backend: str, sig: signal.Signals, wait_s: float) -> None:
    """Start the parent and its two servers, send the parent ``sig``; the servers must
    be gone within 60 s, a bound for a starved machine (any left are killed)."""
    parent, pids = _start_parent(tmp_path, backend)
    try:
        parent.send_signal(sig)
        parent.wait(timeout=wait_s)
        assert wait_gone(pids, 60) == [], f"servers {pids} outlived a {sig.name}ed parent"
    finally:
        for p in pids:
            if running(p):
                os.kill(p, signal.SIGKILL)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_servers_die_when_the_parent_is_sigkilled(tmp_path: Path, backend: str) -> None:
    _signal_parent(tmp_path, backend, signal.SIGKILL, wait_s=60)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sigterm_to_the_parent_stops_servers_in_order(tmp_path: Path, backend: str) -> None:
    # the grace and the wait are bounds for a starved machine (a fake server handles its
    # SIGTERM at once when it gets a core), not judged times
    _signal_parent(tmp_path, backend, signal.SIGTERM, wait_s=90)
    # stopped by the parent (SIGTERM, then waited for), not merely killed with it
    for name in ("a", "b"):
        log = (tmp_path / "logs" / f"{name}.log").read_text()
        assert "SIGTERM, stopping" in log, log
