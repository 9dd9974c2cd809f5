"""Tests hold on a busy machine: no Hypothesis deadline anywhere in the suite.

A property's speed is not what it checks; a shared CI box paused one example for a
second (against Hypothesis's default 200 ms deadline). tests/conftest.py loads the
``deepseekbench`` settings profile (``deadline=None``), and no test sets one back.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

TESTS = Path(__file__).parent
SLOW_EXAMPLE_S = 0.3
"""Longer than Hypothesis's default deadline (200 ms, 250 ms with its grace)."""


def test_the_suite_profile_has_no_deadline() -> None:
    profile = settings.get_profile("deepseekbench")
    assert settings.default == profile and profile.deadline is None and profile.print_blob
    assert settings(max_examples=3).deadline is None  # a test's own settings inherit it


@settings(max_examples=2, database=None)
@given(st.integers())
def test_a_slow_example_is_not_a_failure(n: int) -> None:
    """Stands for an example a busy machine pauses: slow, and still a pass."""
    time.sleep(SLOW_EXAMPLE_S)
    assert isinstance(n, int)


def test_no_test_sets_a_deadline_back() -> None:
    pattern = re.compile(r"deadline\s*=\s*(?!None\b)[\w.(]")
    offenders = [
        f"{path.relative_to(TESTS)}:{i}"
        for path in sorted(TESTS.rglob("*.py"))
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "settings" in line and pattern.search(line)
    ]
    assert offenders == []
