"""Plan values that used to crash or hang a run give one clear line each.

Deeply nested TOML (``RecursionError`` from ``tomllib``), a seed past 64 bits
(every request refused by the server), a key holding CR/LF (an error message
broken over lines), an invalid IDNA host (``idna.IDNAError`` with no context) and
a near-zero arrival rate (a run that never ends).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deepseekbench import BenchmarkPlan, PlanError
from deepseekbench._plan._workload import MAX_CONTEXT_TOKENS

EXAMPLE = (Path(__file__).resolve().parents[2] / "docs" / "examples" / "plan.toml").read_text()


def _load(tmp_path: Path, text: str) -> str:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    with pytest.raises(PlanError) as info:
        BenchmarkPlan.load(path)
    return str(info.value)


def _problem_lines(message: str) -> list[str]:
    """The lines after the header (``plan: invalid plan (n errors):``)."""
    return [line for line in message.splitlines()[1:] if line.strip()]


def test_the_example_plan_loads() -> None:
    assert BenchmarkPlan.from_toml(EXAMPLE).arrival.rate_per_s == 8.0


@pytest.mark.parametrize("opening,closing", [("[", "]"), ("{a=", "}")])
def test_deeply_nested_toml_is_one_line(tmp_path: Path, opening: str, closing: str) -> None:
    text = "x = " + opening * 5000 + "1" + closing * 5000 + "\n" + EXAMPLE
    message = _load(tmp_path, text)
    assert "\n" not in message
    assert "nested too deeply" in message


@pytest.mark.parametrize(
    "old,new,field",
    [
        ("seed = 7", "seed = 18446744073709551616", "arrival.seed"),
        ("seed = 7", "seed = -1", "arrival.seed"),
        ("seed = 1234", "seed = 18446744073709551616", "parity.seed"),
        ('model = "', 'seed = 18446744073709551616\nmodel = "', "seed"),
    ],
)
def test_a_seed_outside_64_bits_is_one_line(tmp_path: Path, old: str, new: str, field: str) -> None:
    assert old in EXAMPLE
    lines = _problem_lines(_load(tmp_path, EXAMPLE.replace(old, new, 1)))
    assert len(lines) == 1 and lines[0].strip().startswith(f"{field}:"), lines


def test_a_key_with_cr_lf_stays_on_one_line(tmp_path: Path) -> None:
    lines = _problem_lines(_load(tmp_path, '"a\\r\\nb" = 1\n' + EXAMPLE))
    assert lines == ["  a\\r\\nb: unknown field"]


@pytest.mark.parametrize("host", ["xn--zz.invalid", "xn--.com", "xn--ls8h.la"])
def test_an_invalid_idna_host_is_one_line_naming_the_field(tmp_path: Path, host: str) -> None:
    old = "http://127.0.0.1:8003/v1"
    lines = _problem_lines(_load(tmp_path, EXAMPLE.replace(old, f"http://{host}/v1")))
    assert len(lines) == 1
    assert "routes[2].base_url" in lines[0] and "not valid IDNA" in lines[0], lines


@pytest.mark.parametrize("rate", ["1e-300", "0.0009", "[8.0, 1e-9]"])
def test_a_near_zero_arrival_rate_is_refused(tmp_path: Path, rate: str) -> None:
    lines = _problem_lines(
        _load(tmp_path, EXAMPLE.replace("rate_per_s = 8.0", f"rate_per_s = {rate}"))
    )
    assert len(lines) == 1 and "below 0.001 requests/s" in lines[0], lines


def test_the_slowest_allowed_rate_loads() -> None:
    plan = BenchmarkPlan.from_toml(EXAMPLE.replace("rate_per_s = 8.0", "rate_per_s = 0.001"))
    assert plan.arrival.rate_per_s == 0.001


@pytest.mark.parametrize("depth", [100, 300, 450])
def test_deep_values_inside_the_plan_are_one_line(tmp_path: Path, depth: int) -> None:
    nested = "[" * depth + "]" * depth
    text = EXAMPLE.replace(
        'dialect = "vllm"\n', f'dialect = "vllm"\nrequest_extras = {{x = {nested}}}\n', 1
    )
    message = _load(tmp_path, text)
    assert "\n" not in message
    assert "routes[0].request_extras.x..." in message and "more than 64 levels deep" in message


def test_values_64_levels_deep_load() -> None:
    nested = "[" * 60 + "]" * 60
    text = EXAMPLE.replace(
        'dialect = "vllm"\n', f'dialect = "vllm"\nrequest_extras = {{x = {nested}}}\n', 1
    )
    assert BenchmarkPlan.from_toml(text).routes[0].request_extras is not None


@pytest.mark.parametrize("value", ["1000000000000", str(MAX_CONTEXT_TOKENS + 1)])
def test_a_parity_max_tokens_past_the_max_context_is_one_line(tmp_path: Path, value: str) -> None:
    assert "max_tokens = 96" in EXAMPLE
    text = EXAMPLE.replace("max_tokens = 96", f"max_tokens = {value}", 1)
    lines = _problem_lines(_load(tmp_path, text))
    assert len(lines) == 1 and lines[0].strip().startswith("parity.max_tokens:"), lines
    assert str(MAX_CONTEXT_TOKENS) in lines[0]
