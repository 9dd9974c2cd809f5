"""Route specs, argv and process lifecycle of ``_llamacpp`` without a real llama-server.

A fake ``llama-server`` (a Python script serving ``/health`` on ``--port``) stands in
for the binary, so the start / health / stop logic runs in the default test suite.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest
from pydantic import ValidationError

from deepseekbench import (
    DeepseekBenchError,
    LlamaServerError,
    LlamaServerSpec,
    find_llama_server,
    llama_server,
    llama_server_args,
    llama_servers,
)
from tests import _procs
from tests._procs import FAKE_HTTP_SERVE, python_script

FAKE_SERVER = (
    """\
import os, signal, sys, time, http.server
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
mode = os.environ.get("FAKE_MODE", "ok")
print("fake llama-server", " ".join(args), flush=True)
if mode == "crash":
    print("error: failed to load model", flush=True)
    sys.exit(3)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
started = time.monotonic()

def get(path):
    loading = time.monotonic() - started < 0.3 or mode == "never-ready"
    return (503, b'{"status":"loading"}') if loading else (200, b'{"status":"ok"}')
"""
    + FAKE_HTTP_SERVE
)


@pytest.fixture
def fake_binary(tmp_path: Path) -> Path:
    return python_script(tmp_path / "llama-server", FAKE_SERVER)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    p = tmp_path / "m.gguf"
    p.write_bytes(b"GGUF")
    return p


def test_spec_validation(model: Path) -> None:
    with pytest.raises(ValidationError, match="needs draft_model"):
        LlamaServerSpec(name="d", model=model, spec_type="draft-simple")
    with pytest.raises(ValidationError, match="leaves speculation off"):
        LlamaServerSpec(name="d", model=model, draft_model=model)
    with pytest.raises(ValidationError, match="need a speculative"):
        LlamaServerSpec(name="d", model=model, synth_len=2.0)
    with pytest.raises(ValidationError, match="mutually exclusive"):
        LlamaServerSpec.mistuned("d", model, model, synth_len=2.0, synth_rates=(0.5,))
    with pytest.raises(ValidationError):
        LlamaServerSpec(name="bad name/..", model=model)
    with pytest.raises(ValidationError):
        LlamaServerSpec(name="n", model=model, spec_type="eagle")  # type: ignore[arg-type]


def test_argv_per_route(model: Path, tmp_path: Path) -> None:
    exe = tmp_path / "llama-server"
    draft = tmp_path / "d.gguf"
    off = llama_server_args(LlamaServerSpec.off("off", model), port=1234, binary=exe)
    assert off[:3] == [str(exe), "--model", str(model)]
    assert off[off.index("--host") + 1] == "127.0.0.1"
    assert off[off.index("--port") + 1] == "1234"
    assert off[off.index("--parallel") + 1] == "1"
    assert "--spec-type" not in off and "--metrics" in off

    d = llama_server_args(
        LlamaServerSpec.draft("d", model, draft, draft_n_max=4), port=1, binary=exe
    )
    assert d[d.index("--spec-type") + 1] == "draft-simple"
    assert d[d.index("--spec-draft-model") + 1] == str(draft)
    assert d[d.index("--spec-draft-n-max") + 1] == "4"

    n = llama_server_args(LlamaServerSpec.ngram("n", model, "ngram-mod"), port=1, binary=exe)
    assert n[n.index("--spec-type") + 1] == "ngram-mod"

    spec = LlamaServerSpec.mistuned("m", model, draft, synth_len=3.5)
    m = llama_server_args(spec, port=1, binary=exe)
    assert m[m.index("--spec-synth-len") + 1] == "3.5" and spec.synthetic
    r = llama_server_args(
        LlamaServerSpec(
            name="r", model=model, spec_type="draft-simple", draft_model=draft,
            synth_rates=(0.9, 0.5),
        ),
        port=1,
        binary=exe,
    )  # fmt: skip
    assert r[r.index("--spec-synth-rates") + 1] == "0.9,0.5"


def test_find_llama_server_env(monkeypatch: pytest.MonkeyPatch, fake_binary: Path) -> None:
    monkeypatch.setenv("LLAMA_SERVER", str(fake_binary))
    assert find_llama_server() == fake_binary
    monkeypatch.setenv("LLAMA_SERVER", str(fake_binary.parent / "missing"))
    with pytest.raises(LlamaServerError, match="not an executable"):
        find_llama_server()


@pytest.mark.anyio
async def test_start_health_and_stop(fake_binary: Path, model: Path, tmp_path: Path) -> None:
    specs = [LlamaServerSpec.off("a", model), LlamaServerSpec.ngram("b", model)]
    async with llama_servers(specs, binary=fake_binary, log_dir=tmp_path / "logs") as running:
        assert set(running) == {"a", "b"}
        pids = [s.pid for s in running.values()]
        assert running["a"].port != running["b"].port
        async with httpx.AsyncClient(trust_env=False) as client:
            for s in running.values():
                r = await client.get(f"{s.origin}/health")
                assert r.json() == {"status": "ok"}
                assert s.base_url == f"http://127.0.0.1:{s.port}/v1"
        assert all(_procs.running(p) for p in pids)
    assert not any(_procs.running(p) for p in pids)
    assert "--spec-type ngram-simple" in (tmp_path / "logs" / "b.log").read_text()


@pytest.mark.anyio
async def test_single_server_yields_base_url(fake_binary: Path, model: Path) -> None:
    async with llama_server(LlamaServerSpec.off("x", model), binary=fake_binary) as url:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")


@pytest.mark.anyio
async def test_crash_is_typed_error_with_log_tail(
    fake_binary: Path, model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(LlamaServerError) as exc:
        async with llama_servers(
            [LlamaServerSpec.off("c", model)],
            binary=fake_binary,
            log_dir=tmp_path,
            env={"FAKE_MODE": "crash"},
        ):
            raise AssertionError("unreachable")
    assert isinstance(exc.value, DeepseekBenchError)
    assert "exited with code 3" in str(exc.value)
    assert "failed to load model" in str(exc.value)
    assert exc.value.log_path == tmp_path / "c.log"


@pytest.mark.anyio
async def test_startup_deadline(fake_binary: Path, model: Path, tmp_path: Path) -> None:
    with pytest.raises(LlamaServerError, match="not healthy after"):
        async with llama_servers(
            [LlamaServerSpec.off("slow", model)],
            binary=fake_binary,
            log_dir=tmp_path,
            startup_timeout_s=1.0,
            env={"FAKE_MODE": "never-ready"},
        ):
            raise AssertionError("unreachable")


@pytest.mark.anyio
async def test_stubborn_process_is_killed_on_exception(
    fake_binary: Path, model: Path, tmp_path: Path
) -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError):
        async with llama_servers(
            [LlamaServerSpec.off("s", model)],
            binary=fake_binary,
            log_dir=tmp_path,
            stop_grace_s=0.5,
            env={"FAKE_MODE": "stubborn"},
        ) as running:
            pids.append(running["s"].pid)
            raise RuntimeError("test failure inside the block")
    assert pids and not _procs.running(pids[0])


@pytest.mark.anyio
async def test_cancellation_stops_servers(fake_binary: Path, model: Path) -> None:
    pids: list[int] = []
    with anyio.CancelScope() as scope:
        async with llama_servers([LlamaServerSpec.off("k", model)], binary=fake_binary) as r:
            pids.append(r["k"].pid)
            scope.cancel()
            await anyio.sleep(30)
    assert scope.cancelled_caught
    assert pids and not _procs.running(pids[0])


@pytest.mark.anyio
async def test_missing_model_and_duplicate_names(fake_binary: Path, model: Path) -> None:
    with pytest.raises(LlamaServerError, match="no such model"):
        async with llama_servers(
            [LlamaServerSpec.off("m", model.with_name("none.gguf"))], binary=fake_binary
        ):
            pass
    with pytest.raises(LlamaServerError, match="duplicate"):
        async with llama_servers(
            [LlamaServerSpec.off("m", model), LlamaServerSpec.off("m", model)],
            binary=fake_binary,
        ):
            pass
