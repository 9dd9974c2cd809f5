"""compare_speedup with arguments of the wrong type: a TypeError naming the argument and
what it accepts, not an AttributeError from deep inside the verdict."""

from __future__ import annotations

from typing import Any

import pytest

from deepseekbench import compare_speedup
from tests.test_foundation import make_row


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("off", "mtp"), {}, r"baseline must be a Row .* not str 'off'"),
        ((make_row(), None), {}, r"candidate must be a Row .* not None"),
        ((make_row(), {"speculative": "mtp"}), {}, r"candidate must be a Row .* not dict"),
        ((make_row(), make_row()), {"result": "x"}, r"result must be the RunResult .* not str"),
    ],
)
def test_wrong_argument_types_name_the_argument(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=rf"compare_speedup: {message}"):
        compare_speedup(*args, **kwargs)
