"""The Ray cluster addresses the gate admits: a strict grammar, judged before Ray is imported.

Ray reads an address its own way, not as a URL: ``host:port`` is split at the
*last* colon (``ray._raylet.parse_address``, called by
``ray._private.services.canonicalize_bootstrap_address``), and ``scheme://rest``
imports the module the scheme names and hands it ``rest``
(``ray.client_builder._split_address``; ``ray://`` is the Ray client, whose
``rest`` is a gRPC target). A URL parser and Ray disagree on addresses such as
``127.0.0.1/@evil.example.com:6379`` (a URL's host ``127.0.0.1``; Ray's host
``127.0.0.1/@evil.example.com``, looked up in DNS). So the gate admits only the
forms on which both read the same host:

* ``host:port`` and ``ray://host:port``, where ``host`` is an IPv4 literal in
  dotted decimal, ``localhost``, or a bracketed IPv6 literal ``[v6]`` without a
  zone id, and ``port`` is 1..65535 in decimal digits;
* the settings ``"auto"`` (resolved first, as Ray resolves it; the resolved
  address must be of the form above) and ``"local"`` (a new local instance).

Every other address (a host name other than ``localhost``, ``/``, ``@``, ``%``,
whitespace, control characters, user-info, a path, another scheme) raises
:class:`~deepseekbench.RayAddressError`. A cluster is addressed by its head
node's IP.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from deepseekbench._errors import RayAddressError
from deepseekbench._types._secrets import printable

__all__ = ["RAY_ADDRESS_SETTINGS", "RayAddress", "check_ray_address_setting", "parse_ray_address"]

RAY_ADDRESS_SETTINGS = frozenset({"auto", "local"})
"""Addresses that are settings, not places: resolved (``auto``) or started (``local``)."""

# ASCII only: re's \d would take other scripts' digits, which Ray's int() accepts
_FORM = re.compile(
    r"(?P<client>ray://)?"
    r"(?:(?P<v4>[0-9]{1,3}(?:\.[0-9]{1,3}){3})|\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>localhost))"
    r":(?P<port>[0-9]{1,5})",
    re.ASCII,
)


@dataclass(frozen=True, slots=True)
class RayAddress:
    """A concrete Ray cluster address the gate admits.

    Attributes:
        host: the host as Ray reads it: an IPv4 literal, ``localhost``, or an IPv6
            literal without brackets (as ``ray._raylet.parse_address`` returns it).
        port: the port (1..65535).
        client: ``True`` for ``ray://`` (the Ray client), ``False`` for a GCS address.
    """

    host: str
    port: int
    client: bool


def parse_ray_address(address: str) -> RayAddress:
    """Read a concrete Ray cluster address by the grammar in the module docstring.

    Raises:
        RayAddressError: ``address`` is not ``host:port`` or ``ray://host:port``
            with an IP literal or ``localhost`` as host and a port in 1..65535
            (the message shows the address with control characters escaped).
    """
    m = _FORM.fullmatch(address)
    host = None
    if m is not None:
        host = m["v4"] or m["v6"] or m["name"]
        try:
            if m["v4"]:
                ipaddress.IPv4Address(host)
            elif m["v6"]:
                ipaddress.IPv6Address(host)  # a zone id ("%eth0") never gets this far
        except ValueError:
            host = None
    if m is None or host is None or not 1 <= int(m["port"]) <= 65535:
        raise RayAddressError(
            f"Ray cluster address {printable(address)!r} is not one the gate can judge: "
            "give host:port or ray://host:port, where host is an IPv4 literal, [IPv6] or "
            "localhost and port is 1..65535 (no names, paths, user-info, '%', "
            "whitespace or control characters), or 'auto' / 'local'"
        )
    return RayAddress(host=host, port=int(m["port"]), client=m["client"] is not None)


def check_ray_address_setting(address: str | None) -> str | None:
    """``address`` unchanged when it is ``None``, ``"auto"``, ``"local"`` or a concrete
    address :func:`parse_ray_address` admits (a plan's ``ray_address``, ``--ray-address``).

    Raises:
        RayAddressError: as :func:`parse_ray_address`.
    """
    if address is not None and address not in RAY_ADDRESS_SETTINGS:
        parse_ray_address(address)
    return address
