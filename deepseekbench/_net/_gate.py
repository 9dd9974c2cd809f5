"""``LiveGate``: the one door through which this library opens connections.

Every HTTP request the library makes goes through an ``httpx`` transport wrapped
by :meth:`LiveGate.wrap` (or a client made by :meth:`LiveGate.client`). The gate
looks at each request *before* the inner transport is called, so no socket is
opened for a refused request, and retries and redirects (which httpx sends
through the same transport) pass the gate too.

Rules:

* Loopback hosts (``127.0.0.0/8``, ``::1``, ``localhost``) are allowed by default.
* Any other host needs an API key (the gate's own, or an ``Authorization``
  header already on the request) **and** ``spend=True``.
* Optional budgets: ``max_requests`` (requests admitted, every host counted)
  and ``max_output_tokens`` (tokens charged with :meth:`charge_output_tokens`);
  once spent, every further request is refused.

A transport that connects somewhere other than the request's host (a
``proxy`` on an ``httpx.AsyncHTTPTransport``, on this library's aiohttp transport
or its session, environment proxies of an aiohttp session with ``trust_env``, or
any of these inside a wrapper transport: :func:`proxy_hosts` walks them) has each
proxy host checked by the same rules before each request. :meth:`LiveGate.check_client` checks that
*every* transport a client may use (its default and each ``mounts`` entry,
environment proxies included) is gated by the gate; every library entry point
that does I/O with a caller's client calls it first.

A refusal raises :class:`~deepseekbench.LiveGateError` naming the host and what
is missing. The key is held as a :class:`pydantic.SecretStr` and appears in no
repr, log or exception.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import httpx
from pydantic import SecretStr

from deepseekbench._errors import LiveGateError
from deepseekbench._net._transport import BenchTransport
from deepseekbench._types._secrets import checked_key

ENV_API_KEY = "DEEPSEEKBENCH_API_KEY"
"""Environment variable :meth:`LiveGate.from_env` reads the API key from."""
ENV_SPEND = "DEEPSEEKBENCH_SPEND"
"""Environment variable; ``1`` (or ``true``/``yes``) opens the gate for spending."""

_TRUE = frozenset({"1", "true", "yes", "on"})

_BUDGETS = ("request budget", "output-token budget")
"""How a refusal's ``missing`` entries for a spent budget begin (:meth:`LiveGate.refusal`)."""


def is_budget_refusal(err: LiveGateError) -> bool:
    """Whether ``err`` refuses only because a budget (``max_requests``,
    ``max_output_tokens``) is spent: the request itself would pass the gate."""
    return bool(err.missing) and all(m.startswith(_BUDGETS) for m in err.missing)


def is_loopback_host(host: str) -> bool:
    """Return True for ``localhost``, ``127.0.0.0/8`` and ``::1`` (no DNS lookup).

    A name that merely resolves to loopback is *not* loopback: the gate never
    resolves names, so a DNS answer cannot open it.
    """
    return _is_loopback(host)


@functools.lru_cache(maxsize=1024)
def _is_loopback(host: str) -> bool:
    """:func:`is_loopback_host`, kept per host string: parsing an address costs ~20 us,
    paid twice per request otherwise (the gate's check, then its admission)."""
    # No trailing-dot stripping: "localhost." is a fully qualified name that a
    # resolver may send to DNS, so it is not treated as loopback.
    name = host.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped.is_loopback
    return addr.is_loopback


def proxy_host(transport: httpx.AsyncBaseTransport) -> str | None:
    """The first host a transport connects to instead of each request's own, or ``None``.

    See :func:`proxy_hosts` (every one of them).
    """
    hosts = proxy_hosts(transport)
    return hosts[0] if hosts else None


_WALK_DEPTH = 8  # wrappers inside wrappers: deeper than any real stack
_REWALK_NS = 1_000_000_000  # how often a gated transport walks its inner transport again


def proxy_hosts(transport: object, url: httpx.URL | None = None) -> list[str]:
    """Every proxy host ``transport`` (or a transport it wraps) would connect through.

    Walks the transport and everything it holds that is itself a transport (an
    attribute, or a list/tuple/dict of them, at any depth up to 8: wrappers,
    this library's :class:`~deepseekbench._net._transport.BenchTransport` and its
    aiohttp/httpcore shards), and reads a proxy from each:

    * ``httpx.AsyncHTTPTransport(proxy=...)``: its pool's proxy URL (HTTP, SOCKS);
    * ``httpx_aiohttp.AiohttpTransport(proxy=...)``: its ``proxy``;
    * an ``aiohttp.ClientSession``: its default ``proxy=``, and with
      ``trust_env=True`` the environment's proxies (``HTTP_PROXY``,
      ``HTTPS_PROXY``, ``ALL_PROXY`` …; for ``url``, skipped when ``NO_PROXY``
      covers its host).

    Returns hosts (no ports), in the order found; empty for a direct transport.
    """
    return _hosts_of(_proxy_nodes(transport), url)


def _proxy_nodes(transport: object, *, materialize: bool = False) -> list[object]:
    """The transports, pools and aiohttp sessions inside ``transport`` (itself first).

    ``materialize``: an ``httpx_aiohttp`` transport whose session is still a factory
    gets its session now (what its next request would do first), so the session's
    proxy settings can be read before that request is sent.
    """
    nodes: list[object] = []
    seen: set[int] = set()

    def walk(obj: object, depth: int) -> None:
        if depth > _WALK_DEPTH or id(obj) in seen:
            return
        seen.add(id(obj))
        nodes.append(obj)
        if materialize and type(obj).__module__.startswith("httpx_aiohttp"):
            client = getattr(obj, "client", None)
            get_client = getattr(obj, "get_client", None)
            if callable(client) and not _is_aiohttp_session(client) and callable(get_client):
                obj.client = get_client()  # type: ignore[attr-defined]
        try:
            attrs = list(vars(obj).values())
        except TypeError:  # __slots__ only
            attrs = [getattr(obj, n, None) for n in getattr(type(obj), "__slots__", ())]
        for value in attrs:
            for item in _items(value):
                if _holds_transport(item):
                    walk(item, depth + 1)

    walk(transport, 0)
    return nodes


def _hosts_of(nodes: list[object], url: httpx.URL | None) -> list[str]:
    """The proxy hosts the ``nodes`` of :func:`_proxy_nodes` connect through."""
    found: list[str] = []

    def add(value: object) -> None:
        host: object = None
        if isinstance(value, httpx.Proxy):
            host = value.url.host
        elif isinstance(value, httpx.URL):
            host = value.host
        elif isinstance(value, str) and value:
            try:
                host = httpx.URL(value).host or value
            except (httpx.InvalidURL, UnicodeError):  # judged as written: not loopback
                host = value
        elif value is not None:
            host = getattr(value, "host", None)  # yarl.URL, httpcore.URL
        if isinstance(host, bytes):
            host = host.decode("ascii", errors="replace")
        if isinstance(host, str) and host and host not in found:
            found.append(host)

    for obj in nodes:
        pool = getattr(obj, "_pool", None)
        if pool is not None:
            add(getattr(pool, "_proxy_url", None))
        if isinstance(obj, httpx.AsyncBaseTransport | httpx.BaseTransport):
            add(getattr(obj, "proxy", None))
        if _is_aiohttp_session(obj):
            add(getattr(obj, "_default_proxy", None))
            if getattr(obj, "_trust_env", False):
                import urllib.request

                if url is None or not url.host or not urllib.request.proxy_bypass(url.host):
                    for scheme, value in urllib.request.getproxies_environment().items():
                        if scheme != "no":
                            add(value)
    return found


def _has_authorization(headers: httpx.Headers) -> bool:
    """``"authorization" in headers``, without httpx's scan of every header for their
    encoding (the name encodes alike in each encoding httpx picks itself); headers set
    to another encoding take ``in``."""
    if headers._encoding in (None, "ascii", "utf-8", "iso-8859-1"):
        return any(key == b"authorization" for _, key, _ in headers._list)
    return "authorization" in headers


def _items(value: object) -> list[object]:
    if isinstance(value, list | tuple | set | frozenset):
        return list(value)
    if isinstance(value, dict):
        return list(value.values())
    return [value]


def _is_aiohttp_session(obj: object) -> bool:
    cls = type(obj)
    return cls.__name__ == "ClientSession" and cls.__module__.startswith("aiohttp")


def _holds_transport(obj: object) -> bool:
    """A transport, an aiohttp session, or a holder of one (a pool shard)."""
    if isinstance(obj, httpx.AsyncBaseTransport | httpx.BaseTransport) or _is_aiohttp_session(obj):
        return True
    inner = getattr(obj, "transport", None)
    return isinstance(inner, httpx.AsyncBaseTransport | httpx.BaseTransport)


class LiveGate:
    """Checks every request before a connection is opened.

    Args:
        api_key: key for non-loopback hosts (``str`` or ``SecretStr``); sent as
            ``Authorization: Bearer`` to a non-loopback host when the request
            carries none. Never shown in ``repr``. An empty or whitespace-only
            key is no key; surrounding whitespace is dropped.
        spend: must be True for any non-loopback request (CLIs map ``--spend``).
        max_requests: refuse after this many admitted requests (``None`` = no limit).
        max_output_tokens: refuse once this many output tokens were charged
            (``None`` = no limit).

    Raises:
        ValueError: a budget is negative.
        KeyFormatError: the key has a character an HTTP header cannot carry
            (CR/LF or another control character, inner whitespace, non-ASCII).
    """

    def __init__(
        self,
        *,
        api_key: SecretStr | str | None = None,
        spend: bool = False,
        max_requests: int | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        if max_requests is not None and max_requests < 0:
            raise ValueError("max_requests must be >= 0")
        if max_output_tokens is not None and max_output_tokens < 0:
            raise ValueError("max_output_tokens must be >= 0")
        # a blank key ("", "  ") is no key: it must not open the gate
        self._api_key: SecretStr | None = checked_key(api_key, "LiveGate api_key")
        self._spend = bool(spend)
        self._max_requests = max_requests
        self._max_output_tokens = max_output_tokens
        self._requests = 0
        self._output_tokens = 0
        self._lock = threading.Lock()

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        spend: bool | None = None,
        max_requests: int | None = None,
        max_output_tokens: int | None = None,
    ) -> LiveGate:
        """Build a gate from ``DEEPSEEKBENCH_API_KEY`` and ``DEEPSEEKBENCH_SPEND=1``.

        ``spend``, when given (a CLI's ``--spend``), overrides the variable.

        Raises:
            ValueError: ``max_requests`` or ``max_output_tokens`` is negative.
            KeyFormatError: ``DEEPSEEKBENCH_API_KEY`` has a character an HTTP
                header cannot carry (the message names the variable, not the key).
        """
        env = os.environ if environ is None else environ
        key = checked_key(env.get(ENV_API_KEY), ENV_API_KEY)
        env_spend = env.get(ENV_SPEND, "").strip().lower() in _TRUE
        return cls(
            api_key=key,
            spend=env_spend if spend is None else spend,
            max_requests=max_requests,
            max_output_tokens=max_output_tokens,
        )

    # -- state ---------------------------------------------------------------
    @property
    def api_key(self) -> SecretStr | None:
        """The gate's key, as a ``SecretStr`` (``None`` when unset)."""
        return self._api_key

    @property
    def spend(self) -> bool:
        """Whether non-loopback requests may be sent at all."""
        return self._spend

    @property
    def max_requests(self) -> int | None:
        """The request budget (requests; ``None`` = no limit)."""
        return self._max_requests

    @property
    def max_output_tokens(self) -> int | None:
        """The output-token budget (tokens; ``None`` = no limit)."""
        return self._max_output_tokens

    @property
    def requests_admitted(self) -> int:
        """Requests this gate has let through (every host counted)."""
        return self._requests

    @property
    def output_tokens_charged(self) -> int:
        """Output tokens charged with :meth:`charge_output_tokens`, in tokens."""
        return self._output_tokens

    def __repr__(self) -> str:
        return (
            f"LiveGate(spend={self._spend}, api_key={'set' if self._api_key else 'unset'}, "
            f"max_requests={self._max_requests}, max_output_tokens={self._max_output_tokens}, "
            f"requests_admitted={self._requests}, output_tokens_charged={self._output_tokens})"
        )

    # -- checks --------------------------------------------------------------
    def refusal(
        self, url: httpx.URL | str, *, has_auth_header: bool = False
    ) -> LiveGateError | None:
        """Return the error a request to ``url`` would raise now, or ``None`` if admitted.

        Consumes nothing; a dry run uses it to say what would be refused. A host
        that is not valid IDNA (``http://xn--/v1``) is always refused.

        Raises:
            httpx.InvalidURL: ``url`` is a string httpx cannot parse as a URL.
        """
        u = httpx.URL(url) if isinstance(url, str) else url
        missing: list[str] = []
        try:
            host = u.host or ""
        except UnicodeError:  # an A-label that is not valid IDNA ("xn--"): httpx cannot decode it
            host = u.raw_host.decode("ascii", errors="replace")
            missing.append("a host name that is valid IDNA")
        if u.scheme not in ("http", "https"):
            missing.append(f"a supported scheme (got {u.scheme!r})")
        if not is_loopback_host(host):
            if self._api_key is None and not has_auth_header:
                missing.append(f"an API key ({ENV_API_KEY}, or the route's api_key_env)")
            if not self._spend:
                missing.append("spend=True (--spend or DEEPSEEKBENCH_SPEND=1)")
        if self._max_requests is not None and self._requests >= self._max_requests:
            missing.append(f"{_BUDGETS[0]} (max_requests={self._max_requests} spent)")
        if self._max_output_tokens is not None and self._output_tokens >= self._max_output_tokens:
            missing.append(f"{_BUDGETS[1]} (max_output_tokens={self._max_output_tokens} spent)")
        if not missing:
            return None
        return LiveGateError(
            f"LiveGate refused a request to host {host!r}: missing {', '.join(missing)}",
            host=host,
            missing=tuple(missing),
        )

    def check_url(self, url: httpx.URL | str) -> None:
        """Raise :class:`LiveGateError` if a request to ``url`` would be refused now.

        Consumes nothing (no budget is charged; see :meth:`refusal`).

        Raises:
            LiveGateError: a non-loopback host without an API key or without
                ``spend=True``, a scheme other than http(s), or a spent budget.
            httpx.InvalidURL: ``url`` is a string httpx cannot parse as a URL.
        """
        err = self.refusal(url)
        if err is not None:
            raise err

    def check_client(self, client: httpx.AsyncClient) -> None:
        """Raise unless every transport ``client`` may send through is gated by this gate.

        Checks the client's default transport and every ``mounts`` entry
        (environment proxies from ``trust_env`` are mounts too), so neither a
        redirect nor a URL pattern can reach an ungated transport.

        Raises:
            LiveGateError: a transport is not a :class:`GatedTransport`, or is
                gated by another :class:`LiveGate`.
        """
        mounts = [t for t in client._mounts.values() if t is not None]
        for transport in (client._transport, *mounts):
            if not isinstance(transport, GatedTransport):
                raise LiveGateError(
                    "the client has a transport the gate does not wrap (its default "
                    "transport or a mounts= entry, e.g. an environment proxy): use "
                    "gate.client() or a transport wrapped by gate.wrap()",
                    host="",
                    missing=("a gated client",),
                )
            if transport.gate is not self:
                raise LiveGateError(
                    "the client is gated by a different LiveGate than the one passed",
                    host="",
                    missing=("a client gated by this gate",),
                )

    def admit(self, request: httpx.Request) -> None:
        """Admit ``request`` (counting it against ``max_requests``) or raise.

        Adds the gate's key as a Bearer header for an admitted non-loopback
        request that carries no ``Authorization`` header.

        Raises:
            LiveGateError: the request is refused; nothing was sent.
        """
        has_auth = _has_authorization(request.headers)
        with self._lock:
            err = self.refusal(request.url, has_auth_header=has_auth)
            if err is not None:
                raise err
            self._requests += 1
        if not has_auth and self._api_key is not None and not is_loopback_host(request.url.host):
            request.headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"

    def charge_output_tokens(self, n_tokens: int) -> None:
        """Charge ``n_tokens`` generated output tokens against ``max_output_tokens``.

        Raises:
            ValueError: ``n_tokens`` is negative.
        """
        if n_tokens < 0:
            raise ValueError("n_tokens must be >= 0")
        with self._lock:
            self._output_tokens += n_tokens

    # -- seams ---------------------------------------------------------------
    def wrap(self, transport: httpx.AsyncBaseTransport) -> GatedTransport:
        """Wrap an async transport so each request passes :meth:`admit` first."""
        return GatedTransport(self, transport)

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        """Return an ``httpx.AsyncClient`` whose every request passes this gate.

        Accepts ``httpx.AsyncClient`` keyword arguments; a given ``transport`` is
        wrapped. ``trust_env`` is off (no environment proxies or netrc). Without
        a ``transport`` the client sends through aiohttp on asyncio and httpcore
        on trio (``deepseekbench._net._transport``), with a pool following ``limits``
        (default: no connection limit, so nothing waits for a connection).

        Raises:
            TypeError: ``mounts`` or ``proxy`` is given (they would bypass the gate),
                or both ``transport`` and ``limits`` (a given transport's pool is
                its own: the limits could not be honoured).
            ValueError: ``limits`` would close reusable connections
                (``max_keepalive_connections`` below ``max_connections``).
        """
        for banned in ("mounts", "proxy", "proxies"):
            if banned in kwargs:
                raise TypeError(
                    f"LiveGate.client() does not accept {banned!r}: it would bypass the gate"
                )
        inner = kwargs.pop("transport", None)
        limits = kwargs.pop("limits", None)
        if inner is not None and limits is not None:
            raise TypeError(
                "LiveGate.client() got both 'transport' and 'limits': the transport's own "
                "pool decides; set the limits on the transport instead"
            )
        if inner is None:
            inner = BenchTransport(limits)
        kwargs.setdefault("trust_env", False)
        return httpx.AsyncClient(transport=self.wrap(inner), **kwargs)


class GatedTransport(httpx.AsyncBaseTransport):
    """An ``httpx`` async transport that asks a :class:`LiveGate` before every request."""

    def __init__(self, gate: LiveGate, inner: httpx.AsyncBaseTransport) -> None:
        self.gate = gate
        self.inner = inner
        self._nodes: list[object] | None = None
        self._walked_ns = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Admit ``request`` through :meth:`LiveGate.admit`, then send it on ``inner``.

        The gate's check runs before the inner transport sees the request, so a
        refused request opens no socket. An admitted non-loopback request without
        an ``Authorization`` header gets the gate's key as a Bearer header. When
        ``inner``, or any transport it wraps, connects through a proxy (its own
        ``proxy=``, an aiohttp session's, or the environment's under
        ``trust_env``: :func:`proxy_hosts`), each proxy host is checked first by
        the same rules (a non-loopback proxy needs a key and ``spend=True``).

        Raises:
            LiveGateError: the gate refuses the request or the proxy; nothing was sent.
            httpx.TransportError: raised by the inner transport (connect, read,
                timeouts).
        """
        # what the inner transport holds is walked on the first request and again
        # each second (a walk costs ~0.1 ms); the proxies are read on every request
        now = time.monotonic_ns()
        if self._nodes is None or now - self._walked_ns > _REWALK_NS:
            self._nodes = _proxy_nodes(self.inner, materialize=True)
            self._walked_ns = now
        for host in _hosts_of(self._nodes, request.url):
            err = self.gate.refusal(
                httpx.URL(scheme="http", host=host, path="/"),
                has_auth_header="authorization" in request.headers,
            )
            if err is not None:
                raise LiveGateError(
                    f"{err} (the proxy the transport connects through)",
                    host=err.host,
                    missing=err.missing,
                )
        self.gate.admit(request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Close the inner transport and its pooled connections; the gate is unchanged."""
        await self.inner.aclose()
