"""What a launched engine exposes: the address it listens on, and the secrets it is given.

A plan with ``[routes.launch]`` runs programs, so it is trusted like a script; these
rules keep what it runs from reaching beyond this machine, or its secrets from
reaching the results, unless the user says so.

* **Bind address.** Every engine launcher passes ``--host 127.0.0.1`` itself (vLLM's
  ``--host`` defaults to every interface, SGLang's and llama-server's to 127.0.0.1),
  but ``engine_args``, ``extra_args``, a raw ``command`` or an environment variable
  (llama-server ``LLAMA_ARG_HOST``; vLLM ``VLLM_HOST_IP``, the address its own
  processes talk on) can give another. :func:`bind_hosts` finds each such address in
  an argv and an environment; :func:`check_bind` refuses a non-loopback one
  (:class:`~deepseekbench.LiveGateError`, before anything is started) unless the
  gate is open for spending: an API key **and** ``spend=True``, the gate's own rule
  for a non-loopback host.
* **Secrets.** :func:`looks_secret` says whether an environment variable or a flag
  (``HF_TOKEN``, ``--api-key``) or its value (``hf_…``, ``sk-…``) looks like a
  credential; a plan refuses such a literal (it would be written to the results
  file's ``run_start`` record) and takes the variable's *name* instead
  (``launch.env_from``), as a route's ``api_key_env``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence

from deepseekbench._errors import LiveGateError
from deepseekbench._net._gate import ENV_API_KEY, LiveGate, is_loopback_host

__all__ = ["BIND_ENV", "BIND_FLAGS", "bind_hosts", "check_bind", "looks_secret", "secret_flags"]

BIND_FLAGS = frozenset(
    {"host", "bind", "bind-host", "bind-address", "listen", "listen-host", "listen-address",
     "address", "addr", "http-host"}
)  # fmt: skip
"""Flag names (``--host``, ``--bind=…``; ``_`` read as ``-``) that set a listen address."""

BIND_ENV = frozenset({"LLAMA_ARG_HOST", "VLLM_HOST_IP"})
"""Environment variables that set an engine's listen address (llama-server's
``--host``; the address vLLM's engine processes bind and talk on)."""

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


def _flag_values(argv: Sequence[str], match: frozenset[str] | None) -> list[tuple[str, str]]:
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
    return [f"--{name}" for name, value in _flag_values(argv, None) if looks_secret(name, value)]


def _host_of(address: str) -> str:
    """The host of a listen address: ``0.0.0.0:8000`` → ``0.0.0.0``, ``[::1]:80`` → ``::1``,
    ``::`` → ``::`` (an IPv6 address with a port needs its brackets); else as given."""
    text = address.strip()
    if text.startswith("[") and "]" in text:
        return text[1 : text.index("]")]
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    host, _, _port = text.partition(":")  # one colon: host:port (the port may be "{port}")
    return host if text.count(":") == 1 and host else text


def bind_hosts(argv: Sequence[str], env: Mapping[str, str]) -> list[tuple[str, str]]:
    """Every listen address ``argv`` and ``env`` give: ``(where, host)`` pairs such as
    ``("--host", "0.0.0.0")`` or ``("LLAMA_ARG_HOST", "::")``, in order."""
    found = [(f"--{name}", _host_of(value)) for name, value in _flag_values(argv, BIND_FLAGS)]
    found += [(name, _host_of(env[name])) for name in sorted(BIND_ENV & set(env))]
    return found


def check_bind(route: str, argv: Sequence[str], env: Mapping[str, str], gate: LiveGate) -> None:
    """Refuse a launch that would listen beyond loopback unless ``gate`` is open for
    spending (an API key and ``spend=True``: the rule for any non-loopback host).

    ``argv``: the launch's full command line; ``env``: the variables the launch sets
    (the plan's ``env``/``env_from``, not this process's).

    Raises:
        LiveGateError: a listen address (``--host``, ``--bind``, ``LLAMA_ARG_HOST`` …)
            that is not loopback (``127.0.0.0/8``, ``::1``, ``localhost``), with the
            gate closed; nothing has been started.
    """
    exposed = [(where, host) for where, host in bind_hosts(argv, env) if not is_loopback_host(host)]
    if not exposed or (gate.api_key is not None and gate.spend):
        return
    missing = []
    if gate.api_key is None:
        missing.append(f"an API key ({ENV_API_KEY})")
    if not gate.spend:
        missing.append("spend=True (--spend or DEEPSEEKBENCH_SPEND=1)")
    where, host = exposed[0]
    raise LiveGateError(
        f"route {route!r}: launch would listen on {host!r} ({where}), beyond loopback: "
        f"missing {', '.join(missing)}; a launched engine listens on 127.0.0.1 unless "
        "the gate is open for spending",
        host=host,
        missing=tuple(missing),
    )
