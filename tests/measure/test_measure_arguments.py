"""``measure_streamed`` with a wrong ``route`` or ``gate`` type: a ``TypeError`` that names
the argument, raised before any connection (no server is needed, none is contacted)."""

from __future__ import annotations

from typing import Any

import pytest

from deepseekbench import EngineRoute, LiveGate, measure_streamed

pytestmark = pytest.mark.anyio

_BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
_ROUTE = EngineRoute(base_url="http://127.0.0.1:9/v1", model="m")


@pytest.mark.parametrize(
    ("route", "gate", "named", "got"),
    [
        ({"base_url": "http://127.0.0.1:9/v1", "model": "m"}, LiveGate(), "route", "dict"),
        (None, LiveGate(), "route", "NoneType"),
        (_ROUTE, None, "gate", "NoneType"),
        (_ROUTE, "loopback", "gate", "str"),
    ],
)
async def test_a_wrong_route_or_gate_is_a_type_error_naming_it(
    route: Any, gate: Any, named: str, got: str
) -> None:
    with pytest.raises(TypeError, match=rf"measure_streamed: {named} must be .* not {got}$"):
        await measure_streamed(_BODY, route=route, gate=gate)
