"""Workloads: the prompts a cell is measured on, from files or generated to a length.

* :class:`WorkloadItem`: one conversation — one or more user turns, a category
  and where it came from. Later turns are sent with the model's own earlier
  answers in the history (each route continues its own conversation).
* Loaders, each raising :class:`WorkloadFormatError` (file and line named):
  :func:`load_sharegpt` (ShareGPT-format JSON: a list of ``{"id",
  "conversations": [{"from": "human"|"gpt"|"system", "value"}]}``; the human
  turns are kept), :func:`load_spec_bench` (Spec-Bench ``question.jsonl``:
  ``{"question_id", "category", "turns": [...]}`` per line) and
  :func:`load_jsonl` (``{"prompt"}`` or ``{"turns"}``, optional ``"category"``
  and ``"id"`` per line).
* :class:`InputLength` and :func:`synthetic_items`: prompts of a target
  input-length distribution (fixed, uniform with a range ratio, normal with a
  spread; seeded), cut from text this module generates and sized with a
  :class:`~deepseekbench._types._tokens.TokenCounter` — the idea of vLLM's ``random``
  dataset, built on text instead of random token ids so that any tokenizer
  (an engine's ``/tokenize`` included) can size it.
* :func:`check_bucket`: refuse a cell whose prompts fall outside its
  :class:`~deepseekbench.ContextBucket` token range, naming the prompts.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepseekbench._errors import WorkloadFormatError, WorkloadLengthError
from deepseekbench._types._axes import ContextBucket
from deepseekbench._types._tokens import TokenCounter
from deepseekbench._userfile import read_user_text

__all__ = [
    "MAX_CONTEXT_TOKENS",
    "InputLength",
    "WorkloadFormatError",
    "WorkloadItem",
    "WorkloadLengthError",
    "check_bucket",
    "check_bucket_bytes",
    "generated_text",
    "load_jsonl",
    "load_sharegpt",
    "load_spec_bench",
    "sample_path",
    "synthetic_items",
]

_NAMED_LIMIT = 10

MAX_CONTEXT_TOKENS = 1_048_576
"""Longest prompt or output a plan may ask for, in tokens (2**20: above the
1M-token context of the largest models served today). Synthetic and shared-prefix
lengths, output caps, the parity set's ``max_tokens`` and a trace's
``input_length``/``output_length`` are bounded by it at validation (and so in
the dry run), so a length of 10**12 tokens is an error, not a request."""


class WorkloadItem(BaseModel):
    """One conversation to measure: its user turns, category and origin.

    Attributes:
        id: unique within the workload (e.g. ``spec_bench-81``).
        turns: the user messages, in order (one per request; ≥ 1).
        category: the dataset category (e.g. ``mt_bench``), ``None`` if none.
        source: where it came from (``<file>:<line>`` or ``synthetic``).
        prompt_tokens: the first turn's length in tokens when it was counted
            (synthetic items always; loaded ones after a check), else ``None``.
        arrival_ms: a trace item's arrival (ms from the trace's start), ``None``
            otherwise.
        output_tokens: the output target per turn (tokens), ``()`` = the cell's (a
            trace item: its ``output_length``).
        references: the dataset's reference answers (not sent).

    Raises:
        pydantic.ValidationError: no turns, an empty id, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    turns: tuple[str, ...] = Field(min_length=1)
    category: str | None = None
    source: str = "inline"
    prompt_tokens: int | None = Field(default=None, ge=0)
    # trace replay: the item's own arrival
    arrival_ms: float | None = Field(default=None, ge=0, description="trace arrival, ms")
    # output length
    output_tokens: tuple[int, ...] = Field(
        default=(),
        description="output target per turn (tokens; the last repeats for later turns); "
        "empty = the cell's max_tokens. Set by the output-length draw or the calibration pass",
    )
    references: tuple[str, ...] = Field(
        default=(),
        description="the dataset's reference answers, per turn (ShareGPT 'gpt' turns, a "
        "JSONL 'reference'); never sent, used by output_tokens distribution 'dataset'",
    )

    def output_target(self, turn: int) -> int | None:
        """The output target of turn ``turn`` (0-based; tokens), ``None`` = the cell's cap."""
        if not self.output_tokens:
            return None
        return self.output_tokens[min(turn, len(self.output_tokens) - 1)]


# ------------------------------------------------------------------ loaders ---


def _read_text(path: Path) -> str:
    def fail(line: str) -> WorkloadFormatError:
        return WorkloadFormatError(line, path=path)

    return read_user_text(path, what="workload file", fail=fail)


def _jsonl_objects(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line of a JSONL file."""
    out: list[tuple[int, dict[str, Any]]] = []
    # not splitlines(): U+2028 or U+0085 may sit inside a JSON string
    for number, line in enumerate(_read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise WorkloadFormatError(
                f"{path}:{number}: not JSON ({exc.msg})", path=path, line_number=number
            ) from exc
        if not isinstance(obj, dict):
            raise WorkloadFormatError(
                f"{path}:{number}: a line must be a JSON object", path=path, line_number=number
            )
        out.append((number, obj))
    if not out:
        raise WorkloadFormatError(f"{path}: no items", path=path)
    return out


def _turns(obj: dict[str, Any], where: str, path: Path, number: int) -> tuple[str, ...]:
    turns = obj.get("turns")
    if (
        not isinstance(turns, list)
        or not turns
        or not all(isinstance(t, str) and t.strip() for t in turns)
    ):
        raise WorkloadFormatError(
            f"{where}: 'turns' must be a non-empty list of non-empty strings",
            path=path,
            line_number=number,
        )
    return tuple(turns)


def _category(obj: dict[str, Any], where: str, path: Path, number: int) -> str | None:
    cat = obj.get("category")
    if cat is None:
        return None
    if not isinstance(cat, str) or not cat.strip():
        raise WorkloadFormatError(
            f"{where}: 'category' must be a non-empty string", path=path, line_number=number
        )
    return cat


def _unique(items: list[WorkloadItem], lines: list[int], path: Path) -> tuple[WorkloadItem, ...]:
    seen: dict[str, int] = {}
    for item, number in zip(items, lines, strict=True):
        if item.id in seen:
            raise WorkloadFormatError(
                f"{path}:{number}: id {item.id!r} repeats line {seen[item.id]}",
                path=path,
                line_number=number,
            )
        seen[item.id] = number
    return tuple(items)


def load_spec_bench(path: str | Path) -> tuple[WorkloadItem, ...]:
    """Read a Spec-Bench ``question.jsonl``: one ``{"question_id", "category",
    "turns": [str, ...]}`` object a line (MT-bench items have two turns).

    Returns:
        One :class:`WorkloadItem` per line, id ``spec_bench-<question_id>``.

    Raises:
        WorkloadFormatError: unreadable or empty file, a line that is not a JSON
            object, a missing or non-integer/string ``question_id``, a missing
            ``category``, ``turns`` that is not a non-empty list of strings, or a
            repeated ``question_id`` (file and line named).
    """
    p = Path(path)
    items: list[WorkloadItem] = []
    lines: list[int] = []
    for number, obj in _jsonl_objects(p):
        where = f"{p}:{number}"
        qid = obj.get("question_id")
        if isinstance(qid, bool) or not isinstance(qid, (int, str)) or qid == "":
            raise WorkloadFormatError(
                f"{where}: 'question_id' must be an integer or a string", path=p, line_number=number
            )
        category = _category(obj, where, p, number)
        if category is None:
            raise WorkloadFormatError(f"{where}: 'category' is missing", path=p, line_number=number)
        items.append(
            WorkloadItem(
                id=f"spec_bench-{qid}",
                turns=_turns(obj, where, p, number),
                category=category,
                source=where,
            )
        )
        lines.append(number)
    return _unique(items, lines, p)


def load_jsonl(path: str | Path) -> tuple[WorkloadItem, ...]:
    """Read a generic JSONL workload: per line ``{"prompt": str}`` or ``{"turns":
    [str, ...]}``, with optional ``"category"``, ``"id"`` (default ``line-<n>``) and
    ``"reference"`` (a reference answer, never sent; output lengths may follow it).

    Raises:
        WorkloadFormatError: unreadable or empty file, a line that is not a JSON
            object, neither (or both) ``prompt`` and ``turns``, an empty prompt, a
            non-string ``category``, ``id`` or ``reference``, or a repeated id (file
            and line named).
    """
    p = Path(path)
    items: list[WorkloadItem] = []
    lines: list[int] = []
    for number, obj in _jsonl_objects(p):
        where = f"{p}:{number}"
        if ("prompt" in obj) == ("turns" in obj):
            raise WorkloadFormatError(
                f"{where}: give exactly one of 'prompt' or 'turns'", path=p, line_number=number
            )
        if "prompt" in obj:
            prompt = obj["prompt"]
            if not isinstance(prompt, str) or not prompt.strip():
                raise WorkloadFormatError(
                    f"{where}: 'prompt' must be a non-empty string", path=p, line_number=number
                )
            turns: tuple[str, ...] = (prompt,)
        else:
            turns = _turns(obj, where, p, number)
        item_id = obj.get("id", f"line-{number}")
        if not isinstance(item_id, str) or not item_id:
            raise WorkloadFormatError(
                f"{where}: 'id' must be a non-empty string", path=p, line_number=number
            )
        ref = obj.get("reference")  # optional reference answer (not sent)
        if ref is not None and (not isinstance(ref, str) or not ref.strip()):
            raise WorkloadFormatError(
                f"{where}: 'reference' must be a non-empty string", path=p, line_number=number
            )
        items.append(
            WorkloadItem(
                id=item_id,
                turns=turns,
                category=_category(obj, where, p, number),
                source=where,
                references=(ref,) if ref is not None else (),
            )
        )
        lines.append(number)
    return _unique(items, lines, p)


def _entry_line(text: str, index: int) -> int:
    """1-based line where the ``index``-th entry of the top-level array starts (0 if none)."""
    depth = 0
    entry = -1
    expecting = in_str = escape = False
    line = 1
    for ch in text:
        if ch == "\n":
            line += 1
        if in_str:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_str = False
            continue
        if depth == 1 and expecting and not ch.isspace():
            entry += 1
            expecting = False
            if entry == index:
                return line
        if ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            expecting = depth == 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 1:
            expecting = True
    return 0


def load_sharegpt(path: str | Path) -> tuple[WorkloadItem, ...]:
    """Read ShareGPT-format JSON: a list of ``{"id": str, "conversations":
    [{"from": "human"|"gpt"|"system", "value": str}, ...]}`` (optional
    ``"category"``). The ``human`` turns become the item's turns; the recorded
    ``gpt`` answers are not sent (the model's own answers are).

    Raises:
        WorkloadFormatError: unreadable file, not JSON (the line of the syntax
            error named), not a non-empty list, an entry that is not an object, a
            missing ``conversations`` list, a turn without string ``from`` and
            ``value``, an unknown ``from``, an entry with no human turn, or a
            repeated id (file and the entry's line named).
    """
    p = Path(path)
    text = _read_text(p)
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise WorkloadFormatError(
            f"{p}:{exc.lineno}: not JSON ({exc.msg})", path=p, line_number=exc.lineno
        ) from exc
    if not isinstance(data, list) or not data:
        raise WorkloadFormatError(f"{p}: ShareGPT data must be a non-empty JSON list", path=p)
    items: list[WorkloadItem] = []
    lines: list[int] = []
    for index, entry in enumerate(data):
        number = _entry_line(text, index)
        where = f"{p}:{number} (entry {index})"
        if not isinstance(entry, dict):
            raise WorkloadFormatError(f"{where}: not an object", path=p, line_number=number)
        items.append(_sharegpt_item(entry, index, where, p, number))
        lines.append(number)
    return _unique(items, lines, p)


_SHAREGPT_ROLES = frozenset({"human", "user", "gpt", "assistant", "chatgpt", "bard", "system"})
_ANSWER_ROLES = frozenset({"gpt", "assistant", "chatgpt", "bard"})


def _sharegpt_item(
    entry: dict[str, Any], index: int, where: str, p: Path, number: int
) -> WorkloadItem:
    conv = entry.get("conversations")
    if not isinstance(conv, list) or not conv:
        raise WorkloadFormatError(
            f"{where}: 'conversations' must be a non-empty list", path=p, line_number=number
        )
    human: list[str] = []
    answers: list[str] = []
    for k, turn in enumerate(conv):
        if (
            not isinstance(turn, dict)
            or not isinstance(turn.get("from"), str)
            or not isinstance(turn.get("value"), str)
        ):
            raise WorkloadFormatError(
                f"{where}: conversations[{k}] needs string 'from' and 'value'",
                path=p,
                line_number=number,
            )
        if turn["from"] not in _SHAREGPT_ROLES:
            raise WorkloadFormatError(
                f"{where}: conversations[{k}].from {turn['from']!r} is not one of "
                f"{sorted(_SHAREGPT_ROLES)}",
                path=p,
                line_number=number,
            )
        if turn["from"] in ("human", "user") and turn["value"].strip():
            human.append(turn["value"])
        elif turn["from"] in _ANSWER_ROLES and human and len(answers) < len(human):
            answers.append(turn["value"])  # the reference answer of that turn
    if not human:
        raise WorkloadFormatError(f"{where}: no human turn", path=p, line_number=number)
    item_id = entry.get("id", f"sharegpt-{index}")
    if not isinstance(item_id, str) or not item_id:
        raise WorkloadFormatError(
            f"{where}: 'id' must be a non-empty string", path=p, line_number=number
        )
    category = _category(entry, where, p, number)
    return WorkloadItem(
        id=item_id,
        turns=tuple(human),
        category=category,
        source=where,
        references=tuple(answers),
    )


_SAMPLES: dict[str, str] = {
    "sharegpt": "sample_sharegpt.json",
    "spec_bench": "sample_spec_bench.jsonl",
    "jsonl": "sample_categories.jsonl",
}


def sample_path(fmt: Literal["sharegpt", "spec_bench", "jsonl"]) -> Path:
    """Path of the small sample shipped for a format (written for this project).

    Raises:
        KeyError: an unknown format name.
    """
    from importlib import resources

    return Path(str(resources.files("deepseekbench") / "data" / _SAMPLES[fmt]))


# ---------------------------------------------------------------- synthetic ---

_FUNCTION_WORDS = (
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "with",
    "was", "on", "by", "at", "from", "this", "which", "or", "an", "be", "are", "not",
)  # fmt: skip
_ONSETS = ("b", "c", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ea", "ou")
_CODAS = ("", "", "n", "r", "l", "s", "t", "nd", "ng")


def _vocabulary(rng: random.Random, n: int) -> list[str]:
    words: set[str] = set()
    while len(words) < n:
        syllables = rng.choice((1, 2, 2, 3))
        words.add(
            "".join(
                rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                for _ in range(syllables)
            )
        )
    return sorted(words)


def generated_text(seed: int, n_words: int) -> str:
    """Deterministic filler prose of ``n_words`` words (seeded; generated here).

    Sentences of 6–18 words from a generated vocabulary of 600 pseudo-words, a
    few English function words and numbers, in paragraphs of 3–6 sentences. The
    same ``seed`` gives the same text; a longer text extends a shorter one.

    Raises:
        ValueError: ``n_words`` is negative.
    """
    if n_words < 0:
        raise ValueError("n_words must be >= 0")
    vocab = _vocabulary(random.Random(0x70C), 600)
    rng = random.Random(seed)
    out: list[str] = []
    words = 0
    sentences_left = rng.randint(3, 6)
    while words < n_words:
        length = min(rng.randint(6, 18), n_words - words)
        sentence = [
            rng.choice(_FUNCTION_WORDS)
            if rng.random() < 0.35
            else (str(rng.randint(2, 999)) if rng.random() < 0.04 else rng.choice(vocab))
            for _ in range(length)
        ]
        sentence[0] = sentence[0].capitalize()
        out.append(" ".join(sentence) + ".")
        words += length
        sentences_left -= 1
        if sentences_left == 0:
            out.append("\n\n")
            sentences_left = rng.randint(3, 6)
        else:
            out.append(" ")
    return "".join(out).rstrip()


class InputLength(BaseModel):
    """A target input-length distribution, in prompt tokens.

    * ``fixed``: every prompt ``tokens`` long;
    * ``uniform``: integers drawn uniformly from
      ``[tokens·(1 − range_ratio), tokens·(1 + range_ratio)]`` (vLLM ``random``
      dataset's ``range_ratio``);
    * ``normal``: ``round(N(tokens, (spread·tokens)²))``, clipped to ≥ 1.

    Draws use ``random.Random(seed)``, so a plan reproduces its prompts.

    Raises:
        pydantic.ValidationError: ``tokens`` below 1, ``range_ratio`` outside
            [0, 1), ``spread`` negative, a ratio/spread given for a distribution
            that does not use it, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    distribution: Literal["fixed", "uniform", "normal"] = "fixed"
    tokens: int = Field(ge=1, le=MAX_CONTEXT_TOKENS, description="target (mean) length, tokens")
    range_ratio: float = Field(default=0.0, ge=0.0, lt=1.0)
    spread: float = Field(default=0.0, ge=0.0, le=1.0, description="std / mean (normal)")
    seed: int = 0

    @model_validator(mode="after")
    def _fits(self) -> InputLength:
        if self.range_ratio and self.distribution != "uniform":
            raise ValueError("range_ratio is only used with distribution='uniform'")
        if self.spread and self.distribution != "normal":
            raise ValueError("spread is only used with distribution='normal'")
        return self

    def draw(self, n: int) -> list[int]:
        """``n`` target lengths (tokens, each ≥ 1), reproducible from ``seed``."""
        rng = random.Random(self.seed)
        if self.distribution == "fixed":
            return [self.tokens] * n
        if self.distribution == "uniform":
            lo = max(1, round(self.tokens * (1 - self.range_ratio)))
            hi = max(lo, round(self.tokens * (1 + self.range_ratio)))
            return [rng.randint(lo, hi) for _ in range(n)]
        sd = self.spread * self.tokens
        return [max(1, round(rng.gauss(self.tokens, sd))) for _ in range(n)]


async def _fit(counter: TokenCounter, words: list[str], target: int) -> tuple[str, int]:
    """The longest word prefix of ``words`` whose count is ≤ ``target`` (and its count).

    Interpolation search between a prefix known to fit and one known not to.
    """
    lo, lo_n = 0, 0
    hi, hi_n = len(words), (await counter.count([" ".join(words)]))[0]
    if hi_n <= target:
        return " ".join(words), hi_n
    while hi - lo > 1:
        guess = lo + round((hi - lo) * (target - lo_n) / max(1, hi_n - lo_n))
        mid = min(hi - 1, max(lo + 1, guess))
        n = (await counter.count([" ".join(words[:mid])]))[0]
        if n <= target:
            lo, lo_n = mid, n
            if n == target:
                break
        else:
            hi, hi_n = mid, n
    return " ".join(words[:lo]), lo_n


async def synthetic_items(
    counter: TokenCounter,
    length: InputLength,
    n: int,
    *,
    category: str = "synthetic",
) -> tuple[WorkloadItem, ...]:
    """``n`` single-turn prompts sized to ``length`` with ``counter``'s tokenizer.

    Prompt ``i`` is cut from :func:`generated_text` (seed ``(length.seed, i)``, so
    prompts differ and no prefix cache can share them) at the longest word
    boundary whose token count is at most its drawn target; each item carries
    that count in ``prompt_tokens`` (at most one word's tokens below the target).

    Raises:
        ValueError: ``n`` below 1.
        TokenizeError, LiveGateError: as ``counter.count``.
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    items: list[WorkloadItem] = []
    for i, target in enumerate(length.draw(n)):
        seed = length.seed * 1_000_003 + i
        # Prose of this vocabulary averages above one token per word with BPE
        # tokenizers and ~6 characters a word: start with enough words either way.
        n_words = target + 16
        text = generated_text(seed, n_words)
        while (await counter.count([text]))[0] < target:
            n_words *= 2
            text = generated_text(seed, n_words)
        prompt, tokens = await _fit(counter, text.split(" "), target)
        items.append(
            WorkloadItem(
                id=f"synthetic-{i}",
                turns=(prompt,),
                category=category,
                source="synthetic",
                prompt_tokens=tokens,
            )
        )
    return tuple(items)


# ------------------------------------------------------------------ buckets ---


def _refuse(
    cell: str, bucket: ContextBucket, bad: list[tuple[str, int]], how: str
) -> WorkloadLengthError:
    named = ", ".join(f"{pid} ({n} tokens)" for pid, n in bad[:_NAMED_LIMIT])
    more = f" and {len(bad) - _NAMED_LIMIT} more" if len(bad) > _NAMED_LIMIT else ""
    return WorkloadLengthError(
        f"cell {cell}: {len(bad)} prompt(s) {how} the {bucket.value} bucket's range of "
        f"{bucket.min_prompt_tokens}..{bucket.max_prompt_tokens} tokens: {named}{more}",
        cell=cell,
        prompts=tuple(bad),
    )


def check_bucket(cell: str, bucket: ContextBucket, lengths: Sequence[tuple[str, int]]) -> None:
    """Refuse prompts whose token count lies outside ``bucket``'s range.

    Args:
        cell: the cell id, for the message.
        bucket: the cell's context bucket.
        lengths: ``(item id, prompt tokens)`` per prompt, counted with the
            served model's tokenizer.

    Raises:
        WorkloadLengthError: any prompt is outside
            ``bucket.min_prompt_tokens..bucket.max_prompt_tokens``; every such
            prompt is listed on the error (the first ten in the message).
    """
    bad = [
        (pid, n)
        for pid, n in lengths
        if not bucket.min_prompt_tokens <= n <= bucket.max_prompt_tokens
    ]
    if bad:
        raise _refuse(cell, bucket, bad, "fall outside")


def check_bucket_bytes(cell: str, bucket: ContextBucket, items: Sequence[WorkloadItem]) -> None:
    """The check that needs no tokenizer: refuse prompts too short for ``bucket``.

    A token covers at least one UTF-8 byte (byte-level BPE, SentencePiece with
    byte fallback, the embedded engine's characters), so a prompt of fewer bytes
    than ``bucket.min_prompt_tokens`` is certainly below the bucket. Longer
    prompts are not judged here (that needs :func:`check_bucket`).

    Raises:
        WorkloadLengthError: a first turn has fewer UTF-8 bytes than the bucket's
            lower bound; the count given is the byte count (an upper bound on tokens).
    """
    bad = [
        (item.id, n)
        for item in items
        if (n := len(item.turns[0].encode("utf-8"))) < bucket.min_prompt_tokens
    ]
    if bad:
        raise _refuse(cell, bucket, bad, "are certainly below (at most this many tokens)")
