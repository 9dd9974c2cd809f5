"""Every door of the gate: client workers carry no key in their environment and die with
their parent (SIGKILL or SIGTERM), so an orphan never sends unrecorded requests.

A counting HTTP server on 127.0.0.1 answers every chat request; a parent process
runs a ``WorkerPool`` against it and is killed mid-load point; the server's count
must stop moving within a bound, and every worker must be gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-orphan-env-SECRET-4242"
ROUTE_SECRET = "sk-orphan-route-SECRET-77"
BODY = (
    b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)

PARENT = """
import sys, anyio
from pydantic import SecretStr
from deepseekbench._execute._workers import WorkerPool
from deepseekbench._execute._workshare import LoadWork, PoolItem
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._types._request import ChatRequest

async def main() -> None:
    route = EngineRoute(base_url=sys.argv[1], model="m", label="off",
                        api_key=SecretStr(sys.argv[2]))
    req = ChatRequest(messages=({"role": "user", "content": "x"},), max_tokens=4)
    items = tuple(PoolItem(i, "off", req) for i in range(20_000))
    async with WorkerPool(2, routes={"off": route}, gate=LiveGate.from_env()) as pool:
        print(" ".join(str(p) for p in pool.pids.values()), flush=True)
        await pool.run(LoadWork(items, 2), lambda r: None)

anyio.run(main)
"""


class Counter:
    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()


@pytest.fixture
def server() -> Iterator[tuple[str, Counter]]:
    counter = Counter()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            with counter.lock:
                counter.n += 1
            time.sleep(0.02)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", counter
    finally:
        httpd.shutdown()
        httpd.server_close()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait(pred: object, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def _start_parent(url: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DEEPSEEKBENCH_API_KEY": SECRET,
        "MY_ROUTE_KEY": ROUTE_SECRET,  # a route's api_key_env
    }
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, url, ROUTE_SECRET],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    assert parent.stdout is not None
    line = parent.stdout.readline().decode()
    pids = [int(p) for p in line.split()]
    assert len(pids) == 2, line
    return parent, pids


def _stop(parent: subprocess.Popen[bytes], pids: list[int]) -> None:
    if parent.poll() is None:
        parent.kill()
        parent.wait(10)
    for pid in pids:  # only our own workers, by pid
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@LINUX
def test_workers_carry_no_key_in_their_environment(server: tuple[str, Counter]) -> None:
    parent, pids = _start_parent(server[0])
    try:
        for pid in pids:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert SECRET.encode() not in environ and ROUTE_SECRET.encode() not in environ
            assert b"DEEPSEEKBENCH_API_KEY" not in environ
        # the parent itself keeps its environment
        assert SECRET.encode() in Path(f"/proc/{parent.pid}/environ").read_bytes()
    finally:
        _stop(parent, pids)


@LINUX
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_die_with_their_parent(server: tuple[str, Counter], sig: signal.Signals) -> None:
    url, counter = server
    parent, pids = _start_parent(url)
    try:
        sent = _wait(lambda: counter.n >= 20, 60)
        assert sent, "the workers never sent"
        parent.send_signal(sig)
        parent.wait(10)
        # every worker gone within a bound, and nothing sent after that
        gone = _wait(lambda: not any(_alive(p) for p in pids), 3.0)
        assert gone, "orphaned workers outlived their parent"
        time.sleep(0.3)  # requests in flight at the kill land
        after = counter.n
        time.sleep(1.5)
        late = counter.n - after
        assert late == 0, "requests sent by orphans"
    finally:
        _stop(parent, pids)
