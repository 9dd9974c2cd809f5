"""Engines launched from the plan: ``[routes.launch]``.

The plan's launch table, each engine's argv, SGLang against a fake server, a run of
launched embedded-engine routes recording what it launched, and no engine process
surviving a run killed by SIGTERM or SIGKILL.
"""

from __future__ import annotations

import importlib.util
import io
import ipaddress
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from deepseekbench import (
    BenchmarkPlan,
    LaunchSpec,
    LiveGate,
    LiveGateError,
    PlanError,
    RouteIdentity,
    Scorecard,
    is_loopback_host,
    load_results,
    run_plan,
)
from deepseekbench._cli._demo import demo_capacity_plan
from deepseekbench._cli._main import main as cli_main
from deepseekbench._launch._exposure import BIND_FLAGS, bind_hosts, check_bind
from deepseekbench._launch._plan_launch import (
    LaunchTarget,
    check_exposure,
    launch_argv,
    launch_secrets,
    launched_routes,
)
from deepseekbench._plan._launch_spec import ENGINES
from deepseekbench._plan._routes import LAUNCHED_URL
from deepseekbench._runner._preflight import launch_targets
from tests._helpers import read_records, verdict_judged
from tests._procs import FAKE_HTTP_SERVE, running, wait_gone

ROOT = Path(__file__).resolve().parents[2]
COST = "engine_args = {target_step_ms = 2.0, verify_token_ms = 0.1, draft_step_ms = 0.15}"


def _plan(mtp_launch: str, extra: str = "") -> BenchmarkPlan:
    return BenchmarkPlan.from_toml(
        f"""
model = "deepseekbench-ref"
requests_per_cell = 9
warmup_per_cell = 0
repeats = 3
{extra}
[workload]
output_length = "forced"  # decode to the cap: the prompts' natural answers are a few tokens
[parity]
max_tokens = 32
concurrency = 8
tasks = "none"
prompts = ["Count from 1 to 9.", "What is 6 times 7?"]
[[routes]]
label = "off"
speculative = "off"
launch = {{engine = "embedded", {COST}}}
[[routes]]
label = "mtp"
speculative = "mtp"
launch = {mtp_launch}
"""
    )


# ----------------------------------------------------------------- the plan
def test_a_grid_expands_into_one_route_per_depth_with_a_stable_hash() -> None:
    plan = _plan(f'{{engine = "embedded", spec_tokens = [1, 2, 4], {COST}}}')
    labels = [r.label for r in plan.routes]
    assert labels == ["off", "mtp-k1", "mtp-k2", "mtp-k4"]
    for r, k in zip(plan.routes[1:], (1, 2, 4), strict=True):
        assert r.spec_tokens == k and r.grid_of == "mtp" and r.launch is not None
        assert r.launch.spec_tokens == k and r.base_url == LAUNCHED_URL
    again = BenchmarkPlan.model_validate(plan.model_dump(mode="json"))
    assert again.plan_hash() == plan.plan_hash() and again.routes == plan.routes
    # draft model and method lists expand too (method × draft × depth)
    spec = LaunchSpec(engine="vllm", model="m", draft_model=("a", "b"), spec_tokens=(1, 3))
    assert [s for s, _ in spec.grid()] == ["-d1-k1", "-d1-k3", "-d2-k1", "-d2-k3"]


def test_a_plan_without_launch_keeps_its_hash_shape() -> None:
    plan = BenchmarkPlan.model_validate(
        {
            "model": "m",
            "routes": [
                {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:8000/v1"},
                {"label": "mtp", "speculative": "mtp", "base_url": "http://127.0.0.1:8001/v1"},
            ],
        }
    )
    dumped = plan.model_dump(mode="json")["routes"][0]
    assert "launch" not in dumped and "grid_of" not in dumped
    # a launch without env_from dumps (and hashes) as before env_from existed
    spec = LaunchSpec(engine="embedded", env={"A": "1"})
    assert "env_from" not in spec.model_dump(mode="json")
    assert LaunchSpec.model_validate(spec.model_dump(mode="json")) == spec
    taken = LaunchSpec(engine="embedded", env_from={"HF_TOKEN": "MY_TOKEN"})
    assert taken.model_dump(mode="json")["env_from"] == {"HF_TOKEN": "MY_TOKEN"}


def test_llama_cpp_is_read_as_the_llamacpp_engine_and_hashes_as_spelt() -> None:
    """The engine names are the dialects'; a plan spelling llama.cpp's the old way
    loads as ``llamacpp`` and keeps the hash it had (pinned from before the rename)."""
    plan = BenchmarkPlan.from_toml(
        """
model = "m"
[[routes]]
label = "off"
speculative = "off"
launch = {engine = "llama.cpp", model = "m.gguf"}
[[routes]]
label = "mtp"
speculative = "mtp"
launch = {engine = "llama.cpp", model = "m.gguf", spec_tokens = [1, 3]}
"""
    )
    assert [r.launch.engine for r in plan.routes if r.launch] == ["llamacpp"] * 3
    assert plan.plan_hash() == "6f4f65dfcce25822"
    assert plan.routes[1].launch is not None
    assert plan.routes[1].launch.model_dump(mode="json")["engine"] == "llama.cpp"
    assert LaunchSpec(engine="llamacpp", model="m").model_dump()["engine"] == "llamacpp"


def test_every_engine_has_one_launcher_named_after_its_dialect() -> None:
    from deepseekbench import dialect_for
    from deepseekbench._launch import all_launchers, launcher_for

    assert set(all_launchers()) == set(ENGINES)
    for name in ENGINES:
        assert launcher_for(name).name == name
        if name != "embedded":  # the embedded engine speaks the route's dialect
            assert dialect_for(name).name == name
    with pytest.raises(PlanError, match="no launcher"):
        launcher_for("llama.cpp")


@pytest.mark.parametrize(
    ("launch", "speculative", "words"),
    [
        ('{engine = "embedded"}\nbase_url = "http://127.0.0.1:9/v1"', "mtp", "no base_url"),
        ('{engine = "vllm"}', "mtp", "needs launch.model"),
        ('{engine = "embedded", command = ["x"]}', "mtp", "exactly one of engine and command"),
        ('{engine = "embedded", spec_tokens = 2}', "off", "takes no spec_tokens"),
        ('{engine = "embedded", spec_tokens = 2}\nspec_tokens = 3', "mtp", "differs from launch"),
        ('{engine = "embedded", spec_tokens = [1, 2]}\nspec_tokens = 3', "mtp", "its depth in"),
        ('{engine = "embedded", spec_tokens = [0, 2]}', "mtp", ">= 1"),
    ],
)
def test_bad_launch_tables_are_refused_at_load(launch: str, speculative: str, words: str) -> None:
    with pytest.raises(PlanError, match=words):
        BenchmarkPlan.from_toml(
            f"""
model = "m"
[[routes]]
label = "off"
speculative = "off"
base_url = "http://127.0.0.1:8000/v1"
[[routes]]
label = "x"
speculative = "{speculative}"
launch = {launch}
"""
        )


# ----------------------------------------------------------------- argv
def _target(speculative: str = "mtp", **launch: Any) -> LaunchTarget:
    return LaunchTarget("r", LaunchSpec(**launch), speculative, "vllm", "served-name")


def test_llama_argv_reuses_the_llama_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = ROOT / "tests" / "_procs.py"  # any executable-looking file; not run
    monkeypatch.setenv("LLAMA_SERVER", sys.executable)
    t = _target("draft", engine="llama.cpp", model=str(fake), draft_model="d.gguf",
                spec_tokens=3, engine_args={"ctx_size": 512, "flash_attn": True})  # fmt: skip
    argv = launch_argv(t, 4321)
    assert argv[0] == sys.executable
    joined = " ".join(argv)
    assert "--port 4321" in joined and "--host 127.0.0.1" in joined
    assert "--spec-type draft-simple" in joined and "--spec-draft-model d.gguf" in joined
    assert "--spec-draft-n-max 3" in joined and "--ctx-size 512" in joined
    assert "--alias served-name" in joined and "--flash-attn" in joined


def test_vllm_argv_carries_the_speculative_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPSEEKBENCH_VLLM_PYTHON", raising=False)
    args = {"max_num_seqs": 8, "speculative_config": {"attention_backend": "X"}}
    t = _target(engine="vllm", model="/models/ds", spec_tokens=2, engine_args=args)
    argv = launch_argv(t, 4321)
    cfg = orjson.loads(argv[argv.index("--speculative-config") + 1])
    assert cfg == {"method": "mtp", "num_speculative_tokens": 2, "attention_backend": "X"}
    assert argv[argv.index("--max-num-seqs") + 1] == "8"
    assert argv[argv.index("--served-model-name") + 1] == "served-name"
    assert t.spec_config()["spec_tokens"] == 2


def test_sglang_argv_uses_its_documented_flags() -> None:
    t = _target("eagle3", engine="sglang", model="/m", draft_model="/d", spec_tokens=3)
    argv = launch_argv(t, 4321)
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    assert flags["--speculative-algorithm"] == "EAGLE3"
    assert flags["--speculative-num-steps"] == "3"
    assert flags["--speculative-eagle-topk"] == "1"
    assert flags["--speculative-num-draft-tokens"] == "4"
    assert flags["--speculative-draft-model-path"] == "/d"
    assert flags["--model-path"] == "/m" and flags["--port"] == "4321"
    off = launch_argv(_target("off", engine="sglang", model="/m"), 1)
    assert not any(a.startswith("--speculative") for a in off)


def test_a_raw_command_gets_its_port_and_model() -> None:
    t = _target(command=("srv", "--port={port}", "--name", "{model}"), extra_args=("-v",))
    assert launch_argv(t, 99) == ["srv", "--port=99", "--name", "served-name", "-v"]


# ----------------------------------------------------------------- SGLang, fake
FAKE_SGLANG = (
    """\
import argparse, json, http.server
p = argparse.ArgumentParser()
for flag in ("--model-path", "--served-model-name", "--host", "--port",
             "--speculative-algorithm", "--speculative-draft-model-path",
             "--speculative-num-steps", "--speculative-eagle-topk",
             "--speculative-num-draft-tokens"):
    p.add_argument(flag)
a = p.parse_args()  # an unknown flag exits 2: the launcher must speak SGLang's flags
port = int(a.port)
assert a.host == "127.0.0.1"

def get(path):
    if path == "/v1/models":
        return 200, json.dumps({"data": [{"id": a.served_model_name}]}).encode()
    if path == "/get_server_info":
        return 200, json.dumps({"version": "0.0-fake",
                                "speculative_num_steps": int(a.speculative_num_steps)}).encode()
    return 404, b"{}"
"""
    + FAKE_HTTP_SERVE
)


def test_sglang_launch_against_a_fake_server(tmp_path: Path) -> None:
    pkg = tmp_path / "fake" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(FAKE_SGLANG)
    spec = LaunchSpec(
        engine="sglang", model="/m", spec_tokens=2, env={"PYTHONPATH": str(tmp_path / "fake")},
        startup_timeout_s=30,
    )  # fmt: skip
    target = LaunchTarget("sg", spec, "mtp", "sglang", "served")

    async def main() -> tuple[Any, int]:
        async with launched_routes([target], log_dir=tmp_path / "logs") as up:
            server = up["sg"]
            assert running(server.pid)
            return server, server.pid

    server, pid = anyio.run(main)
    assert server.record.version == "sglang 0.0-fake"
    assert server.record.engine == "sglang"
    assert "--speculative-num-steps" in server.record.command
    assert server.record.spec_config == {"method": "EAGLE", "spec_tokens": 2}
    assert wait_gone([pid], 10) == []


# ----------------------------------------------------------------- a run
def test_a_run_of_launched_routes_records_what_it_launched(tmp_path: Path) -> None:
    results = tmp_path / "run.jsonl"
    plan = _plan(f'{{engine = "embedded", spec_tokens = [1, 2], {COST}}}')
    pids: list[int] = []

    async def main() -> Any:
        return await run_plan(plan, gate=LiveGate(), results_path=results)

    result = anyio.run(main)
    rows = {r.route_label: r for r in result.rows}
    assert set(rows) == {"off", "mtp-k1", "mtp-k2"}
    for label, row in rows.items():
        assert row.engine_command is not None and row.engine_version is not None
        assert "--port" in row.engine_command
        port = int(row.engine_command[row.engine_command.index("--port") + 1])
        assert port > 1
        assert row.route_identity is RouteIdentity.ok, row.route_identity_detail
        if label != "off":
            depth = int(label[-1])
            assert row.engine_command[row.engine_command.index("--draft-depth") + 1] == str(depth)
            assert orjson.loads(row.spec_config or "{}")["spec_tokens"] == depth
            assert row.spec_tokens == depth
    # the depth grid: one choice per load, among credited configurations, as JSON
    card = Scorecard.from_run(result)
    (choice,) = card.best_configs()
    assert choice.grid == "mtp" and choice.concurrency == 1
    depths = [ln.verdict for ln in card.lines if ln.route in ("mtp-k1", "mtp-k2")]
    assert len(depths) == 2 and all(v is not None and verdict_judged(v) for v in depths)
    if choice.best is None:  # a busy machine refused both depths, for clock reasons only
        assert not any(v is not None and v.printed for v in depths), depths
    else:
        assert choice.best in ("mtp-k1", "mtp-k2")
        assert choice.spec_config["spec_tokens"] == int(choice.best[-1])
    assert "Best configuration per load" in card.to_text()
    assert orjson.loads(card.to_json())["best_configs"][0]["best"] == choice.best
    out = tmp_path / "best.json"
    assert cli_main(["report", str(results), "--best-config", str(out)]) == 0
    assert orjson.loads(out.read_bytes())["choices"][0]["best"] == choice.best
    start = next(r for r in read_records(results) if r["record"] == "run_start")
    assert set(start["launched"]) == set(rows)
    assert load_results(results).rows == result.rows  # the file alone says what ran
    for r in rows.values():  # every launched engine was stopped
        assert r.engine_command is not None
        pids += [p for p in _pids_listening_on(r.engine_command)]
    assert pids == []


def _pids_listening_on(argv: tuple[str, ...]) -> list[int]:
    """Processes whose command line is exactly ``argv``."""
    out = []
    want = "\0".join(argv)
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().decode(errors="replace").rstrip("\0")
            except OSError:
                continue
            if cmd == want and running(int(d.name)):
                out.append(int(d.name))
    return out


# ----------------------------------------------------------------- no orphan
PARENT = """\
import sys, anyio
from pathlib import Path
from deepseekbench._net._gate import LiveGate
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._runner._run import run_plan

plan = BenchmarkPlan.load(Path(sys.argv[1]))
anyio.run(lambda: run_plan(plan, gate=LiveGate()))
"""


def _children(pid: int) -> list[int]:
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                kids.append(int(d.name))
    return kids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_the_run_leaves_no_engine_process(tmp_path: Path, sig: signal.Signals) -> None:
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(
        f"""
model = "deepseekbench-ref"
requests_per_cell = 2000
results = "run.jsonl"
[parity]
tasks = "none"
prompts = ["Count from 1 to 9."]
[[routes]]
label = "off"
speculative = "off"
launch = {{engine = "embedded", {COST}}}
[[routes]]
label = "mtp"
speculative = "mtp"
launch = {{engine = "embedded", spec_tokens = 2, {COST}}}
"""
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(plan_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    engines: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and parent.poll() is None:
            results = tmp_path / "run.jsonl"
            if results.exists() and b'"measurement"' in results.read_bytes():
                break  # both engines serve and the run is measuring
            time.sleep(0.2)
        assert parent.poll() is None, parent.communicate()[1]
        engines = [p for p in _children(parent.pid) if running(p)]
        assert len(engines) == 2, engines
        parent.send_signal(sig)
        parent.wait(timeout=30)
        assert wait_gone(engines, 15) == [], f"engines {engines} outlived a {sig.name}ed run"
    finally:
        if parent.poll() is None:
            parent.kill()
        for p in engines:
            if running(p):
                os.kill(p, signal.SIGKILL)


def test_a_run_that_fails_after_the_launch_stops_its_engines(tmp_path: Path) -> None:
    """A crash of the run (here: the other route is dead) stops what was launched."""
    from deepseekbench import RouteUnreachableError
    from deepseekbench._launch._servers import free_port

    plan = BenchmarkPlan.from_toml(
        f"""
model = "deepseekbench-ref"
[parity]
tasks = "none"
prompts = ["Count from 1 to 9."]
[[routes]]
label = "off"
speculative = "off"
launch = {{engine = "embedded", {COST}}}
[[routes]]
label = "mtp"
speculative = "mtp"
base_url = "http://127.0.0.1:{free_port()}/v1"
"""
    )
    seen: list[int] = []

    def engines() -> list[int]:
        return [
            p
            for p in _children(os.getpid())
            if running(p) and b"serve" in Path(f"/proc/{p}/cmdline").read_bytes()
        ]

    async def main() -> None:
        async def watch() -> None:
            while True:
                seen.extend(p for p in engines() if p not in seen)
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            try:
                with pytest.raises(RouteUnreachableError):
                    await run_plan(plan, gate=LiveGate())
            finally:
                tg.cancel_scope.cancel()

    anyio.run(main)
    assert len(seen) == 1  # the engine was launched ...
    assert wait_gone(seen, 10) == []  # ... and stopped with the failed run


def test_the_version_comes_from_the_server_where_it_tells() -> None:
    import httpx

    from deepseekbench._launch._plan_launch import engine_version

    bodies = {"/version": {"version": "0.32.0"}, "/props": {"build_info": "b11434-abc"}}

    def handler(request: httpx.Request) -> httpx.Response:
        body = bodies.get(request.url.path)
        return httpx.Response(200, json=body) if body else httpx.Response(404)

    async def ask(engine: str | None, **kw: Any) -> str | None:
        t = _target("mtp", engine=engine, model="m", **kw)
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await engine_version(client, t, "http://127.0.0.1:9")

    assert anyio.run(ask, "vllm") == "vllm 0.32.0"
    assert anyio.run(ask, "llama.cpp") == "llama.cpp b11434-abc"
    assert anyio.run(ask, "embedded") is not None
    # SGLang's server does not say here: the package's version, else unknown
    if importlib.util.find_spec("sglang") is None:
        assert anyio.run(ask, "sglang") is None
    else:
        assert str(anyio.run(ask, "sglang")).endswith("(package)")
    assert anyio.run(lambda: ask(None, command=("srv",))) is None


# A vLLM server that does not stop on SIGTERM (a real vLLM 0.32 server whose parent
# died during its start-up outlived it), with a worker of its own that ignores it too.
_STUBBORN_SERVER = """\
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(os.getpid(), worker.pid, flush=True)
time.sleep(120)
"""

# Starts the stubborn server through the vLLM launcher, waits for its pids, prints
# them and exits without stopping it (as a run killed by SIGKILL would).
_ORPHANING_PARENT = """\
import os, sys, time
from pathlib import Path
from deepseekbench._launch._servers import spawn
from deepseekbench._launch._vllm import _LAUNCHER, VllmServerSpec, _server_env
folder = Path(sys.argv[1])
env = {"PYTHONPATH": os.fspath(folder), "DEEPSEEKBENCH_ORPHAN_GRACE_S": "1"}
env = _server_env(VllmServerSpec(name="stubborn", model=folder), env)
log = folder / "server.log"
spawn([sys.executable, "-c", _LAUNCHER, "stubborn_server"], log.open("wb"), env)
deadline = time.monotonic() + 30
while not log.read_text().strip() and time.monotonic() < deadline:
    time.sleep(0.05)
print(log.read_text().strip(), flush=True)
os._exit(0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups, /proc")
def test_a_vllm_server_that_ignores_sigterm_dies_with_its_parent(tmp_path: Path) -> None:
    """The vLLM launcher stops its server's whole group once the process that started
    it is gone, even when the server ignores SIGTERM: SIGKILL after the grace period."""
    (tmp_path / "stubborn_server.py").write_text(_STUBBORN_SERVER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _ORPHANING_PARENT, str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    pids = [int(p) for p in out.stdout.split()]
    try:
        assert len(pids) == 2, (out.stdout, out.stderr)
        assert wait_gone(pids, 15) == [], f"server and worker {pids} outlived their parent"
    finally:
        for p in pids:
            if running(p):
                os.kill(p, signal.SIGKILL)


# ----------------------------------------------------------------- a launch is code
# A launched engine listens on loopback unless the gate is open for spending; secrets
# reach the engine through the environment by name and never the results, the dry
# run or an error.
FAKE_ENGINE = (
    """\
import argparse, json, http.server, sys
p = argparse.ArgumentParser()
for flag in ("--host", "--port", "--served-model-name", "--alias"):
    p.add_argument(flag)
a, _ = p.parse_known_args()
if a.host != "127.0.0.1":  # a launcher that leaves the bind address open fails here
    sys.exit(3)
port = int(a.port)
name = a.served_model_name or a.alias

def get(path):
    if path == "/v1/models":
        return 200, json.dumps({"data": [{"id": name}]}).encode()
    return 404, b"{}"
"""
    + FAKE_HTTP_SERVE
)
SECRET = "hf_" + "Zq8" * 10  # a Hugging Face token's shape


def _fake_engine(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LaunchSpec:
    """A launch of ``kind`` (``vllm`` or ``llama.cpp``) whose program is FAKE_ENGINE."""
    if kind == "llama.cpp":
        exe = tmp_path / "llama-server"
        exe.write_text(f"#!{sys.executable}\n{FAKE_ENGINE}")
        exe.chmod(0o755)
        monkeypatch.setenv("LLAMA_SERVER", str(exe))
        return LaunchSpec(engine="llamacpp", model="m.gguf", startup_timeout_s=30)
    pkg = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for folder in (pkg, pkg.parent, pkg.parent.parent):
        (folder / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(FAKE_ENGINE)
    monkeypatch.setenv("DEEPSEEKBENCH_VLLM_PYTHON", sys.executable)
    return LaunchSpec(
        engine="vllm", model="/m", env={"PYTHONPATH": str(tmp_path / "fake")}, startup_timeout_s=30
    )


@pytest.mark.parametrize("kind", ["vllm", "llama.cpp"])
def test_a_launched_engine_is_told_to_listen_on_loopback(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's own --host default is every interface: the launcher passes 127.0.0.1
    (the fake exits unless it gets it), and a plan's other address is refused
    before anything starts, unless the gate is open for spending."""
    spec = _fake_engine(kind, tmp_path, monkeypatch)
    target = LaunchTarget("r", spec, "off", "vllm", "served")

    async def launch(t: LaunchTarget, logs: Path) -> Any:
        async with launched_routes([t], log_dir=logs) as up:
            return up["r"]

    server = anyio.run(launch, target, tmp_path / "logs")
    argv = list(server.record.command)
    assert bind_hosts(argv, {}) == [("--host", "127.0.0.1")]
    assert wait_gone([server.pid], 10) == []

    exposed = spec.model_copy(update={"engine_args": {"host": "0.0.0.0"}})
    wide = LaunchTarget("r", exposed, "off", "vllm", "served")
    with pytest.raises(LiveGateError, match=r"'0\.0\.0\.0' \(--host\).*API key.*spend"):
        anyio.run(launch, wide, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()  # refused before any start: no log
    open_gate = LiveGate(api_key="k", spend=True)
    assert "0.0.0.0" in check_exposure(wide, open_gate)  # admitted: key and spend
    with pytest.raises(LiveGateError):
        check_exposure(wide, LiveGate(api_key="k"))  # a key without spend is not enough


@pytest.mark.parametrize(
    ("launch", "host"),
    [
        ({"engine": "embedded", "engine_args": {"host": "0.0.0.0", "allow_non_loopback": True}},
         "0.0.0.0"),
        ({"engine": "embedded", "extra_args": ("--host=::",)}, "::"),
        ({"command": ("srv", "--port", "{port}", "--bind", "0.0.0.0:{port}")}, "0.0.0.0"),
        ({"command": ("srv", "--listen_address", "[2001:db8::1]:80")}, "2001:db8::1"),
        ({"command": ("srv",), "env": {"LLAMA_ARG_HOST": "10.0.0.5"}}, "10.0.0.5"),
    ],
)  # fmt: skip
def test_every_way_to_set_a_listen_address_is_checked(launch: dict[str, Any], host: str) -> None:
    t = _target("off", **launch)
    with pytest.raises(LiveGateError) as info:
        check_exposure(t, LiveGate())
    assert info.value.host == host
    spawned: list[str] = []

    async def main() -> None:
        async with launched_routes([t]):
            spawned.append("started")

    with pytest.raises(LiveGateError):
        anyio.run(main)
    assert spawned == []
    loopback = _target("off", command=("srv", "--host", "127.0.0.1", "--bind=localhost:9"))
    assert check_exposure(loopback, LiveGate())[:2] == ["srv", "--host"]


@settings(deadline=None, max_examples=200)
@given(
    address=st.ip_addresses(),
    flag=st.sampled_from(sorted(BIND_FLAGS)),
    form=st.sampled_from(["split", "equals", "with port"]),
    underscores=st.booleans(),
)
def test_a_listen_address_is_refused_exactly_when_it_is_not_loopback(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, flag: str, form: str, underscores: bool
) -> None:
    host = str(address)
    name = "--" + (flag.replace("-", "_") if underscores else flag)
    value = f"[{host}]:8000" if ":" in host else f"{host}:8000"
    argv = {"split": ["srv", name, host], "equals": ["srv", f"{name}={host}"],
            "with port": ["srv", name, value]}[form]  # fmt: skip
    if is_loopback_host(host):
        check_bind("r", argv, {}, LiveGate())
        return
    with pytest.raises(LiveGateError) as info:
        check_bind("r", argv, {}, LiveGate())
    assert info.value.host == host
    check_bind("r", argv, {}, LiveGate(api_key="k", spend=True))  # the open gate admits it


def test_the_dry_run_refuses_a_launch_beyond_loopback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan_file = _secret_plan(tmp_path, '{engine = "embedded", engine_args = {host = "0.0.0.0"}}')
    monkeypatch.delenv("DEEPSEEKBENCH_API_KEY", raising=False)
    monkeypatch.delenv("DEEPSEEKBENCH_SPEND", raising=False)
    monkeypatch.setenv("SRC_TOKEN", SECRET)
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["run", str(plan_file), "--dry-run"], stdout=out, stderr=err) == 3
    assert "route off: gate would refuse: route 'off': launch would listen on '0.0.0.0'" in (
        err.getvalue()
    )
    monkeypatch.setenv("DEEPSEEKBENCH_API_KEY", "k")
    out, err = io.StringIO(), io.StringIO()
    args = ["run", str(plan_file), "--dry-run", "--spend", "--format", "json"]
    assert cli_main(args, stdout=out, stderr=err) == 0, err.getvalue()
    shown = orjson.loads(out.getvalue())
    assert "--host" in shown["launch_commands"]["off"]
    assert shown["launch_env"]["mtp"] == ["HF_TOKEN=$SRC_TOKEN"]


@pytest.mark.parametrize(
    "launch",
    [
        f'{{engine = "embedded", env = {{HF_TOKEN = "{SECRET}"}}}}',
        f'{{engine = "embedded", env = {{HUB = "{SECRET}"}}}}',
        f'{{engine = "embedded", engine_args = {{hf_token = "{SECRET}"}}}}',
        f'{{command = ["srv", "--api-key", "{SECRET}"]}}',
        f'{{engine = "embedded", extra_args = ["--token={SECRET}"]}}',
    ],
)
def test_a_secret_in_a_launch_is_refused_without_showing_it(launch: str, tmp_path: Path) -> None:
    text = f'model = "m"\n[[routes]]\nlabel = "off"\nspeculative = "off"\nlaunch = {launch}\n'
    with pytest.raises(PlanError, match="looks like a secret") as info:
        BenchmarkPlan.from_toml(text)
    assert SECRET not in str(info.value)
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["run", str(plan_file), "--dry-run"], stdout=out, stderr=err) == 2
    assert "env_from" in err.getvalue() and SECRET not in out.getvalue() + err.getvalue()
    fine = LaunchSpec(engine="embedded", env={"TOKENIZERS_PARALLELISM": "false"})
    assert fine.env == {"TOKENIZERS_PARALLELISM": "false"}
    # units and numbers are not secrets: the capacity demo's own costs load
    assert LaunchSpec(engine="embedded", engine_args={"compute_ms_per_token": 2.7})
    assert len(demo_capacity_plan().routes) == 5


def test_an_older_results_file_with_a_secret_in_its_launch_still_reads() -> None:
    """The rule is for plans to run: a results file written before it stays readable
    (its plan is only read back, never launched)."""
    from deepseekbench._store._results import _stored_plan

    data = _plan('{engine = "embedded"}').model_dump(mode="json")
    data["routes"][0]["launch"]["env"] = {"HF_TOKEN": SECRET}
    with pytest.raises(ValidationError):
        BenchmarkPlan.model_validate(data)
    assert _stored_plan(data).routes[0].launch.env == {"HF_TOKEN": SECRET}  # type: ignore[union-attr]


def test_the_secrets_a_launch_redacts() -> None:
    """env_from values, the gate's key and this environment's credential-looking
    variables; not a short value (it would be replaced wherever its letters occur)."""
    t = _target("off", command=("srv",), env_from={"HF_TOKEN": "SRC"})
    environ = {"SRC": "from-env-from", "HUB_TOKEN": SECRET, "SHORT_KEY": "x", "PATH": "/bin"}
    found = launch_secrets([t], LiveGate(api_key="gate-key-1"), environ)
    assert sorted(found) == sorted([SECRET, "from-env-from", "gate-key-1"])


def test_a_command_given_as_a_string_says_it_must_be_a_list() -> None:
    with pytest.raises(PlanError, match=r"must be a list of argv strings.*no shell"):
        BenchmarkPlan.from_toml(
            'model = "m"\n[[routes]]\nlabel = "off"\nspeculative = "off"\n'
            'launch = {command = "vllm serve m --port {port}"}\n'
        )


def _secret_plan(tmp_path: Path, off_launch: str) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(
        f"""
model = "deepseekbench-ref"
requests_per_cell = 2
repeats = 1
warmup_per_cell = 0
[workload]
output_length = "forced"
prompts = ["What is 6 times 7?"]
[parity]
max_tokens = 8
tasks = "none"
prompts = ["Count from 1 to 9."]
[[routes]]
label = "off"
speculative = "off"
launch = {off_launch}
[[routes]]
label = "mtp"
speculative = "mtp"
launch = {{engine = "embedded", spec_tokens = 2, env_from = {{HF_TOKEN = "SRC_TOKEN"}}, {COST}}}
"""
    )
    return path


def test_a_secret_from_the_environment_stays_out_of_results_dry_run_and_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SRC_TOKEN", SECRET)
    launch = f'{{engine = "embedded", env_from = {{HF_TOKEN = "SRC_TOKEN"}}, {COST}}}'
    plan_file = _secret_plan(tmp_path, launch)
    # the dry run: each command line, and the variables' names only
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["run", str(plan_file), "--dry-run"], stdout=out, stderr=err) == 0
    shown = out.getvalue() + err.getvalue()
    assert "route off launches: " in shown and "--host 127.0.0.1" in shown
    assert "env set: HF_TOKEN=$SRC_TOKEN" in shown and SECRET not in shown
    # a run: the engine gets the value, the results file holds the name only
    results = tmp_path / "run.jsonl"
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["run", str(plan_file), "--results", str(results)], stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    assert SECRET.encode() not in results.read_bytes()
    start = next(r for r in read_records(results) if r["record"] == "run_start")
    assert start["plan"]["routes"][0]["launch"]["env_from"] == {"HF_TOKEN": "SRC_TOKEN"}
    # an engine that prints its environment and argv and dies in start-up
    dying = (
        '{command = ["python3", "-c", "import os, sys; print(os.environ[\'HF_TOKEN\'], '
        'sys.argv); sys.exit(1)", "--port", "{port}"], env_from = {HF_TOKEN = "SRC_TOKEN"}}'
    )
    plan_file = _secret_plan(tmp_path, dying)
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["run", str(plan_file), "--results", str(tmp_path / "x.jsonl")],
                    stdout=out, stderr=err)  # fmt: skip
    text = err.getvalue()
    assert code == 2, text
    assert "route 'off' exited with code 1" in text and "*** ['-c', '--port'" in text
    assert SECRET not in text and "Traceback" not in text
    monkeypatch.delenv("SRC_TOKEN")
    with pytest.raises(PlanError, match="SRC_TOKEN is not set"):
        anyio.run(lambda: run_plan(BenchmarkPlan.load(plan_file), gate=LiveGate()))


# ----------------------------------------------------------------- a stop
_WORKER = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('up', flush=True); time.sleep(600)"
)
_STUBBORN_CHILD = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {_WORKER!r}], stdout=sys.stdout)
time.sleep(600)
"""


def _live_members(pgid: int) -> list[int]:
    """Non-zombie processes of group ``pgid`` (``/proc/<pid>/stat``: state, ppid, pgrp)."""
    live = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[2] == str(pgid) and fields[0] != "Z":
            live.append(int(entry.name))
    return live


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_a_stop_returns_only_when_no_process_of_the_group_is_left(tmp_path: Path) -> None:
    """A server whose worker ignores SIGTERM is SIGKILLed after the grace period, and the
    stop returns only once that worker is gone too: a caller (a test counting processes,
    the next server on the same GPU) finds nothing of it left."""
    from deepseekbench._launch._servers import spawn, stop

    log = tmp_path / "server.log"

    async def main() -> int:
        with log.open("wb") as out:
            child = spawn([sys.executable, "-c", _STUBBORN_CHILD], out, dict(os.environ))
            with anyio.fail_after(60):  # the worker started (it printed), whatever the load
                while True:  # polled: the log file sends no event
                    if "up" in log.read_text():
                        break
                    await anyio.sleep(0.05)
            await stop(child, 0.2, linger=True)
            return child.pid

    pgid = anyio.run(main)
    assert _live_members(pgid) == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_a_group_of_zombies_is_not_alive() -> None:
    """A stopped server's group counts as gone once only zombies are left in it: a
    zombie holds no port, memory or GPU, and a container's PID 1 may never reap the
    workers a server left behind (a stop would otherwise wait out its whole bound)."""
    from deepseekbench._launch._servers import _group_alive

    leader = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    try:
        stat = Path(f"/proc/{leader.pid}/stat")
        deadline = time.monotonic() + 60  # a poll, not a judged time
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.02)
        assert _group_alive(leader.pid) is False  # unreaped: its group still answers kill 0
    finally:
        leader.wait()
    assert _group_alive(leader.pid) is False


def test_the_dry_run_shows_a_vllm_launch_as_the_module_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vLLM server runs under a parent-watch wrapper (``python -c <launcher> module``);
    the dry run shows the ``python -m module --flags`` it runs, not the wrapper's code."""
    plan_file = _secret_plan(tmp_path, '{engine = "vllm", model = "/models/tiny"}')
    monkeypatch.setenv("SRC_TOKEN", SECRET)
    monkeypatch.delenv("DEEPSEEKBENCH_VLLM_PYTHON", raising=False)
    out, err = io.StringIO(), io.StringIO()
    args = ["run", str(plan_file), "--dry-run", "--format", "json"]
    assert cli_main(args, stdout=out, stderr=err) == 0, err.getvalue()
    shown = orjson.loads(out.getvalue())["launch_commands"]["off"]
    assert shown[1:3] == ["-m", "vllm.entrypoints.openai.api_server"], shown
    assert not any("runpy" in a for a in shown) and "--host" in shown
    plan = BenchmarkPlan.from_toml(plan_file.read_text(), base_dir=tmp_path)
    real = launch_argv(next(t for t in launch_targets(plan) if t.name == "off"), "{port}")
    assert any("runpy" in a for a in real)  # the run itself keeps the wrapper
