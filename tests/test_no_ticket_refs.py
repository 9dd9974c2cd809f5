"""Code and docs name concepts, never tickets: a static check of the prose.

A comment, docstring or page that says "issue 23" means something only while the
tracker is at hand; "the served-depth probe" or "capacity under SLO" says it to
every later reader. This test lists every ticket citation in ``deepseekbench/``,
``docs/``, ``README.md`` and the tests' own Python files (this file aside: it plants
citations to prove the detector finds them): "issue 23", "Issue 21:", "(issue 24)",
"issues 19–24", "issues 23, 24", "issue-21 fields", "ticket 12", or a bare "#21"
standing for a ticket. Another project's tracker ("vllm-project/vllm issue #57082", "PR #40982"),
an anchor ("quickstart.md#3-measure"), an id ("request-3#2") and any number of 100
or more are not citations.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# "issue 23", "issues 19–24", "issues 10, 12 and 13", "issue-21", "ticket #4"
TICKET = re.compile(
    r"(?<![\w/])(?:issues?|tickets?)[ \t-]+#?\d{1,2}(?!\d)"
    r"(?:\s*(?:,|–|—|-|to|and|or|&)\s*#?\d{1,2}(?!\d))*",
    re.IGNORECASE,
)
# a bare "#21": not an anchor, an id, a URL's fragment, or "PR #N"
BARE = re.compile(r"(?<![\w&/#.-])#\d{1,2}(?![\w-])")
# "owner/repo issue #N", "PR #N": another project's tracker
FOREIGN = re.compile(r"[\w.-]+/[\w.-]+\s+(?:issue|PR|pull)\s*#?\d+|\bPR\s*#\d+", re.IGNORECASE)


def citations(line: str) -> list[str]:
    """The ticket citations in one line of text."""
    scrubbed = FOREIGN.sub(lambda m: " " * len(m.group(0)), line)
    return [m.group(0) for m in (*TICKET.finditer(scrubbed), *BARE.finditer(scrubbed))]


def scanned_files() -> list[Path]:
    """The package's Python sources, the docs' pages, the README and the tests.

    This file is left out: its planted lines are citations on purpose.
    """
    paths = sorted((ROOT / "deepseekbench").rglob("*.py"))
    paths += sorted((ROOT / "docs").rglob("*.md"))
    itself = Path(__file__).resolve()
    paths += [p for p in sorted((ROOT / "tests").rglob("*.py")) if p.resolve() != itself]
    return [*paths, ROOT / "README.md"]


def test_the_detector_finds_planted_citations_and_spares_foreign_ones() -> None:
    planted = [
        "# the margin follow-up (issue 21)",
        "Issue 23: the served-depth probe",
        "rows from issues 19–24 stay readable",
        "the issue-21 fields keep their defaults",
        "see issues 10, 12 and 13",
        "as #24 asked",
        "ticket 7 said so",
    ]
    for line in planted:
        assert citations(line), line
    spared = [
        "vllm-project/vllm issue #57082; PR #57089 proposes an error event",
        "[quickstart.md, section 3](quickstart.md#3-measure-one-request)",
        "``request-3#2`` for a conversation's second turn",
        "the issue is that the server stalls",
    ]
    for line in spared:
        assert not citations(line), line


def test_the_scan_covers_the_tests_but_not_its_own_planted_lines() -> None:
    scanned = {path.resolve() for path in scanned_files()}
    assert Path(__file__).resolve() not in scanned
    assert (ROOT / "tests" / "test_foundation.py").resolve() in scanned
    assert (ROOT / "deepseekbench" / "__init__.py").resolve() in scanned


def test_no_ticket_citations_in_code_docs_or_tests() -> None:
    found = []
    for path in scanned_files():
        text = path.read_text(encoding="utf-8")
        for number, line in enumerate(text.splitlines(), 1):
            if citations(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, (
        f"{len(found)} line(s) cite a ticket; name the concept instead:\n" + "\n".join(found)
    )
