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
* **Secrets.** :func:`~deepseekbench._plan._launch_spec.looks_secret` (a plan rule)
  says whether an environment variable or a flag (``HF_TOKEN``, ``--api-key``) or its
  value (``hf_…``, ``sk-…``) looks like a credential; a plan refuses such a literal
  (it would be written to the results file's ``run_start`` record) and takes the
  variable's *name* instead (``launch.env_from``), as a route's ``api_key_env``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence

from deepseekbench._errors import LiveGateError
from deepseekbench._net._gate import ENV_API_KEY, LiveGate, is_loopback_host
from deepseekbench._plan._launch_spec import flag_values

__all__ = ["BIND_ENV", "BIND_FLAGS", "bind_hosts", "check_bind"]

BIND_FLAGS = frozenset(
    {"host", "bind", "bind-host", "bind-address", "listen", "listen-host", "listen-address",
     "address", "addr", "http-host"}
)  # fmt: skip
"""Flag names (``--host``, ``--bind=…``; ``_`` read as ``-``) that set a listen address."""

BIND_ENV = frozenset({"LLAMA_ARG_HOST", "VLLM_HOST_IP"})
"""Environment variables that set an engine's listen address (llama-server's
``--host``; the address vLLM's engine processes bind and talk on)."""


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
    found = [(f"--{name}", _host_of(value)) for name, value in flag_values(argv, BIND_FLAGS)]
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
