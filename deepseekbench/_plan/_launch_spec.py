"""The plan's ``[routes.launch]`` table: what a route's launch says, and the checks on it.

Holds :class:`LaunchSpec` (the engine, model, speculative configuration, args and
environment of a route's launch), :func:`check_launch` (a launch against the route's
method), the engine names (:data:`ENGINES`, with the input alias ``llama.cpp`` for
``llamacpp``), the secret rules a plan is held to (:func:`looks_secret`,
:func:`secret_flags`: a plan and its command lines are recorded in the results) and
the argv flag reading they share with the bind-address check
(:func:`flag_values`, :func:`engine_flags`). Pure data and validation: the launchers
(:mod:`deepseekbench._launch`) import it, never the reverse.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

__all__ = [
    "ENGINES",
    "ENGINE_ALIASES",
    "RECORDED_PLAN",
    "Engine",
    "LaunchSpec",
    "check_launch",
    "engine_flags",
    "flag_values",
    "looks_secret",
    "secret_flags",
]

Engine = Literal["embedded", "llamacpp", "vllm", "sglang"]
"""The engines a plan launches, by the name of the dialect each speaks (the embedded
engine speaks any)."""
ENGINES: tuple[str, ...] = get_args(Engine)
ENGINE_ALIASES: dict[str, str] = {"llama.cpp": "llamacpp"}
"""Other spellings a plan may use for an engine (plans written before the engine
names were the dialects'): the spelling is kept for the plan's hash and record."""

RECORDED_PLAN = "recorded_plan"
"""Validation context key: the plan is read back from a results file (the analysis
reads it, nothing launches it), so a secret an older file holds does not make the
file unreadable."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SECRET_WORDS = frozenset(
    {"TOKEN", "KEY", "APIKEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS",
     "AUTH", "AUTHORIZATION"}
)  # fmt: skip
_SECRET_VALUE = re.compile(
    r"^(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16})$"
)
"""Well-known token shapes: Hugging Face, OpenAI-style, GitHub, GitLab, Slack, AWS."""
_PLAIN = re.compile(r"^([-+]?\d+(\.\d*)?([eE][-+]?\d+)?|true|false|True|False)$")
"""A number or a boolean: never a credential, whatever the name (``--ms-per-token 2.7``)."""


def looks_secret(name: str, value: str | None = None) -> bool:
    """True when ``value`` has a well-known token shape (``hf_…``, ``sk-…``, ``ghp_…``,
    ``AKIA…``), or variable or flag ``name`` names a credential (its last ``_``/``-``-
    separated word is ``TOKEN``, ``KEY``, ``SECRET``, ``PASSWORD``, ``AUTH`` …:
    ``HF_TOKEN``, ``--api-key``; not ``TOKENIZERS_PARALLELISM`` or ``--verify-token-ms``)
    and ``value`` is not blank, a number or a boolean (``--compute-ms-per-token 2.7``)."""
    if value is not None and _SECRET_VALUE.match(value.strip()) is not None:
        return True
    words = re.split(r"[_\-.]+", name.strip("-").upper())
    plain = value is not None and (not value.strip() or _PLAIN.match(value.strip()) is not None)
    return words[-1] in _SECRET_WORDS and not plain


def _flag(arg: str) -> tuple[str, str | None] | None:
    """``--bind-address=x`` → ``("bind-address", "x")``; ``--host`` → ``("host", None)``;
    ``None`` for an argument that is not a long flag."""
    if not arg.startswith("--") or len(arg) < 3:
        return None
    name, eq, value = arg[2:].partition("=")
    return name.lower().replace("_", "-"), (value if eq else None)


def flag_values(argv: Sequence[str], match: frozenset[str] | None) -> list[tuple[str, str]]:
    """``(flag, value)`` for each long flag of ``argv`` (those in ``match`` only, when
    given) that carries a value (``--f=v`` or ``--f v``)."""
    out: list[tuple[str, str]] = []
    for i, arg in enumerate(argv):
        parsed = _flag(arg)
        if parsed is None or (match is not None and parsed[0] not in match):
            continue
        name, value = parsed
        if value is None and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            value = argv[i + 1]
        if value is not None:
            out.append((name, value))
    return out


def secret_flags(argv: Sequence[str]) -> list[str]:
    """The long flags of ``argv`` whose name or value looks like a credential
    (:func:`looks_secret`), by name (``--api-key``); never their values."""
    return [f"--{name}" for name, value in flag_values(argv, None) if looks_secret(name, value)]


class LaunchSpec(BaseModel):
    """``[routes.launch]``: how to start the route's server.

    Attributes:
        engine: ``embedded``, ``llamacpp`` (also spelt ``llama.cpp``), ``vllm`` or
            ``sglang`` (or none, with ``command``): the name of the dialect the
            engine speaks. An alias is read as its engine's name and written back
            as the plan spelt it, so the plan's hash does not change.
        model: the engine's model: a GGUF file (llama.cpp), a checkpoint folder or
            Hub id (vLLM, SGLang); unused by the embedded engine.
        method: the engine's own name for the speculative method (default from the
            route's ``speculative``: vLLM ``mtp``/``eagle3``/``draft_model``/``ngram``,
            SGLang ``EAGLE``/``EAGLE3``/``STANDALONE``/``NGRAM``, llama.cpp
            ``draft-mtp``/``draft-dspark``/``draft-simple``/``ngram-simple``/
            ``draft-eagle3``); a list is a grid.
        spec_tokens: the depth, draft tokens per verify step; a list is a grid
            (one route per value, ``docs/plan.md``).
        draft_model: the draft model's path or id; a list is a grid.
        engine_args: engine-specific keys: fields of the engine's launcher
            (llama.cpp ``ctx_size``/``threads``/``seed``; vLLM ``dtype``,
            ``max_model_len``, ``max_num_seqs``, ``speculative_config`` merged into
            ``--speculative-config``, ...), the rest passed as ``--key value`` flags.
        extra_args: appended verbatim to the command line.
        command: a raw argv instead of ``engine``; ``{port}`` and ``{model}`` in it
            are replaced by the chosen port and the route's model name.
        startup_timeout_s: seconds to wait until the server serves its model.
        env: extra environment variables for the server (recorded with the plan:
            no secrets).
        env_from: environment variables for the server taken from this process's
            environment: ``{server's name: this process's name}`` (only the names
            are recorded, as a route's ``api_key_env``; read when the run starts).

    A launch runs a program, so a plan with one is trusted like a script; the
    server listens on 127.0.0.1 unless the gate is open for spending
    (:func:`~deepseekbench._launch._exposure.check_bind`).

    Raises:
        pydantic.ValidationError: neither or both of ``engine`` and ``command``, an
            empty ``command``, a ``command`` given as one string (it must be a
            list of argv strings: no shell runs it), ``llamacpp``/``vllm``/
            ``sglang`` without ``model``, a depth below 1, an empty grid list, an
            ``env`` entry or a flag of ``engine_args``/``extra_args``/``command``
            that looks like a secret (:func:`~deepseekbench._plan._launch_spec.looks_secret`:
            name it in ``env_from`` instead), an ``env_from`` name that is not a
            variable name, or an unknown field. The refused value is never shown.
    """

    # hide_input_in_errors: a refused env value or flag may be a secret
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    engine: Engine | None = None
    model: str | None = Field(default=None, min_length=1)
    method: str | tuple[str, ...] | None = None
    spec_tokens: int | tuple[int, ...] | None = None
    draft_model: str | tuple[str, ...] | None = None
    engine_args: dict[str, Any] = Field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    command: tuple[str, ...] | None = None
    startup_timeout_s: float = Field(default=600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    env_from: dict[str, str] = Field(
        default_factory=dict,
        description="server variable -> name of this process's variable holding its value",
    )
    _spelling: str | None = PrivateAttr(default=None)  # the plan's alias for ``engine``

    @model_validator(mode="wrap")
    @classmethod
    def _engine_alias(cls, data: Any, handler: Any) -> Any:
        spelling = data.get("engine") if isinstance(data, dict) else None
        if isinstance(spelling, str) and spelling in ENGINE_ALIASES:
            data = {**data, "engine": ENGINE_ALIASES[spelling]}
            spec = handler(data)
            spec._spelling = spelling
            return spec
        return handler(data)

    @model_serializer(mode="wrap")
    def _without_empty_env_from(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and not data.get("env_from"):
            data.pop("env_from", None)  # launch plans written before it keep their hash
        if isinstance(data, dict) and self._spelling is not None:
            data["engine"] = self._spelling  # as the plan spelt it: its hash stays
        return data

    @field_validator("command", mode="before")
    @classmethod
    def _argv_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError(
                "launch.command must be a list of argv strings, e.g. command = "
                '["python", "-m", "server", "--port", "{port}"]: no shell runs it, so a '
                "string is not split"
            )
        return value

    @field_validator("env", "env_from")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        if any(not _ENV_NAME.fullmatch(name) for name in value):
            raise ValueError("an environment variable name must match [A-Za-z_][A-Za-z0-9_]*")
        return value

    @model_validator(mode="after")
    def _no_secrets(self, info: ValidationInfo) -> LaunchSpec:
        if isinstance(info.context, dict) and info.context.get(RECORDED_PLAN):
            return self  # a results file written before the rule: read, never launched
        for name, value in self.env.items():
            if looks_secret(name, value):
                raise ValueError(
                    f"launch.env.{name} looks like a secret, and a plan is recorded in its "
                    f"results: keep it in this process's environment and name it instead, "
                    f'env_from = {{{name} = "{name}"}}'
                )
        for name, source in self.env_from.items():
            if not _ENV_NAME.fullmatch(source):
                raise ValueError(f"launch.env_from.{name}: not a variable name (not shown)")
        args = [*(self.command or ()), *self.extra_args, *engine_flags(self.engine_args)]
        flags = secret_flags(args)
        if flags:
            raise ValueError(
                f"launch: {', '.join(dict.fromkeys(flags))} looks like a secret, and a plan "
                "and its command lines are recorded in the results: pass it through the "
                "environment (env_from; vLLM reads VLLM_API_KEY, llama-server LLAMA_API_KEY)"
            )
        return self

    @model_validator(mode="after")
    def _consistent(self) -> LaunchSpec:
        if (self.engine is None) == (self.command is None):
            raise ValueError("launch needs exactly one of engine and command")
        if self.command is not None and not self.command:
            raise ValueError("launch.command must not be empty")
        if self.engine in ("llamacpp", "vllm", "sglang") and self.model is None:
            raise ValueError(f"launch.engine={self.engine!r} needs launch.model")
        for name in ("method", "spec_tokens", "draft_model"):
            value = getattr(self, name)
            if isinstance(value, tuple) and not value:
                raise ValueError(f"launch.{name}: an empty list")
        depths = self.spec_tokens if isinstance(self.spec_tokens, tuple) else (self.spec_tokens,)
        if any(d is not None and d < 1 for d in depths):
            raise ValueError("launch.spec_tokens must be >= 1 draft tokens per verify step")
        return self

    @property
    def is_grid(self) -> bool:
        """True when ``method``, ``spec_tokens`` or ``draft_model`` is a list."""
        return any(isinstance(v, tuple) for v in (self.method, self.spec_tokens, self.draft_model))

    def grid(self) -> list[tuple[str, LaunchSpec]]:
        """One ``(label suffix, single-configuration spec)`` per grid point, in the
        order method × draft model × depth; suffixes ``-<method>``, ``-d<n>``
        (1-based draft model index), ``-k<depth>`` for the listed axes only.
        A spec with no list gives ``[("", self)]``."""

        def axis(value: Any, tag: Any) -> list[tuple[str, Any]]:
            if isinstance(value, tuple):
                return [(tag(i, v), v) for i, v in enumerate(value)]
            return [("", value)]

        out: list[tuple[str, LaunchSpec]] = []
        for (m_tag, m), (d_tag, d), (k_tag, k) in itertools.product(
            axis(self.method, lambda i, v: f"-{v}"),
            axis(self.draft_model, lambda i, v: f"-d{i + 1}"),
            axis(self.spec_tokens, lambda i, v: f"-k{v}"),
        ):
            spec = self.model_copy(update={"method": m, "draft_model": d, "spec_tokens": k})
            out.append((m_tag + d_tag + k_tag, spec))
        return out

    @property
    def depth(self) -> int | None:
        """The single depth (``None`` when unset or a grid)."""
        return self.spec_tokens if isinstance(self.spec_tokens, int) else None


def check_launch(spec: LaunchSpec, speculative: str) -> None:
    """Refuse a launch the engine cannot serve for the route's method.

    Raises:
        ValueError: a depth or method on a speculation-off route.
    """
    if speculative == "off" and (spec.spec_tokens is not None or spec.method is not None):
        raise ValueError("launch: a speculative='off' route takes no spec_tokens or method")


def engine_flags(args: Mapping[str, Any]) -> list[str]:
    """``{"ctx_size": 512, "flash": True}`` → ``["--ctx-size", "512", "--flash"]``."""
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is not False and value is not None:
            out += [flag, value if isinstance(value, str) else orjson.dumps(value).decode()]
    return out
