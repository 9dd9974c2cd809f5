"""Properties of the foundation, each run against the real code AND a deliberately broken one.

A property that cannot fail proves nothing, so every property here is written
as a function of the implementation under test; the ``*_catches_broken`` tests
assert hypothesis finds a counterexample in a broken implementation.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from deepseekbench import (
    KEY_AXES,
    LOAD_AXES,
    Arrival,
    LiveGate,
    LiveGateError,
    QualityParity,
    RefusalReason,
    Row,
    Speculative,
    SpeedupMetric,
    SpeedupVerdict,
    compare_speedup,
)
from tests.strategies import creditable_pairs, rows, unknown_loads
from tests.test_foundation import make_row

Comparator = Callable[..., SpeedupVerdict]
PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# Against a broken implementation we only need *a* counterexample: no shrinking,
# and no example database (so the real implementation's runs stay independent).
BROKEN_SETTINGS = settings(
    PROPERTY_SETTINGS, phases=[Phase.explicit, Phase.generate], database=None
)


NUMBER = re.compile(r"(?<![A-Za-z_])\d+(?:\.\d+)?(?![A-Za-z_])")


def renderings(verdict: SpeedupVerdict) -> list[str]:
    return [str(verdict), repr(verdict), verdict.model_dump_json(), format(verdict)]


def assert_refused_without_figure(verdict: SpeedupVerdict) -> None:
    assert not verdict.printed
    assert verdict.speedup is None
    assert verdict.reasons
    for text in renderings(verdict):
        # no free-standing number (digits inside names like e2e_ms are fine):
        # no speedup figure can hide in any rendering
        assert not NUMBER.search(text), text


# --- (a) unverified parity is never credited --------------------------------------
non_verified = st.sampled_from([QualityParity.unknown, QualityParity.differs])


def check_parity_property(compare: Comparator, cfg: settings = PROPERTY_SETTINGS) -> None:
    @cfg
    @given(
        pair=creditable_pairs(),
        which=st.sampled_from(["baseline", "candidate", "both"]),
        parity=non_verified,
        metric=st.sampled_from(SpeedupMetric),
    )
    def prop(pair: tuple[Row, Row], which: str, parity: QualityParity, metric: Any) -> None:
        base, cand = pair
        if which in ("baseline", "both"):
            base = base.model_copy(update={"quality_parity": parity})
        if which in ("candidate", "both"):
            cand = cand.model_copy(update={"quality_parity": parity})
        assert_refused_without_figure(compare(base, cand, metric=metric))

    prop()


def check_any_pair_property(compare: Comparator, cfg: settings = PROPERTY_SETTINGS) -> None:
    @cfg
    @given(base=rows(), cand=rows())
    def prop(base: Row, cand: Row) -> None:
        verdict = compare(base, cand)
        if (
            base.quality_parity is not QualityParity.verified
            or cand.quality_parity is not QualityParity.verified
        ):
            assert_refused_without_figure(verdict)
        if verdict.printed:
            assert verdict.speedup is not None and verdict.speedup > 0
            assert base.quality_parity is QualityParity.verified
            assert cand.quality_parity is QualityParity.verified

    prop()


def broken_ignores_parity(base: Row, cand: Row, **kw: Any) -> SpeedupVerdict:
    verified = {"quality_parity": QualityParity.verified}
    return compare_speedup(base.model_copy(update=verified), cand.model_copy(update=verified), **kw)


def test_unverified_parity_is_refused_without_a_figure() -> None:
    check_parity_property(compare_speedup)
    check_any_pair_property(compare_speedup)


def test_parity_property_catches_a_comparator_that_ignores_parity() -> None:
    with pytest.raises(AssertionError):
        check_parity_property(broken_ignores_parity, BROKEN_SETTINGS)


def test_creditable_pairs_are_credited() -> None:
    @PROPERTY_SETTINGS
    @given(pair=creditable_pairs(), metric=st.sampled_from(SpeedupMetric))
    def prop(pair: tuple[Row, Row], metric: SpeedupMetric) -> None:
        base, cand = pair
        verdict = compare_speedup(base, cand, metric=metric)
        b, c = getattr(base, metric.value), getattr(cand, metric.value)
        expected = c / b if metric.higher_is_better else b / c
        assert verdict.printed and verdict.speedup == pytest.approx(expected)
        assert f"{expected:.2f}" in str(verdict)

    prop()


# --- (b) any other key axis differing is refused -----------------------------------
OTHER_AXES = [a for a in KEY_AXES if a != "speculative"]


def check_axis_property(compare: Comparator, cfg: settings = PROPERTY_SETTINGS) -> None:
    @cfg
    @given(
        pair=creditable_pairs(),
        other=rows(),
        axes=st.sets(st.sampled_from(OTHER_AXES), min_size=1),
    )
    def prop(pair: tuple[Row, Row], other: Row, axes: set[str]) -> None:
        base, cand = pair
        update = {a: getattr(other, a) for a in axes if getattr(other, a) != getattr(base, a)}
        if not update:
            return
        cand = cand.model_copy(update=update)
        verdict = compare(base, cand)
        assert_refused_without_figure(verdict)
        assert set(verdict.mismatched_axes) == set(update)

    prop()


def broken_ignores_axes(base: Row, cand: Row, **kw: Any) -> SpeedupVerdict:
    same = {a: getattr(base, a) for a in OTHER_AXES}
    return compare_speedup(base, cand.model_copy(update=same), **kw)


def test_key_axis_mismatch_is_refused() -> None:
    check_axis_property(compare_speedup)


def test_axis_property_catches_a_comparator_that_ignores_axes() -> None:
    with pytest.raises(AssertionError):
        check_axis_property(broken_ignores_axes, BROKEN_SETTINGS)


# --- (b2) a different load is refused with load_mismatch -----------------------------
loads = st.tuples(
    st.none() | st.integers(min_value=1, max_value=4096),
    st.none() | st.floats(min_value=0.01, max_value=1e4),
    st.none() | st.sampled_from(Arrival),
)


def check_load_property(compare: Comparator, cfg: settings = PROPERTY_SETTINGS) -> None:
    @cfg
    @given(pair=creditable_pairs(), load=loads)
    @example(
        pair=(
            make_row(concurrency=1, arrival=Arrival.closed),
            make_row(speculative=Speculative.mtp, concurrency=16, arrival=Arrival.closed),
        ),
        load=(16, None, Arrival.closed),
    )
    @example(  # a schema-1 row (load unknown) against a row of known load
        pair=(
            make_row(concurrency=4, arrival=Arrival.closed),
            make_row(speculative=Speculative.mtp, concurrency=4, arrival=Arrival.closed),
        ),
        load=(None, None, None),
    )
    def prop(pair: tuple[Row, Row], load: tuple[int | None, float | None, Any]) -> None:
        base, cand = pair
        update = dict(zip(LOAD_AXES, load, strict=True))
        cand = cand.model_copy(update=update)
        verdict = compare(base, cand)
        if all(getattr(base, a) == getattr(cand, a) for a in LOAD_AXES):
            assert RefusalReason.load_mismatch not in verdict.reasons
            return
        assert_refused_without_figure(verdict)
        assert RefusalReason.load_mismatch in verdict.reasons
        assert RefusalReason.key_axis_mismatch not in verdict.reasons

    prop()


def broken_ignores_load(base: Row, cand: Row, **kw: Any) -> SpeedupVerdict:
    same = {a: getattr(base, a) for a in LOAD_AXES}
    return compare_speedup(base, cand.model_copy(update=same), **kw)


def test_load_mismatch_is_refused() -> None:
    check_load_property(compare_speedup)


def test_load_property_catches_a_comparator_that_ignores_load() -> None:
    with pytest.raises(AssertionError):
        check_load_property(broken_ignores_load, BROKEN_SETTINGS)


def test_rows_differing_only_in_concurrency_are_refused() -> None:
    base = make_row(concurrency=1, arrival=Arrival.closed)
    cand = make_row(speculative=Speculative.mtp, concurrency=8, arrival=Arrival.closed, tpot_ms=5.0)
    verdict = compare_speedup(base, cand)
    assert verdict.reasons == (RefusalReason.load_mismatch,)
    assert verdict.mismatched_axes == ("concurrency",)


# --- (b3) the seed rule: a row that does not state its load earns no figure --------
def check_load_unknown_property(compare: Comparator, cfg: settings = PROPERTY_SETTINGS) -> None:
    @cfg
    @given(
        pair=creditable_pairs(),
        base_load=unknown_loads,
        cand_load=st.none() | unknown_loads,
        which=st.sampled_from(["both", "base", "cand"]),
        metric=st.sampled_from(SpeedupMetric),
    )
    @example(  # two rows with the load unset, otherwise creditable: once "2.00×"
        pair=(make_row(), make_row(speculative=Speculative.mtp, tpot_ms=10.0)),
        base_load={"concurrency": None, "request_rate_per_s": None, "arrival": None},
        cand_load=None,
        which="both",
        metric=SpeedupMetric.tpot_ms,
    )
    def prop(
        pair: tuple[Row, Row],
        base_load: dict[str, Any],
        cand_load: dict[str, Any] | None,
        which: str,
        metric: SpeedupMetric,
    ) -> None:
        base, cand = pair
        if which in ("both", "base"):
            base = base.model_copy(update=base_load)
        if which in ("both", "cand"):
            cand = cand.model_copy(update=cand_load if cand_load is not None else base_load)
        verdict = compare(base, cand, metric=metric)
        assert_refused_without_figure(verdict)
        assert RefusalReason.load_unknown in verdict.reasons

    prop()


def broken_ignores_unknown_load(base: Row, cand: Row, **kw: Any) -> SpeedupVerdict:
    """Judges two rows of unknown load as if both ran one closed-loop stream."""
    known = {"concurrency": 1, "request_rate_per_s": None, "arrival": Arrival.closed}
    if base.arrival is None or cand.arrival is None:
        base, cand = base.model_copy(update=known), cand.model_copy(update=known)
    return compare_speedup(base, cand, **kw)


def test_unknown_load_is_refused() -> None:
    check_load_unknown_property(compare_speedup)


def test_load_unknown_property_catches_a_comparator_that_ignores_load() -> None:
    with pytest.raises(AssertionError):
        check_load_unknown_property(broken_ignores_unknown_load, BROKEN_SETTINGS)


def test_two_rows_without_load_print_no_speedup_and_still_read() -> None:
    unset = {"concurrency": None, "arrival": None}
    base = make_row(**unset)
    cand = make_row(speculative=Speculative.mtp, tpot_ms=10.0, **unset)
    verdict = compare_speedup(base, cand)
    assert verdict.reasons == (RefusalReason.load_unknown,)
    assert "×" not in str(verdict) and "load_unknown" in str(verdict)
    # an old (schema-1) row still reads back: only its figure is withheld
    old = Row.model_validate({**base.model_dump(mode="json"), "schema_version": 1})
    assert old.arrival is None and not compare_speedup(old, cand)


# --- (c) a closed gate never calls the transport -----------------------------------
class SpyTransport(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.calls: list[httpx.URL] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(request.url)
        return httpx.Response(200, text="spy")


label = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12).filter(
    lambda s: not s.startswith("-") and not s.endswith("-")
)
public_ipv4 = (
    st.tuples(*[st.integers(0, 255)] * 4)
    .filter(lambda t: t[0] != 127)
    .map(lambda t: ".".join(map(str, t)))
)
hostnames = (
    st.lists(label, min_size=1, max_size=3)
    .map(lambda parts: ".".join([*parts, "example"]))
    .filter(lambda h: h != "localhost")
)
non_loopback_urls = st.builds(
    lambda scheme, host, port, path: f"{scheme}://{host}:{port}/{path}",
    st.sampled_from(["http", "https"]),
    hostnames | public_ipv4 | st.just("[2001:db8::1]"),
    st.integers(1, 65535),
    st.sampled_from(["v1/chat/completions", "metrics", ""]),
)
closed_gates = st.sampled_from(
    [
        {},
        {"spend": True},
        {"api_key": "sk-test-secret-value"},
        {"api_key": "sk-test-secret-value", "spend": False},
    ]
)

GateFactory = Callable[..., Any]


def check_gate_property(make_gate: GateFactory, cfg: settings = PROPERTY_SETTINGS) -> None:
    import anyio

    @cfg
    @given(url=non_loopback_urls, kwargs=closed_gates)
    def prop(url: str, kwargs: dict[str, Any]) -> None:
        spy = SpyTransport()
        gate = make_gate(**kwargs)

        refusals: list[LiveGateError] = []

        async def go() -> None:
            async with httpx.AsyncClient(transport=gate.wrap(spy)) as client:
                try:
                    await client.post(url, json={"x": 1})
                except LiveGateError as exc:
                    refusals.append(exc)

        anyio.run(go)
        assert spy.calls == []
        assert len(refusals) == 1
        for text in (str(refusals[0]), repr(refusals[0]), repr(gate)):
            assert "sk-test-secret-value" not in text

    prop()


class BrokenGate(LiveGate):
    """Lets everything through: the property must catch it."""

    def admit(self, request: httpx.Request) -> None:
        return None


def test_closed_gate_makes_no_transport_call() -> None:
    check_gate_property(LiveGate)


def test_gate_property_catches_a_gate_that_lets_through() -> None:
    with pytest.raises(AssertionError):
        check_gate_property(BrokenGate, BROKEN_SETTINGS)


# --- (d) JSONL round trip is the identity ------------------------------------------
Serializer = Callable[[Row], bytes]
Parser = Callable[[bytes], Row]


def check_roundtrip_property(
    dump: Serializer, load: Parser, cfg: settings = PROPERTY_SETTINGS
) -> None:
    @cfg
    @given(row=rows())
    def prop(row: Row) -> None:
        line = dump(row)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        back = load(line)
        assert back == row
        assert dump(back) == line

    prop()


def broken_dump(row: Row) -> bytes:
    data = row.model_dump(mode="json")
    for key in ("ttft_ms", "tpot_ms", "e2e_ms", "output_toks_per_s"):
        if data[key] is not None:
            data[key] = round(data[key], 3)
    return orjson.dumps(data, option=orjson.OPT_APPEND_NEWLINE)


def test_row_jsonl_roundtrip_is_identity() -> None:
    check_roundtrip_property(Row.to_json_line, Row.from_json_line)


def test_roundtrip_property_catches_a_lossy_serializer() -> None:
    with pytest.raises(AssertionError):
        check_roundtrip_property(broken_dump, Row.from_json_line, BROKEN_SETTINGS)
