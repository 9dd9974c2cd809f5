"""Issue 10, items 14-15: bad input gets a one-line error naming the file or field (exit 2)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from deepseekbench import BenchmarkPlan, EngineRoute, PlanError
from deepseekbench._cli import EXIT_USAGE, main

ROUTES_TOML = """
[[routes]]
label = "off"
speculative = "off"
base_url = "{off}"

[[routes]]
label = "mtp"
speculative = "mtp"
base_url = "http://127.0.0.1:9/v1"
"""


def _toml(
    tmp_path: Path, head: str = "", off: str = "http://127.0.0.1:8/v1", tail: str = ""
) -> Path:
    p = tmp_path / "plan.toml"
    p.write_text(f'model = "m"\n{head}\n' + ROUTES_TOML.format(off=off) + tail, encoding="utf-8")
    return p


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", *args], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


# -- item 14: non-finite numbers ------------------------------------------------------
@pytest.mark.parametrize(
    ("head", "tail", "field"),
    [
        ("timeout_s = inf", "", "timeout_s"),
        ("", '[arrival]\nmode = "rate"\nrate_per_s = inf\n', "arrival.rate_per_s"),
        ("", '[arrival]\ndistribution = "gamma"\ngamma_shape = inf\n', "arrival.gamma_shape"),
        ("timeout_s = -inf", "", "timeout_s"),
        ("temperature = nan", "", "temperature"),
    ],
)
def test_non_finite_numbers_are_refused_at_load(
    tmp_path: Path, head: str, tail: str, field: str
) -> None:
    p = _toml(tmp_path, head=head, tail=tail)
    with pytest.raises(PlanError) as info:
        BenchmarkPlan.load(p)
    assert f"{field}" in str(info.value) and str(p) in str(info.value)
    assert "finite" in str(info.value) or "nan" in str(info.value)
    code, _, err = _run(str(p), "--dry-run")
    assert code == EXIT_USAGE and f"{field}" in err and "Traceback" not in err


def test_non_finite_request_extras_are_refused(tmp_path: Path) -> None:
    p = _toml(tmp_path, tail="[routes.request_extras]\ntop_p = inf\n")
    with pytest.raises(
        PlanError, match=r"routes\[1\]\.request_extras \(route 'mtp'\): .*non-finite"
    ):
        BenchmarkPlan.load(p)


# -- item 15: non-UTF-8 files, unparseable base URL, out-of-range port -----------------
def test_non_utf8_plan_is_one_line_naming_the_file(tmp_path: Path) -> None:
    p = tmp_path / "plan.toml"
    p.write_bytes(b'model = "m\xff\xfe"\n')
    code, out, err = _run(str(p))
    assert code == EXIT_USAGE and out == ""
    assert err.count("\n") == 1 and str(p) in err and "UTF-8" in err


@pytest.mark.parametrize("which", ["prompts", "tasks"])
def test_non_utf8_prompts_or_tasks_file_is_one_line_naming_the_file(
    tmp_path: Path, which: str
) -> None:
    bad = tmp_path / f"{which}.jsonl"
    bad.write_bytes(b'{"prompt": "caf\xe9"}\n')
    tail = (
        '[workload]\nprompts_file = "prompts.jsonl"\n'
        if which == "prompts"
        else '[parity]\ntasks = "tasks.jsonl"\n'
    )
    p = _toml(tmp_path, tail=tail)
    for args in ((str(p), "--dry-run"), (str(p), "--results", str(tmp_path / "r.jsonl"))):
        code, out, err = _run(*args)
        assert code == EXIT_USAGE and out == "", err
        errors = [ln for ln in err.splitlines() if ln.startswith("deepseekbench:")]
        assert len(errors) == 1 and str(bad) in errors[0] and "UTF-8" in errors[0], err
        assert "Traceback" not in err
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://[::1:8000/v1", "cannot parse"),
        ("http://127.0.0.1:99999/v1", "outside 1..65535"),
        ("http://127.0.0.1:0/v1", "outside 1..65535"),
    ],
)
def test_bad_base_url_names_the_field(tmp_path: Path, url: str, problem: str) -> None:
    p = tmp_path / "plan.json"
    p.write_text(
        json.dumps(
            {
                "model": "m",
                "routes": [
                    {"label": "off", "speculative": "off", "base_url": url},
                    {"label": "mtp", "speculative": "mtp", "base_url": "http://127.0.0.1:9/v1"},
                ],
            }
        ),
        encoding="utf-8",
    )
    code, out, err = _run(str(p))
    assert code == EXIT_USAGE and out == "" and "Traceback" not in err
    line = next(ln for ln in err.splitlines() if "routes[0].base_url" in ln)
    assert problem.split()[-1] in line
    with pytest.raises(ValueError, match="base_url"):
        EngineRoute(base_url=url, model="m")
