"""Shared fixtures of the embedded-engine tests: both anyio backends."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each ``pytest.mark.anyio`` test under asyncio and under trio."""
    return str(request.param)
