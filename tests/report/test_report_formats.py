"""The scorecard's formats: every format renders every section, and saved results
render byte for byte as they did before the formats became one registry."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from deepseekbench import CapacityReport, Scorecard, SliceStats
from deepseekbench._report._formats import FORMAT_NAMES, omitted_sections, render
from deepseekbench._report._sections import SECTION_KINDS, report_sections
from tests._helpers import make_row

DATA = Path(__file__).parent.parent / "data" / "render"

# How each section shows in each format: a heading, a key or a column of its own
# (for the notes: the last note, as the format prints it).
MARKERS: dict[str, dict[str, str]] = {
    "text": {
        "title": "Scorecard (speedup by",
        "run": "Run: model deepseekbench",
        "integrity": "Results file:",
        "unfinished": "Unfinished run: ",
        "table": "  speedup\n",
        "decomposition": "Where the speedup comes from (",
        "acceptance": "Acceptance per request (",
        "categories": "Per category (",
        "turns": "Per turn (",
        "best_config": "Best configuration per load (",
        "latency": "Latency percentiles (",
        "capacity": "Capacity under SLO (",
        "notes": "\n{note}\n",
    },
    "markdown": {
        "title": "## Scorecard (speedup by",
        "run": "Run: model deepseekbench",
        "integrity": "**Results file:",
        "unfinished": "**Unfinished run: ",
        "table": "| speedup |",
        "decomposition": "Where the speedup comes from (",
        "acceptance": "Acceptance per request (",
        "categories": "| category |",
        "turns": "| turn |",
        "best_config": "Best configuration per load (",
        "latency": "Latency percentiles (",
        "capacity": "Capacity under SLO (",
        "notes": "- {note}\n",
    },
    "html": {
        "title": "<h2>Scorecard (speedup by",
        "run": "<p>Run: model deepseekbench",
        "integrity": "<p><strong>Results file:",
        "unfinished": "<p><strong>Unfinished run: ",
        "table": "<th>speedup</th>",
        "decomposition": "<h3>Where the speedup comes from (",
        "acceptance": "<h3>Acceptance per request (",
        "categories": "<h3>Per category (",
        "turns": "<h3>Per turn (",
        "best_config": "<h3>Best configuration per load (",
        "latency": "<h3>Latency percentiles (",
        "capacity": "<h3>Capacity under SLO (",
        "notes": "<li>{note}</li>",
    },
    "json": {
        "title": '"metric": "tpot_ms"',
        "run": '"run": {',
        "integrity": '"results_integrity": ',
        "unfinished": '"unfinished": "Unfinished run: ',
        "table": '"lines": [',
        "decomposition": '"decomposition": {',
        "acceptance": '"acceptance_length_p50": ',
        "categories": '"categories": [',
        "turns": '"turns": [',
        "best_config": '"best_configs": [',
        "latency": '"dispersion": {',
        "capacity": '"capacity": {',
        "notes": '"notes": [\n',
    },
    "csv": {
        "run": ",model,plan_hash,",
        "integrity": ",results_integrity,",
        "unfinished": "; Unfinished run: ",  # joins the integrity note in its column
        "table": "cell,load,route,",
        "latency": ",ttft_p90_ms,ttft_p99_ms,",
    },
}


def test_every_format_is_registered_with_its_markers() -> None:
    assert set(MARKERS) == set(FORMAT_NAMES)
    for name in FORMAT_NAMES:
        # a section a format leaves out is declared by the format, never lost silently
        assert set(MARKERS[name]) | omitted_sections(name) == set(SECTION_KINDS), name
        assert not set(MARKERS[name]) & omitted_sections(name), name
    for name in ("text", "markdown", "html", "json"):
        assert omitted_sections(name) == frozenset(), name


def _slice(name: str, tpot: float) -> SliceStats:
    return SliceStats(
        name=name, n_requests=4, ttft_ms=10.0, tpot_ms=tpot, e2e_ms=100.0,
        output_toks_per_s=10.0, accepted_token_ratio=0.5, acceptance_length=2.0,
    )  # fmt: skip


def _every_section() -> Scorecard:
    """A scorecard with every section: categories, turns, a depth grid, capacity
    under SLO and an unverified results file of an unfinished run on top of a saved
    run's metadata."""
    load: dict[str, Any] = {"arrival": "closed", "concurrency": 8, "schedule_lagged": True}
    cats = (_slice("qa", 4.0), _slice("code", 4.0))
    turns = (_slice("turn 1", 4.0), _slice("turn 2", 4.0))
    off = make_row(**load, categories=cats, turns=turns, server_ttft_ms=7.0)
    mtp = make_row(
        **load, speculative="mtp", route_label="mtp-k2", tpot_ms=5.0, categories=cats,
        turns=turns, server_ttft_ms=7.0, acceptance_length=2.6, spec_tokens=2,
        acceptance_length_p10=2.0, acceptance_length_p50=2.6, acceptance_length_p90=3.0,
        accepted_per_step=(10, 20, 30), acceptance_split="unknown",
    )  # fmt: skip
    card = Scorecard.from_rows([off, mtp], run_unfinished=True)
    meta = Scorecard.from_results(DATA / "numerics.jsonl").meta
    assert meta is not None
    card.meta = meta.model_copy(update={"results_integrity": "edited after the run"})
    card.grids = {"mtp-k2": "mtp"}
    card.capacity = CapacityReport(target=0.9, unit="streams", routes=(), ratios=())
    return card


@pytest.mark.parametrize("source", ["saved run", "every section"])
def test_every_format_renders_every_section_of_the_same_results(source: str) -> None:
    if source == "saved run":
        card = Scorecard.from_results(DATA / "demo.jsonl")
    else:
        card = _every_section()
    sections = report_sections(card)
    kinds = [s.kind for s in sections]
    note = next(s.items[-1] for s in sections if s.kind == "notes")  # the last note
    if source == "every section":
        assert kinds == list(SECTION_KINDS)
    for name in FORMAT_NAMES:
        out = render(name, card)
        for kind in kinds:
            if kind in omitted_sections(name):
                continue
            assert MARKERS[name][kind].replace("{note}", note) in out, (name, kind)


def test_an_unknown_format_is_refused_with_the_choices() -> None:
    card = Scorecard.from_results(DATA / "numerics.jsonl")
    with pytest.raises(ValueError, match="allowed: text, markdown, json, csv, html"):
        card.render("yaml")


@pytest.mark.parametrize("results", ["demo", "numerics"])
@pytest.mark.parametrize("fmt", ["text", "json", "csv"])
def test_saved_results_render_byte_for_byte(results: str, fmt: str) -> None:
    card = Scorecard.from_results(DATA / f"{results}.jsonl")
    assert card.render(fmt).encode() == (DATA / f"{results}.{fmt}").read_bytes()


def test_the_three_acceptance_rates_are_named_once_beside_each_other() -> None:
    text = Scorecard.from_results(DATA / "demo.jsonl").render("text")
    assert "acceptance by draft position" in text and "per position" in text  # all three
    notes = [ln for ln in text.splitlines() if ln.startswith("three acceptance rates:")]
    assert len(notes) == 1, notes
    for name in ("'accept' = accepted / drafted", "'own … per position'", "'by draft position'"):
        assert name in notes[0]


def test_a_scenarios_run_note_is_printed_with_the_notes_in_every_format() -> None:
    """The sampling demo's TTFT explanation reaches the scorecard (text and JSON), written
    with × as every other ratio is."""
    from deepseekbench._cli._demo import SAMPLING_NOTES, SAMPLING_TTFT_NOTE

    assert "4×" in SAMPLING_TTFT_NOTE and "4x" not in SAMPLING_TTFT_NOTE + SAMPLING_NOTES
    card = Scorecard.from_results(DATA / "demo.jsonl")
    assert SAMPLING_TTFT_NOTE not in card.render("text")
    card.run_notes = (SAMPLING_TTFT_NOTE,)
    for fmt in ("text", "json", "markdown"):
        assert SAMPLING_TTFT_NOTE in card.render(fmt), fmt


def test_a_recorded_run_note_is_kept_in_the_results_file_and_report_prints_it(
    tmp_path: Path,
) -> None:
    """The sampling demo's TTFT note is written to its results file (a ``run_note``
    record), so ``report FILE`` prints the notes the run printed; recording it again adds
    no second copy and keeps the file verified; a file without notes still reads."""
    import shutil

    from deepseekbench import load_results
    from deepseekbench._cli._demo import SAMPLING_TTFT_NOTE
    from deepseekbench._store._writer import record_run_notes
    from tests._helpers import run_cli

    path = tmp_path / "demo.jsonl"
    shutil.copyfile(DATA / "demo.jsonl", path)
    assert load_results(path).run_notes == ()  # written before run notes: still reads
    plan = load_results(path).plan
    assert record_run_notes(path, plan, (SAMPLING_TTFT_NOTE,)) == (SAMPLING_TTFT_NOTE,)
    assert record_run_notes(path, plan, (SAMPLING_TTFT_NOTE, "a second note")) == (
        SAMPLING_TTFT_NOTE,
        "a second note",
    )
    lines = path.read_text(encoding="utf-8").splitlines()
    assert sum('"record":"run_note"' in ln for ln in lines) == 2
    result = load_results(path)
    assert result.run_notes == (SAMPLING_TTFT_NOTE, "a second note")
    assert result.integrity is not None and not result.integrity.tampered
    card = Scorecard.from_run(result)
    for fmt in ("text", "json", "markdown"):
        assert SAMPLING_TTFT_NOTE in card.render(fmt), fmt
    proc = run_cli("report", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.splitlines()
    assert notes.count(SAMPLING_TTFT_NOTE) == 1 and notes.count("a second note") == 1


def _table(text: str, header_start: str) -> list[dict[str, str]]:
    """The rows of the text table whose header starts ``header_start``, by column head."""
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(header_start))
    rule = lines[at + 1]
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]
    heads = [lines[at][a:b].strip() for a, b in spans[:-1]] + [lines[at][spans[-1][0] :].strip()]
    rows: list[dict[str, str]] = []
    for ln in lines[at + 2 :]:
        if not ln.strip() or " " in ln[: spans[0][1]].strip():
            break  # the table's end: a blank line, or the section's sentences
        cells = [ln[a:b].strip() for a, b in spans[:-1]] + [ln[spans[-1][0] :].strip()]
        rows.append(dict(zip(heads, cells, strict=True)))
    return rows


def test_off_step_prints_as_offs_tpot_in_the_main_table() -> None:
    """The decomposition's ``off step ms`` is ``off``'s median TPOT at that load, the main
    table's ``TPOT ms``: one figure, printed to the same decimals in both."""
    text = Scorecard.from_results(DATA / "demo.jsonl").to_text()
    main = _table(text, "cell              load  route")
    parts = _table(text, "cell              load  route  speedup")
    assert parts, "the golden's run credits a TPOT speedup"
    for part in parts:
        off = next(
            r for r in main
            if (r["cell"], r["load"], r["route"]) == (part["cell"], part["load"], "off")
        )  # fmt: skip
        assert part["off step ms"] == off["TPOT ms"], (part, off)
