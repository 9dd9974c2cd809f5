"""The suite-wide loopback guard (tests/conftest.py) refuses and reports off-loopback
connects, and lets loopback and Unix sockets through."""

from __future__ import annotations

import socket

import pytest

from tests import conftest


@pytest.mark.parametrize("host", ["192.0.2.1", "203.0.113.7", "2001:db8::1", "169.254.169.254"])
def test_an_off_loopback_connect_is_refused_and_recorded(host: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s, pytest.raises(PermissionError):
        s.connect((host, 9))
    with socket.socket(family, socket.SOCK_DGRAM) as u, pytest.raises(PermissionError):
        u.sendto(b"x", (host, 9))
    assert conftest.refused == [host, host]
    conftest.refused.clear()  # seen on purpose: the autouse check must not fail


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "localhost"])
def test_loopback_passes(host: str) -> None:
    assert conftest._off_loopback((host, 9)) is None
    assert conftest._off_loopback(("::ffff:127.0.0.1", 9, 0, 0)) is None
    assert conftest._off_loopback("/tmp/some.sock") is None


def test_a_loopback_connect_really_goes_through() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    assert conftest.refused == []
