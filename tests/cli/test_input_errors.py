"""One-line input errors: bad input gets a one-line error naming the file or field (exit 2)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from deepseekbench import BenchmarkPlan, EngineRoute, KeyFormatError, LiveGate, PlanError
from deepseekbench._cli._exits import EXIT_USAGE
from deepseekbench._cli._main import main

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


# -- tracebacks turned into one line and exit 2: a symlink loop, a key a header cannot
# carry, a host that is not valid IDNA ------------------------------------------------
@pytest.mark.parametrize("command", ["run", "demo"])
def test_a_symlink_loop_as_results_is_one_line_exit_2(tmp_path: Path, command: str) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    results = str(tmp_path / "a" / "r.jsonl")
    args = [command, *([str(_toml(tmp_path))] if command == "run" else [])]
    out, err = io.StringIO(), io.StringIO()
    code = main([*args, "--results", results], stdout=out, stderr=err)
    assert code == EXIT_USAGE and "Traceback" not in err.getvalue(), err.getvalue()
    assert "cannot be resolved" in err.getvalue() and "ymlink loop" in err.getvalue()


KEYS = [
    pytest.param("sk-crlf\r\nX-Injected: 1", "line break", id="crlf"),
    pytest.param("sk-lf\nsecond-line", "line break", id="lf"),
    pytest.param("sk-nul\x00tail", "control character", id="nul"),
    pytest.param("sk-ключ-0042", "non-ASCII", id="non-ascii"),
    pytest.param("sk-two words", "whitespace", id="space"),
]


@pytest.mark.parametrize(("key", "kind"), KEYS)
def test_a_key_a_header_cannot_carry_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, kind: str
) -> None:
    """The gate's key (dry run: the old gate admitted it, exit 0) and a route's key
    (a run: the old client raised UnicodeEncodeError mid-send, exit 1)."""
    if "\x00" in key:  # an environment variable cannot hold NUL: the library's door only
        with pytest.raises(KeyFormatError, match=kind):
            LiveGate(api_key=key)
        return
    monkeypatch.setenv("DEEPSEEKBENCH_API_KEY", key)
    code, out, err = _run(str(_toml(tmp_path)), "--dry-run")
    assert code == EXIT_USAGE and out == "" and "Traceback" not in err, err
    assert "DEEPSEEKBENCH_API_KEY" in err and kind in err and key not in err
    monkeypatch.delenv("DEEPSEEKBENCH_API_KEY")
    monkeypatch.setenv("ROUTE_KEY", key)
    plan = _toml(tmp_path)
    plan.write_text(
        plan.read_text() + '\n[[routes]]\nlabel = "eagle"\nspeculative = "eagle3"\n'
        'base_url = "http://127.0.0.1:7/v1"\napi_key_env = "ROUTE_KEY"\n',
        encoding="utf-8",
    )
    code, out, err = _run(str(plan), "--no-probe", "--results", str(tmp_path / "r.jsonl"))
    assert code == EXIT_USAGE and "Traceback" not in err, err
    assert "route 'eagle': api_key_env ROUTE_KEY" in err and kind in err and key not in err
    assert not (tmp_path / "r.jsonl").exists()
    with pytest.raises(ValueError, match=kind):
        EngineRoute(base_url="http://127.0.0.1:7/v1", model="m", api_key=key)


def test_a_host_that_is_not_valid_idna_is_one_line_exit_2(tmp_path: Path) -> None:
    """``http://xn--/v1`` as a base URL and ``xn--`` as a Ray address (the old gate
    raised idna's IDNAError for both); the gate itself refuses such a URL."""
    code, _, err = _run(str(_toml(tmp_path, off="http://xn--/v1")), "--dry-run")
    assert code == EXIT_USAGE and "Traceback" not in err and "IDNA" in err, err
    code, _, err = _run(
        str(_toml(tmp_path)), "--executor", "ray", "--ray-address", "xn--:6379", "--dry-run"
    )
    assert code == EXIT_USAGE and "Traceback" not in err and "xn--:6379" in err, err
    refusal = LiveGate(api_key="k", spend=True).refusal("http://xn--/v1")
    assert refusal is not None and "valid IDNA" in str(refusal)


# -- serve: a bad or busy port is a usage error, not a traceback ----------------------
def _serve(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    code = main(["serve", *args], stdout=io.StringIO(), stderr=err)
    return code, err.getvalue()


@pytest.mark.parametrize("port", ["80000", "-5", "65536"])
def test_serve_out_of_range_port_is_a_one_line_usage_error(port: str) -> None:
    code, err = _serve("--port", port)
    assert code == EXIT_USAGE
    assert err == f"deepseekbench: serve --port {port} is not a TCP port (0-65535)\n"


def test_serve_busy_port_is_a_one_line_usage_error() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, err = _serve("--port", str(port))
    assert code == EXIT_USAGE
    assert err.startswith(f"deepseekbench: serve cannot listen on 127.0.0.1:{port}: ")
    assert err.count("\n") == 1 and "Traceback" not in err
