"""Replay every shared margin case (../shared/cases/logprobs/*.json) through the real
follow-up code.

Each case's ``follow_up`` (status, headers, body) is served by a loopback server; the
margin follow-up (``explain_divergences``, which reads the answer with the bounded
reader and aligns it with ``parse_chat_logprobs``/``align_divergence``) asks it about
the case's ``candidate_text`` (with ``other_text`` as ``off``'s own), on asyncio and
trio. The margin must match ``expect`` (every field it names; ``margin_nats`` to
1e-6 nats) or one of ``extra.also_acceptable``. The files are found by globbing, so a
new case file is a new test. The case format: ``../shared/cases/README.md``
("logprobs/*.json").

Where the cases are: ``$DEEPSEEKBENCH_CASES`` or ``<repo>/../shared/cases``.
Missing cases fail under ``CI=true`` and skip elsewhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from deepseekbench import ChatRequest, DivergenceMargin, EngineRoute, LiveGate
from deepseekbench._execute._forensics import explain_divergences
from deepseekbench._records._follow_up import FollowUp
from tests._replay import Script, Write, replay_server

REPO_ROOT = Path(__file__).resolve().parents[2]
KNOWN_EXPECT = {"kind", "margin_nats", "candidate_rank", "off_token", "candidate_token"}
KNOWN_EXPECT |= {"token_index"}


def cases_dir() -> Path:
    env = os.environ.get("DEEPSEEKBENCH_CASES")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "cases"


def _params() -> list[Any]:
    files = sorted((cases_dir() / "logprobs").glob("*.json"))
    return [pytest.param(p, id=f"logprobs/{p.stem}") for p in files] or [
        pytest.param(None, id="logprobs-cases-missing")
    ]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _load(path: Path | None) -> dict[str, Any]:
    if path is None:
        where = cases_dir()
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"shared cases not found under {where} (set DEEPSEEKBENCH_CASES)")
        pytest.skip(f"shared cases not found under {where}")
    case: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return case


def _script(follow_up: dict[str, Any]) -> Script:
    body = json.dumps(follow_up["body"]).encode()
    headers = {k.lower(): str(v) for k, v in follow_up.get("headers", {}).items()}
    return Script(status=int(follow_up["status"]), headers=headers, writes=(Write(0.0, body),))


def _matches(m: DivergenceMargin, want: dict[str, Any]) -> bool:
    for key, value in want.items():
        got = getattr(m, key)
        if key == "kind":
            got = got.value
        if key == "margin_nats" and value is not None and got is not None:
            if abs(got - value) > 1e-6:
                return False
        elif got != value:
            return False
    return True


async def _margin(case: dict[str, Any]) -> tuple[DivergenceMargin, int]:
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=64, seed=1)
    follow = FollowUp(
        "case",
        str(case.get("candidate", "mtp")),
        request,
        str(case["candidate_text"]),
        reasoning_mode=str(case.get("reasoning_mode") or ""),
        other_text=case.get("other_text"),
    )
    gate = LiveGate()
    async with replay_server(_script(case["follow_up"])) as server:
        route = EngineRoute(base_url=server.base_url, model="dsv4-test")
        async with gate.client() as client:
            ((_, m),) = await explain_divergences(
                [follow], off=route, gate=gate, client=client, timeout_s=10
            )
        return m, len(server.requests)


@pytest.mark.shared_cases
@pytest.mark.anyio
@pytest.mark.parametrize("path", _params())
async def test_logprobs_case(path: Path | None) -> None:
    case = _load(path)
    expect: dict[str, Any] = case["expect"]
    assert set(expect) <= KNOWN_EXPECT, f"expect fields this test does not check: {expect}"
    m, asked = await _margin(case)
    assert asked == 1  # one follow-up, to off only
    acceptable = [expect, *case.get("extra", {}).get("also_acceptable", [])]
    assert any(_matches(m, want) for want in acceptable), (
        f"{case['name']}: got {m.kind.value} margin {m.margin_nats} rank {m.candidate_rank} "
        f"off {m.off_token!r} candidate {m.candidate_token!r} ({m.note}); want one of "
        f"{acceptable}"
    )
    if m.margin_nats is None:
        assert m.note, "an unexplained margin says why"
