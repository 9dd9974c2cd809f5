"""A Ray cluster address is judged as Ray reads it: the gate admits only a strict grammar
(``host:port`` or ``ray://host:port``, host an IP literal or ``localhost``) on which the
gate's host and Ray's own parser agree, and refuses anything else with a typed error
before Ray is imported — through the plan key, ``--ray-address`` and ``RAY_ADDRESS``
with ``"auto"``.

The differential test (marker ``ray``: it needs the ``ray`` package, but starts
nothing) compares the gate's host with the host Ray's own parsers extract.
"""

from __future__ import annotations

import importlib
import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from deepseekbench import BenchmarkPlan, LiveGate, PlanError, RayAddressError, is_loopback_host
from deepseekbench._cli._exits import EXIT_USAGE
from deepseekbench._cli._main import main
from deepseekbench._execute._ray_executor import (
    ray_address_host,
    ray_address_refusal,
    resolve_ray_address,
)
from deepseekbench._plan._ray_address import parse_ray_address
from tests._helpers import ray_plan_file

TRICKY = (
    "127.0.0.1/@evil.example.com:6379",
    "127.0.0.1@evil.example.com:6379",
    "ray://127.0.0.1/@evil.example.com:10001",
    "ray://user:pw@127.0.0.1:10001",
    "127.0.0.1:6379/path",
    "127.0.0.1:6379?x=1",
    "127.0.0.1:6379#frag",
    "[::1%eth0]:6379",
    "[::1]%20:6379",
    " 127.0.0.1:6379",
    "127.0.0.1:6379\n",
    "127.0.0.1\r\n:6379",
    "127.0.0.1\x00:6379",
    "localhost.:6379",
    "evil.example.com:6379",
    "xn--:6379",
    "http://127.0.0.1:6379",
    "os://127.0.0.1:6379",
    "::1:6379",
    "127.0.0.1",
    "127.0.0.1:",
    "127.0.0.1:0",
    "127.0.0.1:65536",
    "127.0.0.1:６３７９",  # full-width digits: Ray's int() would take them
    "127.000.0.1:6379",
    "256.0.0.1:6379",
    "[127.0.0.1]:6379",
    "",
)

ADMITTED = (
    ("127.0.0.1:6379", "127.0.0.1", False),
    ("127.0.0.2:1", "127.0.0.2", False),
    ("localhost:6379", "localhost", False),
    ("[::1]:6379", "::1", False),
    ("[::ffff:127.0.0.1]:6379", "::ffff:127.0.0.1", False),
    ("ray://127.0.0.1:10001", "127.0.0.1", True),
    ("ray://[::1]:10001", "::1", True),
    ("203.0.113.1:6379", "203.0.113.1", False),
)


@pytest.mark.parametrize("address", TRICKY)
def test_an_address_outside_the_grammar_is_refused_with_a_typed_error(address: str) -> None:
    with pytest.raises(RayAddressError, match="not one the gate can judge") as info:
        ray_address_refusal(address, LiveGate(api_key="k", spend=True), {})
    assert isinstance(info.value, PlanError) and "\n" not in str(info.value)
    with pytest.raises(RayAddressError):
        ray_address_host(address)


@pytest.mark.parametrize(("address", "host", "client"), ADMITTED)
def test_the_forms_ray_documents_are_admitted(address: str, host: str, client: bool) -> None:
    got = parse_ray_address(address)
    assert (got.host, got.client) == (host, client)
    assert ray_address_host(address) == host
    resolved, err = ray_address_refusal(address, LiveGate(), {})
    assert resolved == address and (err is None) == is_loopback_host(host)


def test_auto_is_judged_by_what_it_resolves_to_as_ray_reads_it(tmp_path: Path) -> None:
    env = {"RAY_ADDRESS": "127.0.0.1/@evil.example.com:6379"}
    with pytest.raises(RayAddressError, match="resolved from RAY_ADDRESS"):
        resolve_ray_address("auto", env)
    # Ray does not strip RAY_ADDRESS: neither does the gate
    with pytest.raises(RayAddressError):
        resolve_ray_address("auto", {"RAY_ADDRESS": " 127.0.0.1:6379"})
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("127.0.0.1/@evil.example.com:6379\n")
    with pytest.raises(RayAddressError, match="ray_current_cluster"):
        resolve_ray_address("auto", {"RAY_TMPDIR": str(tmp_path)})
    # the file is stripped, as Ray's read_ray_address does
    (tmp_path / "ray" / "ray_current_cluster").write_text("127.0.0.1:6379\n")
    assert resolve_ray_address("auto", {"RAY_TMPDIR": str(tmp_path)}) == "127.0.0.1:6379"


EVIL = "127.0.0.1/@evil.example.com:6379"


@pytest.mark.parametrize("door", ["plan", "flag", "env"])
def test_every_door_refuses_the_address_before_a_dry_run_admits_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, door: str
) -> None:
    """The plan key, ``--ray-address`` and ``RAY_ADDRESS`` with ``"auto"``: exit 2 with
    one line naming the address, never "admitted" (the old gate's verdict, exit 0)."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    args = ["run", str(ray_plan_file(tmp_path, EVIL if door == "plan" else "auto")), "--dry-run"]
    if door == "flag":
        args += ["--ray-address", EVIL]
    if door == "env":
        monkeypatch.setenv("RAY_ADDRESS", EVIL)
    out, err = io.StringIO(), io.StringIO()
    code = main(args, stdout=out, stderr=err)
    text = err.getvalue()
    assert code == EXIT_USAGE, text
    assert "admitted" not in text and "Traceback" not in text
    assert "not one the gate can judge" in text and EVIL in text
    if door == "plan":
        with pytest.raises(PlanError, match="ray_address"):
            BenchmarkPlan.load(tmp_path / "plan.json")


# -- the differential test: the gate's host against Ray's own parsers ---------------------

FRAGMENTS = (
    "127.0.0.1",
    "127.0.0.2",
    "localhost",
    "evil.example.com",
    "[::1]",
    "::1",
    "::ffff:127.0.0.1",
    "[",
    "]",
    ":",
    "6379",
    "0",
    "/",
    "@",
    "%",
    "#",
    "?",
    ".",
    " ",
    "\n",
    "ray://",
    "http://",
)


def _ray_host(address: str) -> str | None:
    """The host Ray connects to for a concrete ``address``: ``ray.init`` hands
    ``scheme://rest`` to the client builder (``ray.client_builder._split_address``;
    for ``ray://``, ``rest`` is a gRPC ``host:port`` target), anything else to
    ``canonicalize_bootstrap_address``, which splits it with ``parse_address``."""
    # by name: ray ships no types for them (mypy sees Any either way)
    parse_address = importlib.import_module("ray._common.network_utils").parse_address
    split_address = importlib.import_module("ray._private.utils").split_address

    rest = address
    if "://" in address:
        scheme, rest = split_address(address)
        if scheme != "ray":
            return None  # Ray would import a module of that name
    parsed = parse_address(rest)
    return None if parsed is None else str(parsed[0])


@pytest.mark.ray
@settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=8).map("".join))
@example(EVIL)
@example("ray://127.0.0.1/@evil.example.com:10001")
@example("[::1]:6379")
def test_whenever_the_gate_admits_ray_reads_the_same_loopback_host(address: str) -> None:
    pytest.importorskip("ray")
    try:
        resolved, refusal = ray_address_refusal(address, LiveGate(), {})
    except RayAddressError:
        return  # refused before Ray could read it
    if resolved is None or refusal is not None:
        return
    ray_host = _ray_host(resolved)
    assert ray_host is not None and is_loopback_host(ray_host), (address, ray_host)
    assert ray_host == ray_address_host(resolved), (address, ray_host)


@pytest.mark.ray
@pytest.mark.parametrize(("address", "host", "_client"), ADMITTED)
def test_ray_reads_every_admitted_form_as_the_gate_does(
    address: str, host: str, _client: bool
) -> None:
    pytest.importorskip("ray")
    assert _ray_host(address) == host
