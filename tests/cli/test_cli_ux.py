"""CLI details a new user meets first: ``--version``, a dry run's
formats."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

import deepseekbench
from deepseekbench._cli._exits import EXIT_GATE, EXIT_OK
from deepseekbench._cli._main import main, package_version

ROOT = Path(__file__).resolve().parents[2]


def test_version_prints_the_package_version() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["--version"], stdout=out, stderr=err) == EXIT_OK
    want = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert out.getvalue() == f"deepseekbench {want}\n" and err.getvalue() == ""
    assert deepseekbench.__version__ == want == package_version()
    with contextlib.suppress(PackageNotFoundError):  # installed: the metadata is the source
        assert package_version() == version("deepseekbench")


def test_version_from_a_shell() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "deepseekbench", "--version"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("deepseekbench "), proc.stderr


def test_dry_run_format_html_prints_a_page_not_text(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'model = "m"\n'
        '[[routes]]\nlabel = "off"\nspeculative = "off"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[routes]]\nlabel = "mtp"\nspeculative = "mtp"\nbase_url = "http://127.0.0.1:8/v1"\n'
    )
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(plan), "--dry-run", "--format", "html"], stdout=out, stderr=err) == 0
    page = out.getvalue()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<th>route</th>" in page and "<td>off</td>" in page and "<td>admitted</td>" in page
    assert "<td>mtp</td>" in page and "no connection opened" in page
    text = io.StringIO()
    assert main(["run", str(plan), "--dry-run"], stdout=text, stderr=io.StringIO()) == 0
    assert "<" not in text.getvalue() and "admitted" in text.getvalue()


def _remote_plan(tmp_path: Path) -> Path:
    plan = tmp_path / "remote.toml"
    plan.write_text(
        'model = "m"\n'
        '[[routes]]\nlabel = "off"\nspeculative = "off"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[routes]]\nlabel = "paid-mtp"\nspeculative = "mtp"\n'
        'base_url = "https://api.example.com/v1"\n'
    )
    return plan


def test_the_gate_refusal_names_the_route_host_and_how_to_give_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    def connect(self: socket.socket, address: object) -> None:
        raise AssertionError(f"a connection was attempted: {address!r}")

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.delenv("DEEPSEEKBENCH_API_KEY", raising=False)
    monkeypatch.delenv("DEEPSEEKBENCH_SPEND", raising=False)
    plan = _remote_plan(tmp_path)
    err = io.StringIO()
    assert main(["run", str(plan), "--no-probe"], stdout=io.StringIO(), stderr=err) == EXIT_GATE
    message = err.getvalue()
    assert "route 'paid-mtp'" in message and "'api.example.com'" in message, message
    assert "DEEPSEEKBENCH_API_KEY" in message and "api_key_env" in message
    assert "--spend" in message
    key = "sk-test-" + "x" * 24  # with a key, only --spend is missing; the key is never shown
    monkeypatch.setenv("DEEPSEEKBENCH_API_KEY", key)
    err = io.StringIO()
    assert main(["run", str(plan), "--no-probe"], stdout=io.StringIO(), stderr=err) == EXIT_GATE
    assert "route 'paid-mtp'" in err.getvalue() and "--spend" in err.getvalue()
    assert key not in err.getvalue() and "DEEPSEEKBENCH_API_KEY" not in err.getvalue()
    dry = io.StringIO()
    monkeypatch.delenv("DEEPSEEKBENCH_API_KEY")
    main(["run", str(plan), "--dry-run"], stdout=io.StringIO(), stderr=dry)
    assert "route paid-mtp: gate would refuse" in dry.getvalue()
    assert "DEEPSEEKBENCH_API_KEY" in dry.getvalue()


@pytest.mark.parametrize("rate", ['["inf"]', "inf", '"inf"', "[2, nan]", '["fast"]'])
def test_a_rate_that_is_not_a_finite_number_is_one_plain_line(tmp_path: Path, rate: str) -> None:
    plan = tmp_path / "rate.toml"
    plan.write_text(
        'model = "m"\n'
        '[[routes]]\nlabel = "off"\nspeculative = "off"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[routes]]\nlabel = "mtp"\nspeculative = "mtp"\nbase_url = "http://127.0.0.1:8/v1"\n'
        f'[arrival]\nmode = "rate"\nrate_per_s = {rate}\n'
    )
    err = io.StringIO()
    assert main(["run", str(plan), "--dry-run"], stdout=io.StringIO(), stderr=err) == 2
    lines = err.getvalue().splitlines()
    assert lines[0].endswith("invalid plan (1 error):"), lines
    assert lines[1].startswith("  arrival.rate_per_s: must be a finite number of requests/s")
    assert 'mode = "concurrency"' in lines[1] and len(lines) == 2
    assert "constrained" not in err.getvalue() and "tuple[" not in err.getvalue()


def test_finite_rates_still_sweep(tmp_path: Path) -> None:
    plan = tmp_path / "rate.toml"
    plan.write_text(
        'model = "m"\n'
        '[[routes]]\nlabel = "off"\nspeculative = "off"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[routes]]\nlabel = "mtp"\nspeculative = "mtp"\nbase_url = "http://127.0.0.1:8/v1"\n'
        '[arrival]\nmode = "rate"\nrate_per_s = [2, 8.5]\n'
    )
    err = io.StringIO()
    assert main(["run", str(plan), "--dry-run"], stdout=io.StringIO(), stderr=err) == 0
    assert "2, 8.5" in err.getvalue() or "8.5" in err.getvalue()


def test_demo_coverage_hint_names_the_demos_own_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``demo --requests 16`` leaves items unsent: the hint names ``--requests`` (the
    demo's flag), not the plan key ``requests_per_cell`` it has no way to set."""
    import deepseekbench._runner._run as runner
    from deepseekbench._plan._plan import BenchmarkPlan

    async def starts_then_stops(plan: BenchmarkPlan, **_: object) -> None:
        plan.validate_sources()  # where a run warns about coverage
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_plan", starts_then_stops)
    err = io.StringIO()
    args = ["demo", "--requests", "16", "--results", str(tmp_path / "d.jsonl")]
    assert main(args, stdout=io.StringIO(), stderr=err) == 130
    warned = [line for line in err.getvalue().splitlines() if "warning:" in line]
    assert warned == [
        "deepseekbench: warning: 8 items, 6 will be sent (16 requests per cell over 3 "
        "rounds): raise --requests to 24, or keep fewer items"
    ]
    assert "a demo is not resumed" in err.getvalue()  # its plan hashes its engines' ports


def test_demo_help_names_the_routes_the_numerics_scenario_runs() -> None:
    """``--numerics``'s help names each route label its plan runs (``mtp-relaxed``, not
    the main scenario's mis-tuned mtp)."""
    from deepseekbench._cli._demo import _numerics_plan

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["demo", "--help"]) == EXIT_OK
    help_text = " ".join(out.getvalue().split())
    numerics = help_text[help_text.index("--numerics the") : help_text.index("--sampling the")]
    urls = [f"http://127.0.0.1:{port}/v1" for port in (1, 2, 3)]
    labels = [r.label for r in _numerics_plan(urls, "bit_exact").routes]
    assert labels == ["off", "mtp", "mtp-relaxed"]
    assert all(label in numerics for label in labels) and "mis-tuned" not in numerics
