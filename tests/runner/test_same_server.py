"""Both routes at one server get no speed verdict: ``off`` and a speculative route that
resolve to the same ``base_url`` and model (with nothing that makes the server decode
them differently) are refused when the plan is read — the dry run says so — and a
speculative route whose server exported no speculative counter at all is refused
after the run (``speculative_counters_missing``)."""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from deepseekbench import (
    BenchmarkPlan,
    LiveGate,
    PlanError,
    RefusalReason,
    Scorecard,
    compare_speedup,
    dry_run,
)
from deepseekbench._cli._exits import EXIT_OK
from deepseekbench._cli._main import main
from tests._helpers import make_row


def _plan(off: dict[str, Any], mtp: dict[str, Any], **over: Any) -> BenchmarkPlan:
    return BenchmarkPlan.model_validate(
        {
            "model": "m",
            "routes": [
                {"label": "off", "speculative": "off", **off},
                {"label": "mtp", "speculative": "mtp", **mtp},
            ],
            "parity": {"prompts": ["p"], "tasks": "none"},
            **over,
        }
    )


URL = "http://127.0.0.1:8000/v1"


@pytest.mark.parametrize(
    "mtp",
    [
        {"base_url": URL},
        {"base_url": URL + "/"},  # a trailing slash is the same server
        {"base_url": "http://localhost:8000/v1/"},  # localhost is 127.0.0.1 to the gate too
        {"base_url": "http://LOCALHOST:8000/v1"},
        {"base_url": "http://127.0.0.1:8000/v1", "model": "m"},  # the plan's model, said twice
        {"base_url": URL, "dialect": "vllm", "continuous_usage": True},  # client-side only
    ],
)
def test_off_and_a_speculative_route_on_one_server_are_refused_at_plan_time(
    mtp: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError, match="resolve to the same server and model") as exc:
        _plan({"base_url": URL}, mtp)
    assert "'mtp' (speculative=mtp)" in str(exc.value) and "'off'" in str(exc.value)


@pytest.mark.parametrize(
    "mtp",
    [
        {"base_url": "http://127.0.0.1:8001/v1"},  # another port: another server
        {"base_url": URL, "model": "m-mtp"},  # another model on the server
        {"base_url": URL, "request_extras": {"speculative.n_max": 4}},  # per-request setting
    ],
)
def test_a_route_that_makes_the_server_decode_differently_is_allowed(mtp: dict[str, Any]) -> None:
    plan = _plan({"base_url": URL}, mtp)
    assert [r.label for r in plan.speculative_routes] == ["mtp"]


def test_the_dry_run_says_it(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(
        'model = "m"\n'
        f'[[routes]]\nlabel = "off"\nspeculative = "off"\nbase_url = "{URL}"\n'
        f'[[routes]]\nlabel = "mtp"\nspeculative = "mtp"\nbase_url = "{URL}"\n'
    )
    with pytest.raises(PlanError, match="same server and model"):
        BenchmarkPlan.load(path)
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(path), "--dry-run"], stdout=out, stderr=err) != EXIT_OK
    assert "resolve to the same server and model" in err.getvalue()
    assert "no speedup can be measured" in err.getvalue()


def _run_rows(**cand: Any) -> tuple[Any, Any]:
    """An ``off`` row and an ``mtp`` row as a run writes them (identity judged)."""
    load: dict[str, Any] = {"arrival": "closed", "concurrency": 1, "route_identity": "ok"}
    off = make_row(**load)
    mtp = make_row(**{**load, "speculative": "mtp", "route_label": "mtp", "tpot_ms": 5.0, **cand})
    return off, mtp


def test_a_speculative_route_whose_server_exports_no_counters_is_refused() -> None:
    off, silent = _run_rows(route_identity="flagged")
    verdict = compare_speedup(off, silent)
    assert not verdict and verdict.reasons == (RefusalReason.speculative_counters_missing,)
    card = Scorecard.from_rows([off, silent])
    assert "refused: speculative_counters_missing" in card.to_text()
    # any counter at all — even 0 drafted, or only an acceptance rate — is evidence
    for counters in (
        {"draft_tokens": 0, "accepted_tokens": 0},
        {"accepted_token_ratio": 0.7},
        {"acceptance_length": 2.1},
        {"acceptance_by_position": (0.8, 0.6)},
    ):
        assert compare_speedup(*_run_rows(**counters)).printed, counters
    # a hand-made row (identity not judged) is not a run's row: not judged
    hand = silent.model_copy(update={"route_identity": None})
    assert compare_speedup(off, hand).printed


def _dialect_warnings(plan: BenchmarkPlan) -> tuple[str, ...]:
    with warnings.catch_warnings():  # the smoke workload's coverage warning is not ours
        warnings.simplefilter("ignore")
        said = dry_run(plan, gate=LiveGate()).warnings
    return tuple(w for w in said if "dialect" in w)


def test_the_dry_run_warns_of_a_dialect_that_reads_no_speculative_counter(
    tmp_path: Path,
) -> None:
    other = "http://127.0.0.1:8001/v1"
    warned = _plan({"base_url": URL}, {"base_url": other, "dialect": "openai"})
    assert _dialect_warnings(warned) == (
        "route 'mtp' (speculative=mtp) speaks dialect 'openai', which reads no speculative "
        "counter (usage, per-request fields or /metrics): its speed verdict will be refused "
        "(speculative_counters_missing); use the engine's own dialect",
    )
    path = tmp_path / "plan.json"
    path.write_text(warned.model_dump_json())
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(path), "--dry-run"], stdout=out, stderr=err) == EXIT_OK
    assert "speculative_counters_missing" in err.getvalue()
    for dialect in ("auto", "vllm", "sglang", "llamacpp", "trtllm"):
        plan = _plan({"base_url": URL}, {"base_url": other, "dialect": dialect})
        assert _dialect_warnings(plan) == (), dialect
