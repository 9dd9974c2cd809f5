"""BenchmarkPlan: loading, validation, arrivals, hashing."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from deepseekbench import (
    ArrivalPlan,
    BenchmarkPlan,
    CellPlan,
    LiveGate,
    PlanError,
    Speculative,
    dry_run,
    smoke_tasks,
)
from deepseekbench._cli._main import main
from deepseekbench._net._route_plan import engine_route
from deepseekbench._plan._messages import validation_error_lines

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "plan.toml"


def minimal(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "model": "m",
        "routes": [
            {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:1/v1"},
            {"label": "mtp", "speculative": "mtp", "base_url": "http://127.0.0.1:2/v1"},
        ],
    }
    data.update(over)
    return data


def test_example_plan_loads() -> None:
    plan = BenchmarkPlan.load(EXAMPLE)
    assert plan.off_route.label == "off"
    assert [r.speculative for r in plan.speculative_routes] == [Speculative.mtp] * 2
    assert plan.arrival.mode == "rate" and plan.arrival.distribution == "poisson"
    assert plan.results_path() == EXAMPLE.parent / "plan-results.jsonl"
    assert plan.tasks() == smoke_tasks()
    with warnings.catch_warnings():  # the shipped example does not warn about itself
        warnings.simplefilter("error")
        sources = plan.validate_sources()
    assert sources.coverage is not None
    assert sources.coverage.complete and sources.coverage.n_sent == 16
    assert plan.cells[0].cell_id == "1k/256/non_think"


def test_example_plan_dry_run_prints_no_warning() -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", str(EXAMPLE), "--dry-run"], stdout=out, stderr=err)
    assert code == 0 and "warning" not in out.getvalue() + err.getvalue()


def test_json_plan_and_defaults(tmp_path: Path) -> None:
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(minimal()), encoding="utf-8")
    plan = BenchmarkPlan.load(p)
    assert plan.cells == (CellPlan(),) and plan.requests_per_cell == 8
    assert plan.arrival.offsets_s(3) is None  # closed loop by default


@pytest.mark.parametrize(
    "over,needle",
    [
        ({"bogus": 1}, "bogus"),
        (
            {
                "routes": [
                    {"label": "a", "speculative": "off", "base_url": "http://127.0.0.1:1/v1"},
                    {"label": "b", "speculative": "off", "base_url": "http://127.0.0.1:2/v1"},
                ]
            },
            "exactly one",
        ),
        (
            {
                "routes": [
                    {"label": "a", "speculative": "off", "base_url": "http://127.0.0.1:1/v1"},
                    {"label": "a", "speculative": "mtp", "base_url": "http://127.0.0.1:2/v1"},
                ]
            },
            "unique",
        ),
        ({"cells": [{"context_bucket": "2k"}]}, "'1k', '8k'"),
        ({"cells": [{"output_target": "256", "max_tokens": 300}]}, "exceeds"),
        ({"cells": [{}, {}]}, "unique"),
        ({"arrival": {"mode": "rate"}}, "rate_per_s"),
        ({"arrival": {"concurrency": []}}, "at least one"),
        ({"arrival": {"concurrency": [1, 4, 4]}}, "unique"),
        ({"arrival": {"concurrency": [1, 5000]}}, "4096"),
        ({"arrival": {"mode": "rate", "rate_per_s": [2, 0]}}, "greater than 0"),
        ({"arrival": {"mode": "rate", "rate_per_s": 2, "concurrency": [1, 2]}}, "one in-flight"),
        ({"repeats": 0}, "repeats"),
        ({"slo": {"tpot_ms": 0}}, "slo.tpot_ms"),
        ({"slo": {"itl_ms": 5}}, "unknown field"),
        ({"requests_per_cell": 0}, "requests_per_cell"),
        (
            {
                "routes": [
                    {"label": "off", "speculative": "off", "base_url": "ftp://x/v1"},
                    {"label": "b", "speculative": "mtp", "base_url": "http://127.0.0.1:2/v1"},
                ]
            },
            "http",
        ),
    ],
)
def test_invalid_plans_fail_before_any_request(over: dict[str, Any], needle: str) -> None:
    with pytest.raises(PlanError, match=needle):
        BenchmarkPlan.from_mapping(minimal(**over))
    with pytest.raises(ValidationError):
        BenchmarkPlan.model_validate(minimal(**over))


def test_plan_errors_are_one_line_each_without_a_spurious_count_error() -> None:
    routes = [
        {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:1/v1"},
        {"label": "a", "speculative": "medusa", "base_url": "http://127.0.0.1:2/v1"},
        {"label": "b", "speculative": "medusa", "base_url": "http://127.0.0.1:3/v1"},
    ]
    with pytest.raises(ValidationError) as info:
        BenchmarkPlan.model_validate(minimal(routes=routes))
    # Before: a third "Tuple should have at least 2 items after validation" error.
    assert [e["loc"] for e in info.value.errors()] == [
        ("routes", 1, "speculative"),
        ("routes", 2, "speculative"),
    ]
    with pytest.raises(PlanError) as plan_info:
        BenchmarkPlan.from_mapping(minimal(routes=routes, cels=[], parity={"task_mode": "x"}))
    message = str(plan_info.value)
    assert "https://" not in message
    # the same problem in two routes is one line naming both (fresh-user trial)
    assert message.splitlines() == [
        "invalid plan (3 errors):",
        "  routes[1,2].speculative (routes 'a', 'b'): 'medusa' is not a valid Speculative; "
        "allowed: 'off', 'mtp', 'dspark', 'eagle3', 'draft', 'ngram'",
        "  parity.task_mode: 'x' is not allowed; allowed: 'strict' or 'lenient'",
        "  cels: unknown field; did you mean 'cells'?",
    ]


def test_distinct_problems_stay_apart_and_each_names_its_routes() -> None:
    routes = [
        {
            "label": "off",
            "speculative": "off",
            "base_url": "http://127.0.0.1:1/v1",
            "dialect": "vlm",
        },
        {
            "label": "a",
            "speculative": "medusa",
            "base_url": "http://127.0.0.1:2/v1",
            "dialect": "vlm",
        },
        {"label": "b", "speculative": "mpt", "base_url": "http://127.0.0.1:3/v1", "dialect": "vlm"},
        {"label": "c", "speculative": "medusa", "base_url": "http://127.0.0.1:4/v1"},
    ]
    with pytest.raises(PlanError) as info:
        BenchmarkPlan.from_mapping(minimal(routes=routes))
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid plan (3 errors):"
    assert lines[1].startswith("  routes[0,1,2].dialect (routes 'off', 'a', 'b'): 'vlm' is not")
    assert lines[2].startswith("  routes[1,3].speculative (routes 'a', 'c'): 'medusa' is not")
    assert lines[3].startswith("  routes[2].speculative (route 'b'): 'mpt' is not")
    # without the raw plan (a ValidationError from direct construction) no labels, same grouping
    with pytest.raises(ValidationError) as direct:
        BenchmarkPlan.model_validate(minimal(routes=routes))
    bare = validation_error_lines(direct.value, BenchmarkPlan)
    assert bare[0].startswith("routes[0,1,2].dialect: 'vlm' is not a valid Dialect")
    assert len(bare) == 3


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        (
            {"routes": [{"label": "off", "speculative": "off", "base_url": "http://h/v1"}]},
            "2 routes",
        ),
        ({"cells": []}, "1 cell"),
    ],
)
def test_route_and_cell_counts_are_still_enforced(over: dict[str, Any], needle: str) -> None:
    with pytest.raises(PlanError, match=needle):
        BenchmarkPlan.from_mapping(minimal(**over))


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="TOML"):
        BenchmarkPlan.from_toml("model = ")
    with pytest.raises(PlanError, match="object"):
        BenchmarkPlan.from_json("[1]")
    y = tmp_path / "plan.yaml"
    y.write_text("model: m", encoding="utf-8")
    with pytest.raises(PlanError, match=r"toml or \.json"):
        BenchmarkPlan.load(y)
    with pytest.raises(PlanError, match="cannot read"):
        BenchmarkPlan.load(tmp_path / "absent.toml")


def test_task_and_prompt_files_resolve_against_the_plan(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text(
        '{"id": "a", "prompt": "p", "grader": "exact", "expected": "x"}\n', encoding="utf-8"
    )
    (tmp_path / "w.jsonl").write_text('{"prompt": "hello"}\n', encoding="utf-8")
    data = minimal(parity={"tasks": "t.jsonl"}, workload={"prompts_file": "w.jsonl"})
    (tmp_path / "plan.json").write_text(json.dumps(data), encoding="utf-8")
    plan = BenchmarkPlan.load(tmp_path / "plan.json")
    assert [t.id for t in plan.tasks()] == ["a"]
    assert plan.workload_prompts() == ("hello",)
    broken = BenchmarkPlan.from_mapping(
        minimal(parity={"tasks": "missing.jsonl"}), base_dir=tmp_path
    )
    with pytest.raises(PlanError):
        broken.validate_sources()
    empty = BenchmarkPlan.from_mapping(minimal(parity={"tasks": "none"}))
    with pytest.raises(PlanError, match="no parity prompts"):
        empty.validate_sources()


def test_api_key_comes_from_the_environment_and_never_shows() -> None:
    plan = BenchmarkPlan.from_mapping(
        minimal(
            routes=[
                {
                    "label": "off",
                    "speculative": "off",
                    "base_url": "https://api.example.com/v1",
                    "api_key_env": "MY_KEY",
                },
                {"label": "mtp", "speculative": "mtp", "base_url": "http://127.0.0.1:2/v1"},
            ]
        )
    )
    with pytest.raises(PlanError, match="MY_KEY"):
        engine_route(plan.off_route, "m", environ={})
    route = engine_route(plan.off_route, "m", environ={"MY_KEY": "sk-secret-123"})
    assert route.has_api_key
    assert "sk-secret-123" not in repr(route) + repr(plan) + plan.model_dump_json()


def test_poisson_and_gamma_arrivals_are_seeded_with_the_right_mean() -> None:
    poisson = ArrivalPlan(mode="rate", rate_per_s=10.0, seed=3)
    a, b = poisson.offsets_s(2000), poisson.offsets_s(2000)
    assert a == b and a is not None and a[0] == 0.0
    assert np.mean(np.diff(a)) == pytest.approx(0.1, rel=0.1)
    assert poisson.offsets_s(50, salt=1) != poisson.offsets_s(50, salt=2)
    gamma = ArrivalPlan(mode="rate", rate_per_s=10.0, distribution="gamma", gamma_shape=0.5)
    g = gamma.offsets_s(4000)
    assert g is not None
    gaps = np.diff(g)
    assert np.mean(gaps) == pytest.approx(0.1, rel=0.1)
    # shape 0.5 is burstier than Poisson: coefficient of variation sqrt(1/k) ≈ 1.41
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(2**0.5, rel=0.15)


def test_plan_hash_tracks_content_not_the_results_path() -> None:
    p1 = BenchmarkPlan.from_mapping(minimal(results="a.jsonl"))
    p2 = BenchmarkPlan.from_mapping(minimal(results="b.jsonl"))
    p3 = BenchmarkPlan.from_mapping(minimal(requests_per_cell=9))
    assert p1.plan_hash() == p2.plan_hash() != p3.plan_hash()


# --- model capability probe at plan validation ---------------------------
def _hf_model(tmp_path: Path, depth: int | None) -> Path:
    folder = tmp_path / f"ckpt-{depth}"
    folder.mkdir()
    cfg: dict[str, Any] = {"model_type": "deepseek_v3"}
    if depth is not None:
        cfg["num_nextn_predict_layers"] = depth
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize("depth", [None, 0])
def test_mtp_on_a_depth_zero_model_is_refused_before_any_request(
    tmp_path: Path, depth: int | None
) -> None:
    model = _hf_model(tmp_path, depth)
    plan = BenchmarkPlan.from_mapping(minimal(model_source=model.name), base_dir=tmp_path)
    with pytest.raises(PlanError, match=r"speculative=mtp.*depth 0"):
        plan.validate_sources()
    # the dry run refuses it too, before any connection
    with pytest.raises(PlanError):
        dry_run(plan, gate=LiveGate())


def test_mtp_on_a_model_with_nextn_layers_is_accepted_and_recorded(tmp_path: Path) -> None:
    model = _hf_model(tmp_path, 1)
    plan = BenchmarkPlan.from_mapping(minimal(model_source=model.name), base_dir=tmp_path)
    cap = plan.validate_sources().capability
    assert cap is not None and cap.mtp_depth == 1 and cap.supports_mtp
    assert plan.model_capability() == cap


def test_depth_zero_model_is_fine_without_an_mtp_route(tmp_path: Path) -> None:
    model = _hf_model(tmp_path, 0)
    routes = [
        {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:1/v1"},
        {"label": "ng", "speculative": "ngram", "base_url": "http://127.0.0.1:2/v1"},
    ]
    plan = BenchmarkPlan.from_mapping(
        minimal(model_source=model.name, routes=routes), base_dir=tmp_path
    )
    plan.validate_sources()


def test_unreadable_model_source_is_a_plan_error(tmp_path: Path) -> None:
    plan = BenchmarkPlan.from_mapping(minimal(model_source="missing.gguf"), base_dir=tmp_path)
    with pytest.raises(PlanError, match="cannot probe model_source"):
        plan.validate_sources()


@pytest.mark.parametrize("nextn", [None, 1])
def test_gguf_model_source(tmp_path: Path, nextn: int | None) -> None:
    from tests.plan.test_capability import _tiny_gguf

    path = _tiny_gguf(tmp_path / "m.gguf", nextn)
    plan = BenchmarkPlan.from_mapping(minimal(model_source=path.name), base_dir=tmp_path)
    if nextn:
        plan.validate_sources()
        cap = plan.model_capability()
        assert cap is not None and cap.mtp_depth == nextn
    else:
        with pytest.raises(PlanError, match="depth 0"):
            plan.validate_sources()


def test_route_extras_that_the_route_owns_fail_at_plan_load() -> None:
    routes = minimal()["routes"]
    routes[1]["request_extras"] = {"model": "other", "return_meta_info": True}
    with pytest.raises(PlanError, match=r"routes\[1\]\.request_extras.*'model'"):
        BenchmarkPlan.from_mapping(minimal(routes=routes))


def test_load_sweeps_list_one_load_point_per_value() -> None:
    from deepseekbench import Arrival, LoadPoint

    closed = BenchmarkPlan.from_toml(
        'model = "m"\n'
        "[[routes]]\n"
        'label = "off"\nspeculative = "off"\nbase_url = "http://127.0.0.1:1/v1"\n'
        "[[routes]]\n"
        'label = "mtp"\nspeculative = "mtp"\nbase_url = "http://127.0.0.1:2/v1"\n'
        "[arrival]\nconcurrency = [1, 4, 16, 64]\n"
    )
    assert [p.concurrency for p in closed.load_points] == [1, 4, 16, 64]
    assert {p.arrival for p in closed.load_points} == {Arrival.closed}
    assert closed.repeats == 3 and closed.rounds == 3
    rate = BenchmarkPlan.from_mapping(
        minimal(arrival={"mode": "rate", "rate_per_s": [2, 8, 32], "distribution": "gamma"})
    )
    assert rate.load_points == (
        LoadPoint(Arrival.gamma, 1, 2.0),
        LoadPoint(Arrival.gamma, 1, 8.0),
        LoadPoint(Arrival.gamma, 1, 32.0),
    )
    assert rate.load_points[0].key == "gamma:r=2:c=1"
    # a scalar plan is one load point, and keeps its old JSON shape
    one = BenchmarkPlan.from_mapping(minimal())
    assert one.load_points == (LoadPoint(Arrival.closed, 1),)
    assert one.model_dump(mode="json")["arrival"]["concurrency"] == 1
    assert BenchmarkPlan.from_mapping(minimal(requests_per_cell=2)).rounds == 2
