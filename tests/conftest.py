"""Suite-wide guard: no test sends a packet off loopback.

An audit hook (PEP 578) sees every ``socket.connect`` and ``socket.sendto`` made in the
test process, whatever library makes it (httpx, aiohttp, h11, Ray's driver, ...). A
destination outside 127.0.0.0/8 and ::1 is refused before the packet leaves
(``PermissionError``) and recorded; the autouse fixture then fails the test that did
it, so a library that swallows the error cannot hide it. Unix-socket paths and
socketpairs are not network traffic and pass. Subprocesses (engines, workers, Ray's
raylets) are outside an in-process hook: their tests check their sockets themselves
(tests/execute/test_ray_executor.py, tests/execute/test_worker_orphans.py).

Every Hypothesis test runs under the ``deepseekbench`` settings profile: no deadline
(a busy machine's pauses are not a failure; a property's speed is not what it checks)
and the failing example's reproduction blob printed. A test's own ``@settings`` inherits
it and only overrides what it names.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import signal
import sys
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests._helpers import DemoRun, run_cli

settings.register_profile("deepseekbench", deadline=None, print_blob=True)
settings.load_profile("deepseekbench")

refused: list[str] = []
"""Destinations the guard refused since the current test started."""


def _off_loopback(address: object) -> str | None:
    """The host of ``address`` when it is an IP destination outside loopback."""
    if not (isinstance(address, tuple) and address and isinstance(address[0], str)):
        return None  # AF_UNIX path, abstract socket, or nothing to judge
    host = address[0].split("%", 1)[0]  # IPv6 scope id
    if host == "localhost":
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host  # a name at connect time: never expected from this suite
    mapped = getattr(ip, "ipv4_mapped", None)
    if ip.is_loopback or (mapped is not None and mapped.is_loopback):
        return None
    return host


def _guard(event: str, args: tuple[object, ...]) -> None:
    if event not in ("socket.connect", "socket.sendto") or len(args) < 2:
        return
    host = _off_loopback(args[1])
    if host is not None:
        refused.append(host)
        raise PermissionError(f"test guard: {event} to {host} refused (loopback only)")


sys.addaudithook(_guard)


@pytest.fixture(autouse=True)
def _no_packet_leaves_loopback() -> Iterator[None]:
    refused.clear()
    yield
    seen, refused[:] = list(refused), []
    assert not seen, f"the test tried to reach non-loopback addresses: {seen}"


# Ray reads this switch once, when it is first imported: on, a node on loopback works
# out its IP by connecting a UDP socket to a public resolver, and the Ray executor
# refuses to start one (it cannot pin the IP any more). The ray-marked tests import ray
# themselves (the address-grammar differential test reads Ray's own parser) before any
# pool runs, so the suite sets it first, as a user who imports ray first must (docs/workers.md).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # A background job of a non-interactive shell (``cmd &`` in a script, a CI step run
    # that way) starts with SIGINT ignored, and an ignored signal stays ignored across
    # exec: every CLI, engine and worker process a test starts would then ignore the
    # Ctrl-C (SIGINT) or SIGTERM-as-interrupt the test sends it. The tests' processes
    # get the interpreter's own handling back, as from an interactive shell.
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for ``pytest -n auto``: one more than the usable cores.

    Most of the suite waits on loopback servers and clocks (measured at 2 workers on
    2 cores: load average about 1, 436 s), so one extra worker fills the idle core
    time; more than that starves the embedded engines the timing tests read.
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still overrides it, as in xdist's own hook."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").isdigit():
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cores or 1) + 1


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The README's first command's job, ``python -m deepseekbench demo``, run as a
    subprocess in a fresh folder (no key, no spend in its environment), once for the
    whole session: xdist workers share a base folder, and the first worker to ask runs
    it under an exclusive lock while the others wait and read what it printed."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the base all workers' folders sit in
    folder = shared / "demo-run"
    done = shared / "demo-run.json"
    with (shared / "demo-run.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            folder.mkdir()
            proc = run_cli("demo", cwd=folder, timeout=300)
            printed = {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
            done.write_text(json.dumps(printed), encoding="utf-8")
    printed = json.loads(done.read_text(encoding="utf-8"))
    return DemoRun(folder, printed["returncode"], printed["stdout"], printed["stderr"])
