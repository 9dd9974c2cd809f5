"""Prose that quotes the demo's figures quotes the README's sample, the demo run the docs show.

``tests/test_docs_blocks.py`` checks the README's sample block against a fresh demo run
(its shape: a fresh run's figures vary). The prose around it, here and in
docs/scorecard.md, quotes that sample's figures; when the sample is regenerated from a
new run, every excerpt below must be regenerated with it. So each excerpt may state only
decimal figures the README's sample block prints (or, in :data:`DERIVED`, figures
computed from them here), and the example lines docs/scorecard.md shows from the sample
must be lines the sample prints. A figure no test can check (one read from the sample's
results file but not printed, e.g. a rounds-only interval) does not belong in them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")

# (doc, first words, last words) of each excerpt that quotes the README's sample
EXCERPTS = (
    ("docs/scorecard.md", "The line then reads", "which holds both."),
    ("docs/scorecard.md", "(the demo's figures:", "beside the printed"),
    ("README.md", "`mtp` pays alone and at 2 streams", "need acceptance length"),
)
# the indented example lines docs/scorecard.md shows from the sample, verbatim
EXAMPLE_LINES = re.compile(r"^    (mtp @ 1k/256/non_think (?:from c=1|c=8: a depth-3).*)$", re.M)
_FIGURE = re.compile(r"(?<![\d.])\d+\.\d+(?![\d.]*\d)")


def _sample() -> str:
    blocks = re.findall(r"^```\n(Scorecard \(.*?)^```", README, re.MULTILINE | re.DOTALL)
    assert len(blocks) == 1, "the README shows one demo sample"
    return str(blocks[0])


def _c2_ratio_and_length(sample: str) -> tuple[str, str]:
    """The c=2 mtp step-cost ratio and acceptance length of the decomposition table."""
    row = re.search(
        r"^1k/256/non_think\s+c=2\s+mtp\s+\S+×\s+(\S+) \(.*?\)\s+(\S+) \(", sample, re.M
    )
    assert row is not None, "the sample's decomposition table has no c=2 mtp row"
    return row[2], row[1]


def _derived(sample: str) -> set[str]:
    """Figures an excerpt computes from the sample's: the c=2 ratio to 2 decimals, and the
    printed length ÷ that, which would not divide back (why the ratio prints 3)."""
    ratio, length = _c2_ratio_and_length(sample)
    two = f"{float(ratio):.2f}"
    return {two, f"{float(length) / float(two):.2f}"}


def _excerpt(doc: str, first: str, last: str) -> str:
    text = " ".join((ROOT / doc).read_text(encoding="utf-8").split())  # lines rewrap
    start = text.find(first)
    assert start >= 0, f"{doc}: no excerpt starting {first!r}"
    end = text.find(last, start)
    assert end >= 0, f"{doc}: the excerpt starting {first!r} has no end {last!r}"
    return text[start : end + len(last)]


@pytest.mark.parametrize(("doc", "first", "last"), EXCERPTS, ids=lambda v: str(v)[:24])
def test_prose_quotes_only_figures_the_readme_sample_prints(
    doc: str, first: str, last: str
) -> None:
    sample = _sample()
    printed = set(_FIGURE.findall(sample)) | _derived(sample)
    stale = [f for f in _FIGURE.findall(_excerpt(doc, first, last)) if f not in printed]
    assert not stale, (
        f"{doc}: the excerpt starting {first!r} quotes {stale}, which the README's sample "
        "does not print: regenerate it from the sample, or say it without a figure"
    )


def test_scorecard_docs_quote_the_samples_verdict_and_decomposition_lines() -> None:
    sample = _sample()
    text = (ROOT / "docs/scorecard.md").read_text(encoding="utf-8")
    verdict = re.search(r"`(\d\.\d\d× by tpot_ms \(95% CI [^)]* over \d+ prompts\))`", text)
    assert verdict is not None and verdict[1] in sample, verdict
    lines = EXAMPLE_LINES.findall(text)
    assert len(lines) == 2, lines
    for line in lines:
        assert line in sample.splitlines(), line


def test_the_check_finds_a_figure_the_sample_does_not_print() -> None:
    """The figure pattern reads whole figures: 1.74 is not found inside 0.74×, nor 2.46
    inside 2.465."""
    assert _FIGURE.findall("0.74× and 1.74, 2.465 (2.035–2.985) 95 % 3.23)") == [
        "0.74",
        "1.74",
        "2.465",
        "2.035",
        "2.985",
        "3.23",
    ]
    sample = _sample()
    assert "1.74" not in set(_FIGURE.findall(sample))
    assert _c2_ratio_and_length(sample)[0] in _FIGURE.findall(sample)


# docs/engine.md, "Why a knee": figures modelled by the cost model's defaults
_ENGINE = (ROOT / "docs/engine.md").read_text(encoding="utf-8")


def _modelled_ratio(batch: int, depth: int, length: float) -> float:
    """mtp's speedup (off's step ÷ the verify step per token) at ``batch`` sequences a
    step, the default cost model, every step full (docs/engine.md's closed form)."""
    from deepseekbench._engine import CostModel

    cost = CostModel()
    off = cost.step_ms(batch, 0, 0, model_draft=True)
    return length * off / cost.step_ms(batch, depth, 0, model_draft=True)


def test_the_engine_docs_knee_table_is_the_cost_models() -> None:
    from deepseekbench._engine import CostModel

    cost = CostModel()
    rows = {
        m[1]: [float(v) for v in re.findall(r"([\d.]+)(?: ms|×)?", m[2])]
        for m in re.finditer(r"^\| (`off` step|`mtp` step|mtp/off TPOT|mtp/off output "
                             r"throughput) \|(.*)\|$", _ENGINE, re.M)
    }  # fmt: skip
    batches = (1, 4, 8, 16, 32)
    assert set(rows) == {"`off` step", "`mtp` step", "mtp/off TPOT", "mtp/off output throughput"}
    for i, b in enumerate(batches):
        off, mtp = cost.step_ms(b, 0, 0, model_draft=True), cost.step_ms(b, 1, 0, model_draft=True)
        assert rows["`off` step"][i] == pytest.approx(off, abs=0.05 + 1e-9), b
        assert rows["`mtp` step"][i] == pytest.approx(mtp, abs=0.05 + 1e-9), b
        assert rows["mtp/off TPOT"][i] == pytest.approx(mtp / 1.8 / off, abs=0.005 + 1e-9), b
        assert rows["mtp/off output throughput"][i] == pytest.approx(
            1.8 * off / mtp, abs=0.005 + 1e-9
        ), b


def test_the_engine_docs_depth_3_figures_are_the_cost_models() -> None:
    """ "mtp with draft_depth = 3 (acceptance length ≈ 2.9 …) pays about A× alone, B× at
    B = 4, and costs at B = 8 (C×) and B = 16 (D×)": the closed form at that length."""
    m = re.search(
        r"acceptance length ≈ ([\d.]+) on the smoke\s+tasks\) scores 4 positions a sequence, "
        r"so it pays about ([\d.]+)× alone, ([\d.]+)× at B = 4, and\s+costs at B = 8 "
        r"\(([\d.]+)×\) and B = 16 \(([\d.]+)×\)",
        _ENGINE,
    )
    assert m is not None, "docs/engine.md: the depth-3 sentence moved"
    length = float(m[1])
    for batch, shown in zip((1, 4, 8, 16), m.groups()[1:], strict=True):
        assert float(shown) == pytest.approx(_modelled_ratio(batch, 3, length), abs=0.005), batch


def test_the_scorecard_page_opens_with_the_readme_samples_table() -> None:
    """docs/scorecard.md's opening sample is the current demo's: the first lines of the
    README's sample verbatim (its title, run line and whole first table), so it goes
    stale with the README's sample, never on its own."""
    text = (ROOT / "docs/scorecard.md").read_text(encoding="utf-8")
    opening = re.search(r"^```\n(Scorecard \(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert opening is not None and text.index(opening[0]) < text.index("\n## ")
    shown = opening[1].splitlines()
    sample = _sample().splitlines()
    table_end = sample.index("") if "" in sample else len(sample)
    assert shown == sample[:table_end], "regenerate the opening block from the README sample"
