"""What a fresh-user trial found: a dead route found late, ``ssl:default`` in http
errors, a silent resume, ``report --plot`` without matplotlib, and
``compare_speedup`` without the scorecard's interval."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from deepseekbench import (
    BenchmarkPlan,
    CostModel,
    EmbeddedEngine,
    EngineConfig,
    EngineRoute,
    ErrorKind,
    LiveGate,
    ProgressEvent,
    RouteUnreachableError,
    Scorecard,
    Speculative,
    compare_speedup,
    load_results,
    measure_streamed,
    run_plan,
)
from deepseekbench._cli._exits import EXIT_OK, EXIT_USAGE
from deepseekbench._cli._main import main
from deepseekbench._cli._progress import StderrProgress
from deepseekbench._net._probe import probe_route
from deepseekbench._net._transport import connect_error_text
from tests._helpers import verdict_judged
from tests._replay import Script, Write, replay_server
from tests.cli.test_cli import served

COSTS = CostModel(target_step_ms=1.0, verify_token_ms=0.05, draft_step_ms=0.1)
MODEL = "deepseekbench-ref"  # what the embedded engine serves at /v1/models


def _plan(urls: list[str], **over: Any) -> BenchmarkPlan:
    specs = ["off", "mtp", "mtp"]
    data: dict[str, Any] = {
        "model": MODEL,
        "routes": [
            {"label": f"r{i}", "speculative": specs[i], "base_url": u, "dialect": "vllm"}
            for i, u in enumerate(urls)
        ],
        "requests_per_cell": 6,
        "warmup_per_cell": 0,
        "repeats": 3,
        "arrival": {"mode": "concurrency", "concurrency": 2},
        "parity": {"tasks": "none", "prompts": ["What is 7 × 8?"], "max_tokens": 32},
    }
    data.update(over)
    return BenchmarkPlan.model_validate(data)


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


async def _closed_port() -> int:
    from tests._replay import closed_port

    return await closed_port()


# -- 1: a dead route stops the run before anything is measured --------------------------
def test_a_dead_route_fails_fast_naming_the_route_and_nothing_is_measured(
    tmp_path: Path,
) -> None:
    results = tmp_path / "dead.jsonl"

    async def main_() -> RouteUnreachableError:
        port = await _closed_port()
        async with EmbeddedEngine(EngineConfig(cost=COSTS)) as off:
            plan = _plan([off.base_url, f"http://127.0.0.1:{port}/v1"])
            with pytest.raises(RouteUnreachableError) as info:
                await run_plan(plan, gate=LiveGate(), results_path=results)
            return info.value

    err = anyio.run(main_)
    assert err.failures == {"r1": "connect"} and err.routes == ("r1",)
    text = str(err)
    assert "route 'r1'" in text and "Connection refused" in text and "ssl:" not in text
    assert "--no-probe" in text
    kinds = {r["record"] for r in _records(results)}
    assert not kinds & {"measurement", "parity_output", "run_start"}


def test_a_wrong_model_name_and_an_http_error_are_named_per_route(tmp_path: Path) -> None:
    async def main_() -> RouteUnreachableError:
        unavailable = Script(
            status=503, headers={"content-type": "application/json"}, writes=(Write(0, b"{}"),)
        )
        async with (
            EmbeddedEngine(EngineConfig(cost=COSTS)) as off,
            EmbeddedEngine(EngineConfig(speculative=Speculative.mtp, cost=COSTS)) as mtp,
            replay_server(unavailable) as down,
        ):
            plan = _plan([off.base_url, mtp.base_url, down.base_url])
            routes = [
                r.model_copy(update={"model": "deepseek-v4"}) if r.label == "r1" else r
                for r in plan.routes
            ]
            plan = plan.model_copy(update={"routes": tuple(routes)})
            with pytest.raises(RouteUnreachableError) as info:
                await run_plan(plan, gate=LiveGate(), results_path=None)
            return info.value

    err = anyio.run(main_)
    assert err.failures == {"r1": "model_not_served", "r2": "http_status"}
    text = str(err)
    assert f"model 'deepseek-v4' is not served (it serves '{MODEL}')" in text
    assert "HTTP 503" in text and "route 'r0'" not in text


def test_probe_passes_a_server_without_a_model_list_and_llamacpp_any_name() -> None:
    llama = {"object": "list", "data": [{"id": "/models/x.gguf", "owned_by": "llamacpp"}]}

    async def main_() -> list[tuple[str, str] | None]:
        out: list[tuple[str, str] | None] = []
        gate = LiveGate()
        scripts = [
            Script(status=404, headers={"content-type": "text/plain"}, writes=(Write(0, b"no"),)),
            Script(
                headers={"content-type": "application/json"},
                writes=(Write(0, orjson.dumps(llama)),),
            ),
        ]
        async with gate.client() as client:
            for script in scripts:
                async with replay_server(script) as server:
                    route = EngineRoute(base_url=server.base_url, model="anything")
                    out.append(await probe_route(route, gate=gate, client=client))
        return out

    assert anyio.run(main_) == [None, None]


def test_the_probe_is_opt_out_by_plan_key_and_cli_flag(tmp_path: Path) -> None:
    async def main_() -> Any:
        port = await _closed_port()
        async with EmbeddedEngine(EngineConfig(cost=COSTS)) as off:
            plan = _plan(
                [off.base_url, f"http://127.0.0.1:{port}/v1"],
                probe_routes=False,
                requests_per_cell=2,
                repeats=1,
            )
            return await run_plan(plan, gate=LiveGate(), results_path=None)

    result = anyio.run(main_)  # measured anyway; the dead route's requests are errors
    dead = [m for m in result.measurements if m.route == "r1"]
    assert dead and all(m.measurement.error is not None for m in dead)
    assert _plan(["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"]).probe_routes is True
    same = _plan(["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"], probe_routes=False)
    assert same.plan_hash() == _plan(["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"]).plan_hash()

    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        json.dumps(
            {
                "model": MODEL,
                "routes": [
                    {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:1/v1"},
                    {"label": "m", "speculative": "mtp", "base_url": "http://127.0.0.1:2/v1"},
                ],
            }
        ),
        encoding="utf-8",
    )
    from deepseekbench._cli._commands import with_client_flags
    from deepseekbench._cli._parser import build_parser

    args = build_parser().parse_args(["run", str(plan_file), "--no-probe"])
    assert with_client_flags(BenchmarkPlan.load(plan_file), args).probe_routes is False
    args = build_parser().parse_args(["run", str(plan_file)])
    assert with_client_flags(BenchmarkPlan.load(plan_file), args).probe_routes is True


def test_cli_exits_2_with_the_probe_message_and_writes_no_measurement(tmp_path: Path) -> None:
    port = anyio.run(_closed_port)
    with served("--target-step-ms", "1") as off:
        plan_file = tmp_path / "plan.json"
        plan_file.write_text(
            json.dumps(
                {
                    "model": MODEL,
                    "routes": [
                        {"label": "off", "speculative": "off", "base_url": off},
                        {
                            "label": "mtp",
                            "speculative": "mtp",
                            "base_url": f"http://127.0.0.1:{port}/v1",
                        },
                    ],
                    "parity": {"tasks": "none", "prompts": ["Hi"]},
                }
            ),
            encoding="utf-8",
        )
        results = tmp_path / "r.jsonl"
        out, err = io.StringIO(), io.StringIO()
        rc = main(["run", str(plan_file), "--results", str(results)], stdout=out, stderr=err)
    assert rc == EXIT_USAGE, err.getvalue()
    assert "route 'mtp'" in err.getvalue() and "connect: cannot connect to" in err.getvalue()
    assert out.getvalue() == ""
    assert not results.exists()  # nothing recorded: no empty results file either


# -- 2: connect errors on plain http say nothing about ssl ------------------------------
def test_connect_error_text_on_http_is_accurate_and_keeps_the_kind() -> None:
    async def main_() -> tuple[int, Any]:
        port = await _closed_port()
        route = EngineRoute(base_url=f"http://127.0.0.1:{port}/v1", model="m")
        request = {"messages": [{"role": "user", "content": "x"}]}
        return port, await measure_streamed(request, route=route, gate=LiveGate())

    port, m = anyio.run(main_)
    assert m.error is not None and m.error.kind is ErrorKind.connect
    assert "ssl" not in m.error.message
    assert f"cannot connect to http://127.0.0.1:{port}: Connection refused" in m.error.message
    # the text names scheme, host and port only: never user-info, path or query
    text = connect_error_text(httpx.URL("http://user:s3cret@127.0.0.1:8000/v1?k=x"), "Refused")
    assert text == "cannot connect to http://127.0.0.1:8000: Refused"
    assert connect_error_text(httpx.URL("https://[::1]/v1"), "r").startswith(
        "cannot connect to https://[::1]:443"
    )


# -- 3 and 6: a resumed run says what it kept; compare_speedup's interval ---------------
def _run_then_resume(tmp_path: Path, stop_after: int) -> tuple[Any, list[ProgressEvent], int]:
    results = tmp_path / "resume.jsonl"

    async def main_() -> tuple[Any, list[ProgressEvent], int]:
        async with (
            EmbeddedEngine(EngineConfig(cost=COSTS)) as off,
            EmbeddedEngine(EngineConfig(speculative=Speculative.mtp, cost=COSTS)) as mtp,
        ):
            plan = _plan([off.base_url, mtp.base_url])
            with anyio.CancelScope() as scope:

                def stop(ev: ProgressEvent) -> None:
                    if ev.done >= stop_after:
                        scope.cancel()

                first = await run_plan(plan, gate=LiveGate(), results_path=results, progress=stop)
                assert first.kept_measurements == 0 and first.remaining_measurements == 12
            kept = sum(r["record"] == "measurement" for r in _records(results))
            events: list[ProgressEvent] = []
            result = await run_plan(
                plan, gate=LiveGate(), results_path=results, progress=events.append
            )
            return result, events, kept

    return anyio.run(main_)


def _complete_run(tmp_path: Path) -> Path:
    results = tmp_path / "complete.jsonl"

    async def main_() -> None:
        async with (
            EmbeddedEngine(EngineConfig(cost=COSTS)) as off,
            EmbeddedEngine(EngineConfig(speculative=Speculative.mtp, cost=COSTS)) as mtp,
        ):
            await run_plan(
                _plan([off.base_url, mtp.base_url]), gate=LiveGate(), results_path=results
            )

    anyio.run(main_)
    return results


def test_a_resumed_run_says_how_many_measurements_it_kept_and_has_left(tmp_path: Path) -> None:
    result, events, kept = _run_then_resume(tmp_path, stop_after=6)
    assert 0 < kept < 12
    assert events[0].phase == "resume"
    assert (events[0].kept, events[0].remaining) == (kept, 12 - kept)
    assert (result.kept_measurements, result.remaining_measurements) == (kept, 12 - kept)
    assert all(e.phase != "resume" for e in events[1:])
    # the CLI writes it as one stderr line, terminal or not
    pipe = io.StringIO()
    progress = StderrProgress(pipe)
    for ev in events:
        progress(ev)
    progress.close()
    assert pipe.getvalue() == (
        f"resumed: {kept} measured request(s) kept from the results file, {12 - kept} to do\n"
    )


def test_compare_speedup_gives_the_interval_the_scorecard_prints(tmp_path: Path) -> None:
    loaded = load_results(_complete_run(tmp_path))
    card = Scorecard.from_run(loaded)
    line = next(ln for ln in card.lines if ln.verdict is not None)
    off_row, mtp_row = loaded.rows[0], loaded.rows[1]
    plain = compare_speedup(off_row, mtp_row)
    assert plain.ci_low is None  # from the rows alone: no interval (as before)
    verdict = compare_speedup(off_row, mtp_row, result=loaded)
    # credited, or an interval spanning 1 reported as no significant difference; a busy
    # machine may refuse it for its client's clock alone (no interval then), never parity
    assert verdict_judged(verdict), str(verdict)
    assert verdict == line.verdict and str(verdict) == line.speedup_text
    if verdict.printed or verdict.inconclusive:
        assert verdict.rounds == 3
        assert verdict.ci_low is not None and verdict.ci_high is not None
    # a copy of a row (equal, not the same object) is found too; a foreign row is not
    assert compare_speedup(off_row.model_copy(), mtp_row, result=loaded) == verdict
    with pytest.raises(ValueError, match="not one of this run's rows"):
        compare_speedup(off_row, mtp_row.model_copy(update={"tpot_ms": 1.0}), result=loaded)
    with pytest.raises(ValueError, match="not both"):
        compare_speedup(off_row, mtp_row, result=loaded, rounds=({}, {}))


# -- 4: report --plot without matplotlib says so before printing anything ---------------
def test_report_plot_without_matplotlib_prints_no_scorecard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = _complete_run(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    assert main(["report", str(results)], stdout=out, stderr=err) == EXIT_OK
    assert "baseline" in out.getvalue()  # the file renders
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out, err = io.StringIO(), io.StringIO()
    rc = main(["report", str(results), "--plot", str(tmp_path / "x.png")], stdout=out, stderr=err)
    assert rc == EXIT_USAGE
    assert out.getvalue() == ""
    assert err.getvalue() == (
        "deepseekbench: --plot: plotting needs matplotlib: pip install 'deepseekbench[plot]'\n"
    )
    assert not (tmp_path / "x.png").exists()
