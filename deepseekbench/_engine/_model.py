"""The reference engine's language model: a generated corpus and a backoff LM.

The corpus is generated here, from a fixed seed, as question/answer lines in
four categories (arithmetic, counting, string reversal, short Python code
completion); no text from elsewhere is shipped. A *line* is
``question + "\\n" + answer + EOS``.

Two kinds of predictor are trained on it at start-up (≈0.1–0.3 s, once per
process):

* the **target**: an interpolation of an exact line-prefix model (it has seen
  every generated question, so greedy decoding answers them correctly) with a
  Witten-Bell backoff character n-gram (context up to ``TARGET_ORDER`` chars).
  The exact part has weight ``LAMBDA_EXACT`` ≥ 0.5, so its continuation is the
  argmax whenever the prefix was seen.
* **draft heads**: Witten-Bell n-grams of lower order (cheap, local context
  only), which agree with the target often but not always — the source of
  partial acceptance.

Distributions are sparse ``dict[str, float]`` over characters, with ``EOS_CH``
standing for end-of-sequence. Witten-Bell smoothing: Witten & Bell (1991),
"The zero-frequency problem", IEEE Trans. Inf. Theory 37(4).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Final, Literal

EOS_CH: Final[str] = "\x00"
"""End-of-sequence marker inside the model (token id ``EOS`` on the wire)."""
TARGET_ORDER: Final[int] = 6
"""Longest backoff context of the target's n-gram part (characters)."""
LAMBDA_EXACT: Final[float] = 0.6
"""Weight of the exact line-prefix model in the target mixture (0.5 < λ ≤ 1)."""
CORPUS_SEED: Final[int] = 20_240_601
"""Seed of the fixed corpus; the task set is the same for every engine seed."""

Category = Literal["arithmetic", "counting", "reversal", "code"]
CATEGORIES: Final[tuple[Category, ...]] = ("arithmetic", "counting", "reversal", "code")

Dist = dict[str, float]


@dataclass(frozen=True, slots=True)
class CorpusLine:
    """One generated question/answer pair (both plain text, no EOS)."""

    question: str
    answer: str
    category: Category


# ---------------------------------------------------------------- corpus ----

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st")
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("", "", "n", "r", "l", "s", "m")


def _words(rng: random.Random, n: int) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        syll = rng.choice((2, 2, 3))
        w = "".join(
            rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syll)
        )
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


_UNARY: Final[tuple[tuple[str, str], ...]] = (
    ("square", "{x} * {x}"),
    ("double", "{x} + {x}"),
    ("half", "{x} // 2"),
    ("negate", "-{x}"),
    ("is_even", "{x} % 2 == 0"),
    ("is_odd", "{x} % 2 == 1"),
    ("cube", "{x} * {x} * {x}"),
    ("increment", "{x} + 1"),
    ("decrement", "{x} - 1"),
    ("absolute", "abs({x})"),
)
_BINARY: Final[tuple[tuple[str, str], ...]] = (
    ("add", "{a} + {b}"),
    ("subtract", "{a} - {b}"),
    ("multiply", "{a} * {b}"),
    ("divide", "{a} / {b}"),
    ("modulo", "{a} % {b}"),
    ("power", "{a} ** {b}"),
    ("maximum", "max({a}, {b})"),
    ("minimum", "min({a}, {b})"),
    ("average", "({a} + {b}) / 2"),
    ("is_equal", "{a} == {b}"),
)
_UNARY_PARAMS: Final[tuple[str, ...]] = ("x", "n", "value", "num")
_BINARY_PARAMS: Final[tuple[tuple[str, str], ...]] = (("a", "b"), ("x", "y"), ("m", "n"))


def _code_lines() -> list[CorpusLine]:
    out: list[CorpusLine] = []
    for name, body in _UNARY:
        for p in _UNARY_PARAMS:
            q = f"Complete the Python function {name}({p})."
            a = f"def {name}({p}):\n    return {body.format(x=p)}"
            out.append(CorpusLine(q, a, "code"))
    for name, body in _BINARY:
        for pa, pb in _BINARY_PARAMS:
            q = f"Complete the Python function {name}({pa}, {pb})."
            a = f"def {name}({pa}, {pb}):\n    return {body.format(a=pa, b=pb)}"
            out.append(CorpusLine(q, a, "code"))
    return out


@cache
def corpus() -> tuple[CorpusLine, ...]:
    """The fixed generated corpus (≈2,300 lines; deterministic, cached per process).

    Every question is unique, so each has exactly one reference answer.
    """
    rng = random.Random(CORPUS_SEED)
    lines: list[CorpusLine] = []
    for a in range(10, 40):
        for b in range(10, 40):
            lines.append(CorpusLine(f"What is {a} + {b}?", f"{a} + {b} = {a + b}", "arithmetic"))
    for a in range(2, 13):
        for b in range(2, 13):
            lines.append(CorpusLine(f"What is {a} × {b}?", f"{a} × {b} = {a * b}", "arithmetic"))
    for start in range(1, 61):
        for length in range(6, 16):
            end = start + length - 1
            ans = " ".join(str(i) for i in range(start, end + 1))
            lines.append(CorpusLine(f"Count from {start} to {end}.", ans, "counting"))
    for w in _words(rng, 240):
        lines.append(CorpusLine(f"Reverse the word {w}.", f"{w} → {w[::-1]}", "reversal"))
    lines.extend(_code_lines())
    return tuple(lines)


# ----------------------------------------------------------------- model ----


class _NGram:
    """Witten-Bell interpolated character n-gram with contexts of 0..order chars.

    Trained on one string of ``EOS_CH``-terminated lines, led by ``EOS_CH``, so a
    context that starts with ``EOS_CH`` means "at the start of a line".
    """

    def __init__(self, stream: str, order: int) -> None:
        self.order = order
        table: defaultdict[str, dict[str, int]] = defaultdict(dict)
        for n in range(1, order + 2):
            grams = Counter(map("".join, zip(*(stream[k:] for k in range(n)), strict=False)))
            for gram, count in grams.items():
                table[gram[:-1]][gram[-1]] = count
        self._table: dict[str, dict[str, int]] = dict(table)
        self.dist = lru_cache(maxsize=200_000)(self._dist)

    def _dist(self, ctx: str) -> Dist:
        """P(next | last ``order`` chars of ``ctx``), recursively interpolated."""
        ctx = ctx[-self.order :]
        if not ctx:
            counts = self._table[""]
            total = sum(counts.values())
            return {ch: c / total for ch, c in counts.items()}
        lower = self.dist(ctx[1:])
        counts_or_none = self._table.get(ctx)
        if counts_or_none is None:
            return lower
        total, types = sum(counts_or_none.values()), len(counts_or_none)
        denom = total + types
        out = {ch: p * types / denom for ch, p in lower.items()}
        for ch, c in counts_or_none.items():
            out[ch] = out.get(ch, 0.0) + c / denom
        return out


def argmax(dist: Dist) -> str:
    """Most probable character; ties go to the smallest code point."""
    return max(dist.items(), key=lambda kv: (kv[1], -ord(kv[0])))[0]


class ReferenceLM:
    """The trained target and draft heads over the generated corpus.

    ``target(ctx) -> Dist`` where ``ctx = context_of(question) + generated``;
    ``draft(order, ctx) -> Dist`` for a draft head of ``order`` chars of context
    (1 ≤ order ≤ ``TARGET_ORDER``). Distributions sum to 1 (± float error).
    """

    def __init__(self) -> None:
        lines = corpus()
        texts = [f"{EOS_CH}{ln.question}\n{ln.answer}{EOS_CH}" for ln in lines]
        # Questions are unique, so every exact answer prefix has one continuation.
        self._exact: dict[str, str] = {
            text[:i]: text[i]
            for ln, text in zip(lines, texts, strict=True)
            for i in range(len(ln.question) + 2, len(text))
        }
        self._ngram = _NGram(EOS_CH + "".join(t[1:] for t in texts), TARGET_ORDER)
        self.target = lru_cache(maxsize=200_000)(self._target)
        self.target_argmax = lru_cache(maxsize=200_000)(self._target_argmax)
        self.draft_argmax = lru_cache(maxsize=200_000)(self._draft_argmax)

    def _target_argmax(self, ctx: str) -> str:
        """Greedy target token: the exact continuation wins outright since λ > 0.5."""
        exact = self._exact.get(ctx)
        return exact if exact is not None else argmax(self._ngram.dist(ctx[-TARGET_ORDER:]))

    def _draft_argmax(self, order: int, ctx: str) -> str:
        return argmax(self.draft(order, ctx))

    def _target(self, ctx: str) -> Dist:
        backoff = self._ngram.dist(ctx[-TARGET_ORDER:])
        exact = self._exact.get(ctx)
        if exact is None:
            return backoff
        out = {ch: (1.0 - LAMBDA_EXACT) * p for ch, p in backoff.items()}
        out[exact] = out.get(exact, 0.0) + LAMBDA_EXACT
        return out

    def draft(self, order: int, ctx: str) -> Dist:
        """Draft head of ``order`` context chars; raises ``ValueError`` if out of range."""
        if not 1 <= order <= TARGET_ORDER:
            raise ValueError(f"draft order must be in 1..{TARGET_ORDER}, got {order}")
        return self._ngram.dist(ctx[-order:])


def context_of(question: str) -> str:
    """The model context that starts the answer to ``question`` (line start + ``\\n``)."""
    return f"{EOS_CH}{question}\n"


@cache
def reference_lm() -> ReferenceLM:
    """The process-wide trained model (trained on first use, then shared)."""
    return ReferenceLM()


def greedy_answer(question: str, max_chars: int = 200) -> str:
    """Greedy target decoding of ``question`` without speculation (text, no EOS)."""
    lm = reference_lm()
    ctx = context_of(question)
    out: list[str] = []
    for _ in range(max_chars):
        ch = lm.target_argmax(ctx + "".join(out))
        if ch == EOS_CH:
            break
        out.append(ch)
    return "".join(out)
