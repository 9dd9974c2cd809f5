"""Route specs, argv and process lifecycle of ``_vllm`` without a real vLLM.

A fake ``vllm.entrypoints.openai.api_server`` module (on ``PYTHONPATH``) serves
``/health`` and ``/v1/models`` and, like vLLM's engine core, starts a child process in
its process group. The tests check that every process is gone after a normal exit, an
exception, a crash at start-up, a server ignoring SIGTERM, a SIGTERM of the process that
started the servers, and a SIGKILL of it (the parent-death signal).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from deepseekbench import (
    DeepseekBenchError,
    VllmServerError,
    VllmServerSpec,
    find_vllm_python,
    vllm_server_args,
    vllm_servers,
)
from tests import _procs
from tests.vllm import hf_models
from tests.vllm.conftest import ensure_ci_models, ensure_models
from tests.vllm.pool import session_pool

REPO = Path(__file__).resolve().parents[2]

FAKE_SERVER = (
    """\
import json, os, signal, subprocess, sys, time, http.server
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
name = args[args.index("--served-model-name") + 1]
mode = os.environ.get("FAKE_MODE", "ok")
print("fake vllm", " ".join(args), flush=True)
if mode == "crash":
    print("ValueError: cannot load model", flush=True)
    sys.exit(3)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.path.join(os.environ["FAKE_PIDS"], f"{port}.json"), "w") as f:
    json.dump({"leader": os.getpid(), "child": child.pid}, f)
def stop(*_):
    child.terminate()
    sys.exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "stubborn" else stop)
started = time.monotonic()

def get(path):
    if time.monotonic() - started < 0.3 or mode == "never-ready":
        return 503, b""
    return 200, b"" if path == "/health" else json.dumps({"data": [{"id": name}]}).encode()
"""
    + _procs.FAKE_HTTP_SERVE
)


@pytest.fixture
def fake_env(tmp_path: Path) -> dict[str, str]:
    """PYTHONPATH with the fake server module, and a folder for its pid files."""
    pkg = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(FAKE_SERVER)
    pids = tmp_path / "pids"
    pids.mkdir()
    return {"PYTHONPATH": os.fspath(tmp_path / "fake"), "FAKE_PIDS": os.fspath(pids)}


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A folder standing in for a checkpoint."""
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text("{}")
    return d


def _pids(env: dict[str, str]) -> list[int]:
    out: list[int] = []
    for f in sorted(Path(env["FAKE_PIDS"]).glob("*.json")):
        d = json.loads(f.read_text())
        out += [d["leader"], d["child"]]
    return out


# ---- specs and argv


def test_argv_for_each_route_kind(model_dir: Path) -> None:
    py = Path("/venv/bin/python")
    off = vllm_server_args(VllmServerSpec.off("off", model_dir), port=8000, python=py)
    assert off[:3] == [os.fspath(py), "-m", "vllm.entrypoints.openai.api_server"]
    assert off[off.index("--host") + 1] == "127.0.0.1"
    assert off[off.index("--port") + 1] == "8000"
    assert off[off.index("--served-model-name") + 1] == "off"
    assert off[off.index("--dtype") + 1] == "float32"
    assert "--speculative-config" not in off
    assert off[-1] == "--enable-per-request-metrics"
    assert "--per-request-spec-decode-metrics" not in off  # vLLM refuses it without spec
    ngram = vllm_server_args(VllmServerSpec.ngram("n", model_dir), port=1, python=py)
    assert ngram[-3:] == [
        "--enable-per-request-metrics", "--per-request-spec-decode-metrics", "detailed",
    ]  # fmt: skip

    def cfg(spec: VllmServerSpec) -> dict[str, object]:
        args = vllm_server_args(spec, port=1, python=py)
        loaded = json.loads(args[args.index("--speculative-config") + 1])
        assert isinstance(loaded, dict)
        return loaded

    assert cfg(VllmServerSpec.ngram("n", model_dir)) == {
        "method": "ngram", "num_speculative_tokens": 3,
        "prompt_lookup_max": 3, "prompt_lookup_min": 1,
    }  # fmt: skip
    draft = VllmServerSpec.draft("d", model_dir, model_dir / "draft", num_speculative_tokens=4)
    assert cfg(draft) == {
        "method": "draft_model", "model": os.fspath(model_dir / "draft"),
        "num_speculative_tokens": 4,
    }  # fmt: skip
    mtp = VllmServerSpec.mtp("m", model_dir, enforce_eager=True)
    assert cfg(mtp) == {"method": "mtp", "num_speculative_tokens": 1}
    assert mtp.method == "mtp"
    assert "--enforce-eager" in vllm_server_args(mtp, port=1, python=py)
    quiet = VllmServerSpec.off("q", model_dir, per_request_spec_metrics="none", extra_args=("-x",))
    args = vllm_server_args(quiet, port=1, python=py)
    assert "--enable-per-request-metrics" not in args and args[-1] == "-x"


def test_attention_backend_flag_only_when_set(model_dir: Path) -> None:
    py = Path("/venv/bin/python")
    for spec in (VllmServerSpec.off("o", model_dir), VllmServerSpec.mtp("m", model_dir)):
        args = vllm_server_args(spec, port=1, python=py)
        assert not any(a.startswith("--attention-backend") for a in args)
    off = VllmServerSpec.off("o", model_dir, attention_backend="CPU_MLA")
    args = vllm_server_args(off, port=1, python=py)
    assert args.count("--attention-backend") == 1
    assert args[args.index("--attention-backend") + 1] == "CPU_MLA"
    # the target's flag does not go into the drafter's config (vLLM never inherits it)
    mtp = VllmServerSpec.mtp("m", model_dir, attention_backend="CPU_MLA")
    args = vllm_server_args(mtp, port=1, python=py)
    assert args[args.index("--attention-backend") + 1] == "CPU_MLA"
    spec_cfg = json.loads(args[args.index("--speculative-config") + 1])
    assert spec_cfg == {"method": "mtp", "num_speculative_tokens": 1}


def test_mtp_carries_the_drafter_settings(model_dir: Path) -> None:
    py = Path("/venv/bin/python")
    mtp = VllmServerSpec.mtp(
        "m", model_dir, num_speculative_tokens=2, attention_backend="CPU_MLA",
        draft_attention_backend="CPU_MLA", draft_config={"enforce_eager": True},
    )  # fmt: skip
    assert mtp.speculative_config == {
        "method": "mtp", "num_speculative_tokens": 2,
        "enforce_eager": True, "attention_backend": "CPU_MLA",
    }  # fmt: skip
    args = vllm_server_args(mtp, port=1, python=py)
    assert json.loads(args[args.index("--speculative-config") + 1]) == mtp.speculative_config
    assert args[args.index("--attention-backend") + 1] == "CPU_MLA"
    # the drafter's backend alone, through draft_config, and the deprecated alias
    only_draft = VllmServerSpec.mtp(
        "m", model_dir, method="deepseek_mtp", draft_config={"attention_backend": "CPU_MLA"}
    )
    assert only_draft.speculative_config == {
        "method": "deepseek_mtp", "num_speculative_tokens": 1, "attention_backend": "CPU_MLA",
    }  # fmt: skip
    assert "--attention-backend" not in vllm_server_args(only_draft, port=1, python=py)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"draft_config": {"method": "ngram"}}, r"may not set \['method'\]"),
        ({"draft_config": {"num_speculative_tokens": 5}}, "num_speculative_tokens"),
        (
            {"draft_attention_backend": "CPU_MLA", "draft_config": {"attention_backend": "X"}},
            "given twice",
        ),
        ({"num_speculative_tokens": 0}, ">= 1"),
        ({"method": ""}, "non-empty"),
        ({"draft_attention_backend": "CPU MLA"}, "attention_backend must match"),
        ({"draft_config": {"attention_backend": 3}}, "attention_backend must match"),
        ({"attention_backend": "--enforce-eager"}, "attention_backend"),
    ],
)
def test_mtp_refuses_bad_drafter_settings(
    model_dir: Path, kw: dict[str, object], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        VllmServerSpec.mtp("m", model_dir, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kw",
    [
        {"name": "bad name"},
        {"speculative_config": {"num_speculative_tokens": 3}},
        {"attention_backend": ""},
        {"attention_backend": "CPU_MLA --x"},
        {"speculative_config": {"method": "mtp", "attention_backend": ""}},
        {"max_model_len": 10},
        {"kv_cache_gib": 0},
        {"unknown": 1},
    ],
)
def test_spec_rejects_bad_fields(model_dir: Path, kw: dict[str, object]) -> None:
    base: dict[str, object] = {"name": "r", "model": model_dir}
    with pytest.raises(ValidationError):
        VllmServerSpec.model_validate(base | kw)


def test_server_environment_keeps_vllm_on_loopback_and_quiet(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deepseekbench._launch._vllm import _server_env

    monkeypatch.delenv("VLLM_HOST_IP", raising=False)
    env = _server_env(VllmServerSpec(name="off", model=model_dir), None)
    # without it vLLM's engine core connects to the host's outward address
    assert env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["VLLM_NO_USAGE_STATS"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    assert (
        _server_env(VllmServerSpec(name="off", model=model_dir), {"VLLM_HOST_IP": "::1"})[
            "VLLM_HOST_IP"
        ]
        == "::1"
    )  # a caller's choice wins


def test_find_vllm_python(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DEEPSEEKBENCH_VLLM_PYTHON", raising=False)
    assert find_vllm_python() == Path(sys.executable)
    monkeypatch.setenv("DEEPSEEKBENCH_VLLM_PYTHON", os.fspath(tmp_path / "nope"))
    with pytest.raises(VllmServerError, match="not an executable"):
        find_vllm_python()
    assert issubclass(VllmServerError, DeepseekBenchError)


# ---- lifecycle with the fake server


def _specs(model_dir: Path, n: int = 2) -> list[VllmServerSpec]:
    return [VllmServerSpec.off(f"r{i}", model_dir, served_model_name=f"m{i}") for i in range(n)]


@pytest.mark.anyio
async def test_servers_start_answer_and_every_process_stops(
    fake_env: dict[str, str], model_dir: Path, tmp_path: Path
) -> None:
    async with vllm_servers(_specs(model_dir), log_dir=tmp_path / "logs", env=fake_env) as running:
        assert set(running) == {"r0", "r1"}
        async with httpx.AsyncClient(trust_env=False) as client:
            for i, server in enumerate(running.values()):
                assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
                models = (await client.get(f"{server.base_url}/models")).json()
                assert models["data"][0]["id"] == f"m{i}"
        pids = _pids(fake_env)
        assert len(pids) == 4 and all(_procs.running(p) for p in pids)
        log = (tmp_path / "logs" / "r0.log").read_text()
        assert "--host 127.0.0.1" in log
    assert _procs.wait_gone(pids) == []


@pytest.mark.anyio
async def test_exception_in_block_stops_every_process(
    fake_env: dict[str, str], model_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError, match="test failed"):
        async with vllm_servers(_specs(model_dir), log_dir=tmp_path, env=fake_env):
            raise RuntimeError("test failed")
    pids = _pids(fake_env)
    assert len(pids) == 4
    assert _procs.wait_gone(pids) == []


@pytest.mark.anyio
async def test_crash_at_start_is_a_typed_error_with_the_log(
    fake_env: dict[str, str], model_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(VllmServerError, match="exited with code 3") as info:
        async with vllm_servers(
            _specs(model_dir, 1), log_dir=tmp_path, env=fake_env | {"FAKE_MODE": "crash"}
        ):
            pytest.fail("unreachable")
    assert "cannot load model" in str(info.value)
    assert info.value.name == "r0" and info.value.log_path == tmp_path / "r0.log"


@pytest.mark.anyio
async def test_not_ready_in_time_and_stubborn_server_is_killed(
    fake_env: dict[str, str], model_dir: Path, tmp_path: Path
) -> None:
    env = fake_env | {"FAKE_MODE": "stubborn"}
    async with vllm_servers(_specs(model_dir, 1), log_dir=tmp_path, env=env, stop_grace_s=0.5):
        pass  # the server ignores SIGTERM: SIGKILL of its group after the grace period
    assert _procs.wait_gone(_pids(fake_env)) == []
    never = fake_env | {"FAKE_MODE": "never-ready"}
    with pytest.raises(VllmServerError, match="not ready after 1 s"):
        async with vllm_servers(
            [VllmServerSpec.off("late", model_dir)], log_dir=tmp_path, env=never,
            startup_timeout_s=1.0,
        ):  # fmt: skip
            pytest.fail("unreachable")


@pytest.mark.anyio
async def test_bad_specs_are_refused_before_any_start(model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(VllmServerError, match="duplicate"):
        async with vllm_servers([VllmServerSpec.off("a", model_dir)] * 2):
            pass
    with pytest.raises(VllmServerError, match="no such model"):
        async with vllm_servers([VllmServerSpec.off("a", tmp_path / "missing")]):
            pass


_PARENT = """\
import os, signal, sys, time
# a background job of a non-interactive shell starts with SIGINT ignored; Ctrl-C in a
# terminal reaches a process that has Python's default handler
signal.signal(signal.SIGINT, signal.default_int_handler)
from pathlib import Path
sys.path.insert(0, {repo!r})
from deepseekbench._launch._vllm import VllmServerSpec
from tests.vllm import hf_models
from tests.vllm.conftest import ensure_ci_models, ensure_models
from tests.vllm.pool import session_pool
spec = VllmServerSpec.off("p", Path({model!r}))
with session_pool(Path({logs!r})) as pool:
    pool.serve([spec])
    print("READY", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT])
def test_signal_to_the_starting_process_stops_the_servers(
    fake_env: dict[str, str], model_dir: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    """SIGTERM / Ctrl-C of pytest run the stop path; SIGKILL leaves it to the kernel's
    parent-death signal, which the launcher set on the server."""
    script = textwrap.dedent(_PARENT).format(
        repo=os.fspath(REPO), model=os.fspath(model_dir), logs=os.fspath(tmp_path / "logs")
    )
    env = dict(os.environ) | fake_env
    env["PYTHONPATH"] = os.pathsep.join([os.fspath(REPO), fake_env["PYTHONPATH"]])
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert parent.stdout is not None
        lines = [parent.stdout.readline().strip() for _ in range(3)]  # "", "[vllm] ...", READY
        assert lines[-1] == "READY", lines
        pids = _pids(fake_env)
        assert len(pids) == 2 and all(_procs.running(p) for p in pids)
        parent.send_signal(sig)
        parent.wait(timeout=90)  # a loaded CI machine can take a while to stop
        assert _procs.wait_gone(pids, timeout_s=15) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


# ---- the real-vLLM tests' server pool (tests/vllm/pool.py), with the fake server


def test_pool_starts_each_configuration_once_and_keeps_at_most_two(
    fake_env: dict[str, str], model_dir: Path, tmp_path: Path
) -> None:
    """Tests that ask for the same configuration (under any route name) share one
    process; a third configuration stops the server the request does not name; a
    configuration asked for again after its stop is started again and counted as a
    restart; every process is gone once the pool is."""
    off_a = VllmServerSpec.off("off-a", model_dir, served_model_name="m")
    off_b = VllmServerSpec.off("off-b", model_dir, served_model_name="m")
    ngram = VllmServerSpec.ngram("ngram", model_dir, served_model_name="m")
    draft = VllmServerSpec.draft("draft", model_dir, model_dir, served_model_name="m")
    with session_pool(tmp_path / "logs", env=fake_env) as pool:
        first = pool.serve([off_a, ngram])
        again = pool.serve([off_b, ngram])
        assert again["off-b"] == first["off-a"] and again["ngram"] == first["ngram"]
        assert [s.name for s in pool.starts] == ["off-a", "ngram"]
        third = pool.serve([off_b, draft])
        assert third["off-b"] == first["off-a"]
        assert [s.spec.name for s in pool.running] == ["off-a", "draft"]
        assert not _procs.running(first["ngram"].pid)
        with pytest.raises(ValueError, match="at most 2"):
            pool.serve([off_a, ngram, draft])
        assert pool.restarts == 0
        pool.serve([ngram])
        assert [s.name for s in pool.starts] == ["off-a", "ngram", "draft", "ngram"]
        assert pool.restarts == 1
        assert pool.summary().startswith("vLLM server start-ups: 4 (4 ready, 0 failed) for 3 ")
        assert (tmp_path / "logs" / "04-ngram" / "ngram.log").is_file()
        pids = _pids(fake_env)
    assert pids and _procs.wait_gone(pids) == []


def test_pool_failed_start_is_counted_and_holds_nothing(
    fake_env: dict[str, str], model_dir: Path, tmp_path: Path
) -> None:
    off = VllmServerSpec.off("off", model_dir)
    with session_pool(tmp_path / "logs", env=fake_env | {"FAKE_MODE": "crash"}) as pool:
        with pytest.raises(VllmServerError, match="exited with code 3"):
            pool.serve([off])
        assert pool.running == [] and pool.restarts == 0
        assert [(s.name, s.ready) for s in pool.starts] == [("off", False)]
        assert pool.summary().startswith("vLLM server start-ups: 1 (0 ready, 1 failed)")


# ---- the generated checkpoints' cache (tests/vllm/conftest.ensure_models)

_FAKE_GENERATOR = """#!/bin/sh
# stands in for the vLLM venv's python running hf_models.py OUT ...: records its argv
mkdir -p "$2" && echo "$@" >> "$(dirname "$2")/calls" && echo '{}' > "$2/MANIFEST.json"
"""


def test_models_cache_generates_each_family_only_where_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The CI generates the Llama pair at 300 steps and the DeepSeek model at 30, each
    alone; a folder that has every family (an older cache) serves either request."""
    fake = tmp_path / "python"
    fake.write_text(_FAKE_GENERATOR)
    fake.chmod(0o755)
    monkeypatch.setenv("DEEPSEEKBENCH_VLLM_PYTHON", os.fspath(fake))
    cache = tmp_path / "cache"
    llama, deepseek = ensure_ci_models(cache)
    v = hf_models.GENERATOR_VERSION
    assert llama.root == cache / f"models-v{v}-seed0-steps300-llama"
    assert deepseek.root == cache / f"models-v{v}-seed0-steps30-deepseek"
    calls = (cache / "calls").read_text().splitlines()
    assert [c.split()[-4:] for c in calls] == [
        ["--steps", "300", "--families", "llama"],
        ["--steps", "30", "--families", "deepseek"],
    ]
    assert [m.root for m in ensure_ci_models(cache)] == [llama.root, deepseek.root]
    assert len((cache / "calls").read_text().splitlines()) == 2  # cached: no new run
    full = cache / f"models-v{v}-seed0-steps7"
    full.mkdir()
    (full / "MANIFEST.json").write_text("{}")
    assert ensure_models(cache, steps=7, families=("deepseek",)).root == full
    assert len((cache / "calls").read_text().splitlines()) == 2


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each ``pytest.mark.anyio`` test under asyncio and under trio."""
    return str(request.param)
