"""Real vLLM launched by the plan itself (``[routes.launch]``): ``off`` beside
``ngram`` on the generated Llama model.

``run_plan`` starts both vLLM servers on free ``127.0.0.1`` ports, measures and stops
them; the test never holds a server. It checks what the other Llama tests check
(``tests/vllm/test_vllm_llama.py``: every request, the parity verdict against the raw
streamed texts, the per-request ``metrics.speculative_decoding`` counts against vLLM's
``/metrics``) and what the launch adds: each row's ``engine_command`` is the argv its
server ran (the port the requests reached, loopback host, the speculative config),
every socket the servers' processes listen on is on loopback, and no process of either
server's session is left once the run returns, nor once a run is cancelled while its
first server is still starting.

The servers cannot be asked for ``/metrics`` after the run (they are stopped), so the
counters compared are vLLM's own last account seen on each port: the runner's
closing window scrape, recorded by :class:`~tests.vllm.observe.StreamRecorder` and
parsed by the test's own reader, against the zero counters of a fresh server.

These are the step's only tests that start servers of their own (the others share the
session's, ``conftest.vllm_pool``, stopped before these run).
Processes are found through ``/proc`` (Linux): the launched servers are this
process's children, each the leader of its own session (``start_new_session``);
vLLM's engine-core process joins its server's session.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from deepseekbench import (
    BenchmarkPlan,
    LiveGate,
    ProgressEvent,
    QualityParity,
    find_vllm_python,
    run_plan,
)
from deepseekbench._launch._vllm import SERVER_MODULE
from tests.vllm.checks import (
    check_counts,
    check_requests,
    check_verdict,
    measured_texts,
    report_decomposition,
)
from tests.vllm.conftest import MAX_MODEL_LEN, SERVER_THREADS, VllmModels
from tests.vllm.plans import append_report, command_port, pair_plan, run_launched
from tests.vllm.pool import ServerPool

pytestmark = pytest.mark.vllm

MODEL = "deepseekbench-llama-generated"
NUM_SPEC = 3
ENGINE_ARGS: dict[str, Any] = {
    "max_model_len": MAX_MODEL_LEN,
    "threads": SERVER_THREADS,
    "kv_cache_gib": 1,
    "dtype": "float32",
}
NGRAM_CONFIG = {"prompt_lookup_max": 3, "prompt_lookup_min": 1}
CANCEL_WAIT_S = 120.0  # longest wait for the engine core of the run cancelled in start-up
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def launch_plan(models: VllmModels) -> BenchmarkPlan:
    """``off`` and ``ngram`` (depth 3), both launched from the plan."""
    target = os.fspath(models.llama_target)
    off = {"engine": "vllm", "model": target, "engine_args": ENGINE_ARGS}
    ngram = {
        "engine": "vllm",
        "model": target,
        "spec_tokens": NUM_SPEC,
        "engine_args": {**ENGINE_ARGS, "speculative_config": NGRAM_CONFIG},
    }
    return pair_plan(
        MODEL,
        {"label": "off", "speculative": "off", "model": MODEL, "launch": off},
        {"label": "ngram", "speculative": "ngram", "model": MODEL, "launch": ngram},
    )


# --- processes and sockets, from /proc ------------------------------------------


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` fields after the command name (``[0]`` = state, ``[1]`` =
    ppid, ``[3]`` = session, ``[19]`` = start time in clock ticks since boot)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone meanwhile
        return None
    return text[text.rindex(")") + 2 :].split()


def _cmdline(pid: int) -> str:
    """``/proc/PID/cmdline`` (vLLM's engine core sets it to ``VLLM::EngineCore``)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def children() -> list[int]:
    """Live processes whose parent is this one."""
    me = str(os.getpid())
    return [p for p in _pids() if (s := _stat(p)) is not None and s[1] == me and s[0] != "Z"]


def session_members(sids: set[int]) -> list[int]:
    """Live (not zombie) processes in any of the sessions ``sids``."""
    return [p for p in _pids() if (s := _stat(p)) is not None and int(s[3]) in sids and s[0] != "Z"]


def started_at(pid: int) -> float:
    """Wall-clock start time of ``pid`` (s since the epoch)."""
    s = _stat(pid)
    assert s is not None, pid
    btime = next(
        int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
        if line.startswith("btime ")
    )  # fmt: skip
    return btime + int(s[19]) / os.sysconf("SC_CLK_TCK")


def _hex_ip(text: str) -> str:
    raw = bytes.fromhex(text)
    if len(raw) == 4:
        return ".".join(str(b) for b in raw[::-1])
    words = [raw[i : i + 4][::-1] for i in range(0, 16, 4)]  # host-order 32-bit words
    flat = b"".join(words)
    if flat[:12] == b"\0" * 10 + b"\xff\xff":
        return "::ffff:" + ".".join(str(b) for b in flat[12:])
    groups = [f"{int.from_bytes(flat[i : i + 2], 'big'):x}" for i in range(0, 16, 2)]
    text6 = ":".join(groups)
    return "::1" if text6 == "0:0:0:0:0:0:0:1" else text6


def listening(pids: list[int]) -> list[tuple[str, int]]:
    """``(address, port)`` of every TCP socket in LISTEN state held by ``pids``."""
    inodes: set[str] = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        try:
            links = [os.readlink(fd_dir / fd) for fd in os.listdir(fd_dir)]
        except OSError:
            continue
        inodes |= {link[8:-1] for link in links if link.startswith("socket:[")}
    out: list[tuple[str, int]] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A = TCP_LISTEN
                ip, port = cols[1].split(":")
                out.append((_hex_ip(ip), int(port, 16)))
    return out


@dataclass
class ServerWatch:
    """What the first progress event saw of the launched servers (all started by then)."""

    t_run: float  # wall clock when run_plan was called (s)
    t_first: float | None = None  # wall clock of the first progress event
    leaders: dict[int, float] = field(default_factory=dict)  # session leader pid -> start
    members: list[int] = field(default_factory=list)
    listens: list[tuple[str, int]] = field(default_factory=list)

    def __call__(self, event: ProgressEvent) -> None:
        if self.t_first is not None:
            return
        self.t_first = time.time()
        self.leaders = {p: started_at(p) for p in children()}
        self.members = session_members(set(self.leaders))
        self.listens = listening(self.members)


@pytest.fixture
def no_children(vllm_pool: ServerPool) -> Iterator[None]:
    """The test starts with no child process of its own (so each one found is a server
    the plan launched): the session's shared servers are stopped first (the tests
    after these start the ones they need again, once)."""
    vllm_pool.stop_all()
    assert children() == [], "child processes before the test"
    yield


# --- the tests -----------------------------------------------------------------------


def test_cancelled_in_startup_leaves_no_vllm_process(
    vllm_models: VllmModels, no_children: None
) -> None:
    """A run cancelled while its first server (``off``) is starting stops that server's
    whole session, the engine-core process included."""
    plan = launch_plan(vllm_models)
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                gate = LiveGate()
                async with gate.client() as client:
                    await run_plan(plan, gate=gate, results_path=None, client=client)
                seen["finished"] = True  # pragma: no cover - the scope is cancelled first

            async def cancel_when_engine_core_runs() -> None:
                with anyio.move_on_after(CANCEL_WAIT_S):
                    while True:
                        await anyio.sleep(0.5)
                        leaders = children()
                        members = session_members(set(leaders))
                        if any("EngineCore" in _cmdline(p) for p in members):
                            seen["leaders"], seen["members"] = leaders, members
                            break
                tg.cancel_scope.cancel()

            tg.start_soon(run)
            tg.start_soon(cancel_when_engine_core_runs)

    t0 = time.monotonic()
    anyio.run(main)
    assert "finished" not in seen
    assert "members" in seen, f"no engine core beside the server within {CANCEL_WAIT_S} s"
    assert len(seen["leaders"]) == 1, seen  # only off had been started
    left = session_members(set(seen["leaders"]))
    assert left == [], f"processes left after the cancelled run: {left}"
    assert children() == []
    append_report(
        f"launch cancelled in off's start-up: {len(seen['members'])} processes of its "
        f"session (server, engine core, ...) stopped, none left ({time.monotonic() - t0:.0f} s)"
    )


def test_launched_ngram_matches_off_and_is_credited(
    vllm_models: VllmModels, tmp_path: Path, no_children: None
) -> None:
    plan = launch_plan(vllm_models)
    watch = ServerWatch(t_run=time.time())
    run = run_launched(plan, tmp_path, "Llama pair launched by the plan: off vs ngram (vLLM)",
                       progress=watch)  # fmt: skip
    # nothing left of either server once run_plan returned
    assert len(watch.leaders) == 2, watch
    assert session_members(set(watch.leaders)) == []
    assert children() == []

    # each row names the argv its server ran; the requests reached that server's port
    rows = {r.route_label or "": r for r in run.result.rows}
    python = os.fspath(find_vllm_python())
    ports: dict[str, int] = {}
    for label, row in rows.items():
        argv = row.engine_command
        assert argv is not None, label
        assert argv[0] == python and argv[1] == "-c" and argv[3] == SERVER_MODULE, argv
        assert argv[argv.index("--host") + 1] == "127.0.0.1", argv
        assert argv[argv.index("--model") + 1] == os.fspath(vllm_models.llama_target), argv
        assert argv[argv.index("--served-model-name") + 1] == MODEL, argv
        ports[label] = command_port(argv)
        assert run.servers[label].port == ports[label]
        assert row.engine_version is not None and row.engine_version.startswith("vllm "), row
    assert "--speculative-config" not in (rows["off"].engine_command or ())
    assert rows["off"].spec_config is None or orjson.loads(rows["off"].spec_config) == {}
    argv = rows["ngram"].engine_command or ()
    cfg = orjson.loads(argv[argv.index("--speculative-config") + 1])
    assert cfg == {"method": "ngram", "num_speculative_tokens": NUM_SPEC, **NGRAM_CONFIG}, cfg
    assert rows["ngram"].spec_tokens == NUM_SPEC

    # the two servers listened on those ports, and every socket they listened on was
    # on loopback (API servers and whatever vLLM's engine processes opened)
    assert watch.listens, watch
    assert {p for _, p in watch.listens} >= set(ports.values()), (watch.listens, ports)
    assert all(host in LOOPBACK for host, _ in watch.listens), watch.listens

    # what the Llama tests check: every request, parity against the raw texts, counts
    check_requests(run, "ngram")
    matches = check_verdict(run, "ngram")
    check_counts(run, "ngram")
    assert matches == [True] * len(matches)  # n-gram verifies every draft: lossless
    for label in ("off", "ngram"):
        assert rows[label].quality_parity is QualityParity.verified
    texts = measured_texts(run)
    assert texts["ngram"] == texts["off"]
    row = rows["ngram"]
    assert row.draft_tokens and row.accepted_tokens is not None and row.acceptance_length
    report_decomposition(run, "ngram")

    # start-up times: the servers start one after the other, each once the previous
    # one serves its model; the first progress event comes after both
    assert watch.t_first is not None
    starts = sorted(watch.leaders.values())
    first_s, second_s = starts[1] - starts[0], watch.t_first - starts[1]
    append_report(
        f"launched by the plan: 2 vLLM servers ready {watch.t_first - watch.t_run:.0f} s "
        f"after run_plan was called (first server ~{first_s:.0f} s, second <= "
        f"{second_s:.0f} s); their processes listened on {len(watch.listens)} TCP sockets, "
        f"all on loopback; run_plan {run.run_s:.0f} s in all"
    )
    with httpx.Client(trust_env=False) as client:  # the ports are closed now
        for port in ports.values():
            with pytest.raises(httpx.TransportError):
                client.get(f"http://127.0.0.1:{port}/v1/models", timeout=2.0)
