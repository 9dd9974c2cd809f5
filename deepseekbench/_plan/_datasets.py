"""Spec-decoding datasets as users have them: SPEED-Bench and MT-bench files.

Both are read from local copies (a path; nothing is downloaded at run time):

* :func:`load_speed_bench`: SPEED-Bench (nvidia/SPEED-Bench, as AIPerf's
  "Profile with SPEED-Bench Dataset" guide documents it): rows of
  ``question_id``, ``category``, ``sub_category``, ``turns`` (a list of user
  turns), ``source``, ``src_id``, ``difficulty``, ``multiturn``, as JSONL (one row a
  line) or a JSON list (a split exported from its parquet files). The
  ``qualitative`` split's ``category`` is one of 11 semantic domains (coding,
  humanities, math, multilingual, qa, rag, reasoning, roleplay, stem,
  summarization, writing); the ``throughput_*`` splits' rows fall in three
  entropy tiers (``low_entropy``, ``mixed``, ``high_entropy``), read from an
  ``entropy_tier`` field when the export has one, else from ``category`` when it
  names a tier. ``by="category"`` groups items by domain, ``by="tier"`` by
  entropy tier; the per-category tables and speedups (``Row.categories``) are
  then per domain or per tier. The public repository ships placeholder prompt
  text until the real prompts are fetched (AIPerf's guide); a row whose turns
  are all that placeholder is refused, never benchmarked.
* :func:`load_mt_bench`: MT-bench / Spec-Bench ``question.jsonl`` (FastChat's
  ``llm_judge`` format: ``question_id``, ``category``, ``turns``, optional
  ``reference``), ids ``mt_bench-<question_id>``.

The samples shipped (``path = "sample"``) are small and written for this project.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import orjson

from deepseekbench._errors import WorkloadFormatError
from deepseekbench._plan._workload import (
    WorkloadItem,
    _category,
    _jsonl_objects,
    _read_text,
    _turns,
    _unique,
    load_spec_bench,
)

__all__ = [
    "ENTROPY_TIERS",
    "dataset_sample_path",
    "load_mt_bench",
    "load_speed_bench",
]

ENTROPY_TIERS = ("low_entropy", "mixed", "high_entropy")
"""SPEED-Bench's throughput entropy tiers, most to least predictable output."""

_PLACEHOLDER_HINT = "placeholder"

_SAMPLES = {"speed_bench": "sample_speed_bench.jsonl", "mt_bench": "sample_mt_bench.jsonl"}


def dataset_sample_path(
    fmt: Literal["speed_bench", "mt_bench"], *, by: Literal["category", "tier"] = "category"
) -> Path:
    """The small sample shipped for ``fmt`` (written for this project); for
    ``speed_bench`` with ``by="tier"`` the throughput-style sample (entropy tiers).

    Raises:
        KeyError: an unknown format.
    """
    from importlib import resources

    name = _SAMPLES[fmt]
    if fmt == "speed_bench" and by == "tier":
        name = "sample_speed_bench_throughput.jsonl"
    return Path(str(resources.files("deepseekbench") / "data" / name))


def _rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line or entry number, row)`` of a JSONL file or a JSON list."""
    text = _read_text(path)
    if not text.lstrip().startswith("["):
        return _jsonl_objects(path)
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise WorkloadFormatError(f"{path}: not JSON ({exc.msg})", path=path) from exc
    if not data or not all(isinstance(r, dict) for r in data):
        raise WorkloadFormatError(f"{path}: a JSON list of row objects is needed", path=path)
    return list(enumerate(data, start=1))


def _tier(row: dict[str, Any], where: str, path: Path, n: int) -> str:
    tier = row.get("entropy_tier", row.get("category"))
    if tier not in ENTROPY_TIERS:
        raise WorkloadFormatError(
            f"{where}: no entropy tier (an 'entropy_tier' or a 'category' of "
            f"{list(ENTROPY_TIERS)}; got {tier!r})",
            path=path,
            line_number=n,
        )
    return str(tier)


def load_speed_bench(
    path: str | Path, *, by: Literal["category", "tier"] = "category"
) -> tuple[WorkloadItem, ...]:
    """Read a local SPEED-Bench split (module docstring).

    Args:
        path: a JSONL file or a JSON list of rows.
        by: ``"category"`` (the item's ``category``: a domain, or a tier in the
            throughput splits) or ``"tier"`` (its entropy tier).

    Returns:
        one :class:`~deepseekbench.WorkloadItem` per row, id
        ``speed_bench-<question_id>``, its turns in order.

    Raises:
        WorkloadFormatError: unreadable or empty file, a row that is not an
            object, a missing ``question_id`` or ``category``, ``turns`` not a
            non-empty list of strings, turns that are only the placeholder text,
            no entropy tier with ``by="tier"``, or a repeated ``question_id``
            (file and line or entry named).
    """
    p = Path(path)
    items: list[WorkloadItem] = []
    lines: list[int] = []
    for n, row in _rows(p):
        where = f"{p}:{n}"
        qid = row.get("question_id")
        if isinstance(qid, bool) or not isinstance(qid, int | str) or qid == "":
            raise WorkloadFormatError(
                f"{where}: 'question_id' must be an integer or a string", path=p, line_number=n
            )
        category = _category(row, where, p, n)
        if category is None:
            raise WorkloadFormatError(f"{where}: 'category' is missing", path=p, line_number=n)
        turns = _turns(row, where, p, n)
        if all(_PLACEHOLDER_HINT in t.lower() and len(t) < 200 for t in turns):
            raise WorkloadFormatError(
                f"{where}: the turns are SPEED-Bench's placeholder text; fetch the real "
                "prompts first (see the dataset's page)",
                path=p,
                line_number=n,
            )
        group = _tier(row, where, p, n) if by == "tier" else category
        items.append(
            WorkloadItem(id=f"speed_bench-{qid}", turns=turns, category=group, source=where)
        )
        lines.append(n)
    return _unique(items, lines, p)


def load_mt_bench(path: str | Path) -> tuple[WorkloadItem, ...]:
    """Read an MT-bench (or Spec-Bench) ``question.jsonl``: one ``{"question_id",
    "category", "turns": [...]}`` a line (``reference`` and other keys ignored).

    Returns:
        one item per line, id ``mt_bench-<question_id>``, category as given.

    Raises:
        WorkloadFormatError: as :func:`~deepseekbench.load_spec_bench`.
    """
    return tuple(
        item.model_copy(update={"id": "mt_bench-" + item.id.removeprefix("spec_bench-")})
        for item in load_spec_bench(path)
    )
