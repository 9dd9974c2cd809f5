"""RayPool against a local Ray instance bound to 127.0.0.1 (dashboard off), the engine on
loopback in the test's event loop. Skipped, with the reason, when ``ray`` is not installed
(``pip install -e '.[ray]'``); marked ``ray``, so the default run deselects them and
``nox -s ray`` / ``.ci/run``'s ray step run them with the extra installed."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import SecretStr

from deepseekbench import (
    BenchmarkPlan,
    ChatRequest,
    CostModel,
    EmbeddedEngine,
    EngineConfig,
    EngineRoute,
    ErrorKind,
    LiveGate,
    LiveGateError,
    LoadWork,
    PoolItem,
    PoolResult,
    QualityParity,
    RayPool,
    Speculative,
    Timeouts,
    is_loopback_host,
    run_plan,
)
from deepseekbench._engine import FAST_COSTS
from deepseekbench._execute._ray_executor import (
    _LOOPBACK_NODE_ENV as _LOOPBACK_SWITCH,
)
from deepseekbench._execute._ray_executor import ray_address_host

pytestmark = [pytest.mark.anyio, pytest.mark.ray]
PROMPTS = ("Count from 3 to 9.", "12 + 30 =", "Reverse brata.", "7 × 8 =")
SECRET = "sk-ray-do-not-leak-51c0"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def work(n: int, concurrency: int, max_tokens: int = 24, **kw: object) -> LoadWork:
    items = tuple(
        PoolItem(
            i,
            "off",
            ChatRequest(
                messages=({"role": "user", "content": PROMPTS[i % 4]},),
                max_tokens=max_tokens,
                temperature=0,
            ),
        )
        for i in range(n)
    )
    return LoadWork(items, concurrency, **kw)  # type: ignore[arg-type]


def need_ray() -> None:
    # find_spec, not importorskip: ray must not be imported before the pool asks
    # it for a loopback-only node
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install -e '.[ray]')")


def proc_files(pid: int) -> bytes:
    return b"".join(Path(f"/proc/{pid}/{part}").read_bytes() for part in ("cmdline", "environ"))


def test_cluster_addresses_are_checked_by_host() -> None:
    assert ray_address_host("local") == "127.0.0.1"
    assert ray_address_host("ray://10.0.0.5:10001") == "10.0.0.5"
    assert ray_address_host("127.0.0.1:6379") == "127.0.0.1"


async def test_a_remote_cluster_address_needs_key_and_spend() -> None:
    need_ray()
    pool = RayPool(1, routes={}, gate=LiveGate(), address="ray://192.0.2.10:10001")
    with pytest.raises(LiveGateError, match=r"192\.0\.2\.10"):
        await pool.start()


async def test_ray_actors_measure_keep_budgets_and_report_deaths(tmp_path: Path) -> None:
    need_ray()
    slow = CostModel(target_step_ms=10.0, verify_token_ms=0.0, draft_step_ms=0.0)
    async with (
        EmbeddedEngine(EngineConfig(cost=FAST_COSTS)) as fast,
        EmbeddedEngine(EngineConfig(speculative=Speculative.mtp, cost=FAST_COSTS)) as mtp,
        EmbeddedEngine(EngineConfig(cost=slow)) as slow_engine,
    ):
        route = EngineRoute(
            base_url=fast.base_url,
            model="deepseekbench-ref",
            label="off",
            api_key=SecretStr(SECRET),
        )
        slow_route = EngineRoute(base_url=slow_engine.base_url, model="deepseekbench-ref")
        gate = LiveGate(api_key=SECRET)
        closed: list[PoolResult] = []
        pool = RayPool(
            2, routes={"off": route}, gate=gate, timeouts=Timeouts(total_s=60), actor_cpus=0
        )
        async with pool:
            import ray  # after the pool asked Ray for loopback-only nodes

            # typed here, so mypy agrees with and without ray installed
            ray_nodes: Callable[[], list[dict[str, Any]]] = ray.nodes
            nodes = ray_nodes()
            assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
            report = await pool.run(work(8, 4), closed.append)
            for pid in pool.pids.values():
                assert SECRET.encode() not in proc_files(pid)
            assert SECRET not in repr(pool)
            # a plan with executor = "ray" (the running instance is reused)
            plan = BenchmarkPlan.model_validate(
                {
                    "model": "deepseekbench-ref",
                    "routes": [
                        {"label": "off", "speculative": "off", "base_url": fast.base_url},
                        {"label": "mtp", "speculative": "mtp", "base_url": mtp.base_url},
                    ],
                    "requests_per_cell": 4,
                    "warmup_per_cell": 0,
                    "repeats": 1,
                    "arrival": {"concurrency": 2},
                    "parity": {"concurrency": 4, "max_tokens": 32},
                    "workers": 2,
                    "executor": "ray",
                }
            )
            planned = await run_plan(plan, gate=LiveGate(), results_path=tmp_path / "r.jsonl")
            # a budget for the run: two actors share one ledger
            bgate = LiveGate(max_requests=3)
            spent: list[PoolResult] = []
            with pytest.raises(LiveGateError, match="request budget"):
                async with RayPool(2, routes={"off": route}, gate=bgate, actor_cpus=0) as bpool:
                    await bpool.run(work(8, 2), spent.append)
            # an actor killed mid-load point
            died: list[PoolResult] = []
            dpool = RayPool(2, routes={"off": slow_route}, gate=LiveGate(), actor_cpus=0)
            async with dpool:

                def kill_1(r: PoolResult) -> None:
                    died.append(r)
                    if r.worker == 1 and len([d for d in died if d.worker == 1]) == 1:
                        os.kill(dpool.pids[1], signal.SIGKILL)

                dreport = await dpool.run(work(12, 4, max_tokens=40), kill_1)
    assert sorted(r.item.key for r in closed if r.item) == list(range(8))
    assert all(r.measurement.error is None and r.measurement.text for r in closed)
    assert {r.worker for r in closed} == {0, 1}
    assert all(r.sent_ns is not None and r.sent_ns >= report.start_ns for r in closed)
    assert report.window_s > 0 and len(report.clock_offsets_ns) == 2
    assert all(abs(off) < 1_000_000_000 for off in report.clock_offsets_ns)  # one host
    # the budget's refusal keeps what was admitted: 3 sent, the rest recorded unsent
    sent = [r for r in spent if r.measurement.error is None]
    assert len(sent) == 3 and bgate.requests_admitted == 3
    assert sorted(r.item.key for r in spent if r.item) == list(range(8))
    assert {r.measurement.error.kind for r in spent if r.measurement.error} == {
        ErrorKind.budget_refused
    }
    assert sorted(r.item.key for r in died if r.item) == list(range(12))
    lost = [r for r in died if r.measurement.error is not None]
    assert lost and {r.measurement.error.kind for r in lost if r.measurement.error} == {
        ErrorKind.worker_died
    }
    assert [d.worker for d in dreport.deaths] == [1]
    assert all(r.n_errors == 0 and r.quality_parity is QualityParity.verified for r in planned.rows)
    records = [orjson.loads(x) for x in (tmp_path / "r.jsonl").read_bytes().splitlines()]
    measured = [r for r in records if r["record"] == "workers" and r["phase"] == "measure"]
    assert measured and all(len(r["clock_offsets_ns"]) == r["workers"] == 2 for r in measured)


# -- every door of the gate: a local instance stays on loopback and phones nowhere ------------
def _descendants(root: int) -> set[int]:
    children: dict[int, set[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, set()).add(int(entry.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _listening(pids: set[int]) -> list[str]:
    """Local addresses of the TCP sockets ``pids`` listen on (hex, from /proc/net)."""
    inodes: set[str] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    found: list[str] = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A = LISTEN
                found.append(cols[1].split(":")[0])
    return found


def _environ(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")


LOOPBACK_HEX = {  # 127.0.0.1, ::1, ::ffff:127.0.0.1
    "0100007F",
    "00000000000000000000000001000000",
    "0000000000000000FFFF00000100007F",
}


async def test_a_local_instance_binds_loopback_and_inherits_no_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    need_ray()
    monkeypatch.setenv("HTTP_PROXY", "http://192.0.2.1:3128")  # TEST-NET-1, never reached
    monkeypatch.setenv("https_proxy", "http://192.0.2.1:3128")
    monkeypatch.setenv("RAY_ADDRESS", "203.0.113.1:6379")  # a local instance ignores it
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "1")
    monkeypatch.setenv("DEEPSEEKBENCH_API_KEY", SECRET)
    off_loopback: list[object] = []

    def guard(event: str, args: tuple[object, ...]) -> None:
        if event == "socket.connect" and len(args) > 1 and isinstance(args[1], tuple):
            host = str(args[1][0])
            if not (host.startswith("127.") or host == "::1"):
                off_loopback.append(args[1])

    sys.addaudithook(guard)
    pool = RayPool(1, routes={}, gate=LiveGate(api_key=SECRET), address="local", actor_cpus=0)
    async with pool:
        procs = _descendants(os.getpid())
        assert procs, "no Ray process found"
        listening = _listening(procs)
        assert listening and set(listening) <= LOOPBACK_HEX, listening
        checked = stats_off = 0
        for pid in procs:
            with contextlib.suppress(OSError):
                env = [v for v in _environ(pid) if v]
                if not env:  # a process title written over its environment block
                    continue
                checked += 1
                assert not any(
                    v.split(b"=", 1)[0].lower() in (b"http_proxy", b"https_proxy") for v in env
                ), pid
                assert not any(v.startswith(b"RAY_ADDRESS=") for v in env), pid
                assert SECRET.encode() not in b"\0".join(env), pid
                # A long process title may overwrite any stretch of the block (setproctitle
                # reuses argv+environ), so absence proves nothing: the driver's "1" must reach
                # no process, and at least one intact block must carry the "0".
                usage = [v for v in env if v.startswith(b"RAY_USAGE_STATS_ENABLED=")]
                assert usage in ([], [b"RAY_USAGE_STATS_ENABLED=0"]), (pid, usage)
                stats_off += bool(usage)
        assert checked and stats_off, "no Ray process environment showed usage statistics off"
    # the driver's own environment is back (but usage statistics stay off)
    assert os.environ["HTTP_PROXY"] == "http://192.0.2.1:3128"
    assert os.environ["RAY_ADDRESS"] == "203.0.113.1:6379"
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"
    assert off_loopback == []


# A local instance under a syscall trace, until Ray's usage module (UsageStatsHead, in the
# dashboard head that runs even with the dashboard off) has named the cloud provider: its
# log says "Usage reporting is ..." just after. Without its own HOME's bootstrap config it
# asks 169.254.169.254 (twice) and resolves metadata.google.internal (a DNS query).
_TRACED_START = """
import pathlib, time
import anyio
from deepseekbench._execute._ray_executor import RayPool
from deepseekbench._net._gate import LiveGate

async def main() -> None:
    async with RayPool(1, routes={}, gate=LiveGate(), address="local", actor_cpus=0):
        import ray
        logs = pathlib.Path(ray._private.worker._global_node.get_logs_dir_path())
        for _ in range(3000):  # a hang guard (10 min), not a speed bound
            text = "".join(p.read_text(errors="replace") for p in logs.glob("dashboard*.log"))
            if "Usage reporting is" in text:
                print("usage module ran", flush=True)
                return
            await anyio.sleep(0.2)

anyio.run(main, backend="asyncio")
"""
_PYTHON_START = (sys.executable, "-c", _TRACED_START)
_STRACE = ("strace", "-f", "-qq", "-e", "trace=connect,sendto", "-o")  # then the output file
_TRACED_ADDRESS = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6?, "([^"]+)"')


def test_a_local_instance_connects_to_no_address_off_this_host(tmp_path: Path) -> None:
    """Every ``connect``/``sendto`` of every process of a local instance (``strace -f``) is
    to a loopback address or a local socket: no cloud metadata probe, no DNS query."""
    need_ray()
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    trace = tmp_path / "trace.txt"
    done = subprocess.run(
        [*_STRACE, str(trace), *_PYTHON_START],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0 and "usage module ran" in done.stdout, done.stderr[-2000:]
    assert_on_this_host(trace)


_TRACED_FAMILY = re.compile(r"sa_family=(AF_\w+)")
_LOCAL_FAMILIES = {"AF_INET", "AF_INET6", "AF_UNIX", "AF_NETLINK"}  # inet ones checked by host


def assert_on_this_host(trace: Path) -> None:
    """Every ``connect``/``sendto`` in an ``strace`` output is to a loopback address, a
    local socket or netlink (a UDP connect counts: it is a connect to that address)."""
    lines = trace.read_text(errors="replace").splitlines()
    found = [(m[1] or m[2], line) for line in lines for m in _TRACED_ADDRESS.finditer(line)]
    assert found, "the trace shows no connect at all: strace saw nothing"
    off_host = [line for host, line in found if not is_loopback_host(host)]
    off_host += [ln for ln in lines for f in _TRACED_FAMILY.findall(ln) if f not in _LOCAL_FAMILIES]
    assert off_host == [], "\n".join(off_host[:10])


# Joining an existing cluster on loopback: Ray replaces a loopback cluster address (and a
# loopback _node_ip_address) with the node's IP (resolve_ip_for_localhost), which it works
# out by connecting a UDP socket to 8.8.8.8:53, unless the node IP is pinned to loopback.
_TRACED_JOIN = """
import sys
import anyio
from deepseekbench._execute._ray_executor import RayPool
from deepseekbench._net._gate import LiveGate

async def main() -> None:
    async with RayPool(1, routes={}, gate=LiveGate(), address=sys.argv[1], actor_cpus=0) as pool:
        import ray
        node_ip = ray._private.worker._global_node.node_ip_address
        nodes = sorted({n["NodeManagerAddress"] for n in ray.nodes()})
        print("joined", node_ip, nodes, len(pool.pids), flush=True)

anyio.run(main, backend="asyncio")
"""


def _session_processes(sid: int) -> set[int]:
    """Processes (not zombies) of session ``sid``, from /proc."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if entry.name.isdigit() and int(fields[3]) == sid and fields[0] != "Z":
                found.add(int(entry.name))
    return found


@contextlib.contextmanager
def loopback_head(env: dict[str, str]) -> Iterator[str]:
    """A Ray head node on 127.0.0.1 (``ray start --head --block``, its own session and
    temporary folder), yielding its address; every process of its session is killed at
    the end, by id (``ray stop`` would stop every Ray instance on the machine)."""
    folder = tempfile.mkdtemp(prefix="dsb-ray-")  # short: Ray's socket paths have a limit
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = Path(folder, "head.log")
    head_env = {**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    args = ["--node-ip-address", "127.0.0.1", "--port", str(port), "--temp-dir", folder]
    args += ["--num-cpus", "1", "--include-dashboard", "false", "--block"]
    ray_cli = str(Path(sys.executable).with_name("ray"))
    with log.open("wb") as out:
        head = subprocess.Popen(
            [ray_cli, "start", "--head", *args],
            env=head_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        for _ in range(3000):  # a hang guard (10 min), not a speed bound
            if "Ray runtime started" in log.read_text(errors="replace") or head.poll() is not None:
                break
            time.sleep(0.2)
        assert head.poll() is None, log.read_text(errors="replace")[-2000:]
        yield f"127.0.0.1:{port}"
    finally:
        for _ in range(50):
            left = _session_processes(head.pid)
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if not left:
                break
            time.sleep(0.2)
        head.wait()
        shutil.rmtree(folder, ignore_errors=True)
        assert _session_processes(head.pid) == set(), "a process of the Ray head outlived it"


def test_joining_a_loopback_cluster_connects_to_no_address_off_this_host(
    tmp_path: Path,
) -> None:
    """The driver joining a cluster at ``127.0.0.1:port`` through :class:`RayPool`, under
    ``strace -f``: its node IP is 127.0.0.1 and every connect/sendto is to a loopback
    address or a local socket (no UDP connect to a public resolver to learn the IP)."""
    need_ray()
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    env = {k: v for k, v in os.environ.items() if k not in {"RAY_ADDRESS", _LOOPBACK_SWITCH}}
    env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    trace = tmp_path / "trace.txt"
    with loopback_head(env) as address:
        driver = subprocess.Popen(
            [*_STRACE, str(trace), sys.executable, "-c", _TRACED_JOIN, address],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # so a hung driver is killed with strace
        )
        try:
            stdout, stderr = driver.communicate(timeout=600)  # a hang guard, not a speed bound
        except subprocess.TimeoutExpired as exc:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.communicate()
            assert_on_this_host(trace)
            raise AssertionError(f"joining {address} hung") from exc
    done = subprocess.CompletedProcess(driver.args, driver.returncode, stdout, stderr)
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()[-200:]}")
    assert_on_this_host(trace)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "joined 127.0.0.1 ['127.0.0.1'] 1" in done.stdout, done.stdout


class _RayImportedEarly:
    """Stands in for ``ray`` imported before the pool (its loopback switch left on)."""

    def __init__(self, cluster_switch: bool) -> None:
        constants = type("C", (), {"ENABLE_RAY_CLUSTER": cluster_switch})
        self._private = type("P", (), {"ray_constants": constants})
        self.inits: list[dict[str, object]] = []

    def is_initialized(self) -> bool:
        return False

    def init(self, **kw: object) -> None:
        self.inits.append(kw)


@pytest.mark.parametrize("address", ["127.0.0.1:6379", None])
def test_a_loopback_node_is_refused_before_ray_starts_when_ray_would_ask_for_its_ip(
    address: str | None,
) -> None:
    """With Ray's switch on, ``ray.init`` would connect to a public resolver to learn the
    node IP: refused before ``init``; off, a loopback cluster is joined as 127.0.0.1."""
    pool = RayPool(1, routes={}, gate=LiveGate(), address=address)
    early = _RayImportedEarly(cluster_switch=True)
    with pytest.raises(LiveGateError, match="pin the node's IP"):
        pool._init_ray(early, address)
    assert early.inits == []
    if address is not None:
        pinned = _RayImportedEarly(cluster_switch=False)
        pool._init_ray(pinned, address)
        assert [i.get("_node_ip_address") for i in pinned.inits] == ["127.0.0.1"]
