"""Every code block in README.md and docs/*.md works as written.

* ``python``: run twice in one fresh temporary directory (the second run sees what
  the first left, as a reader rerunning a cell does). Notebook code (top-level
  ``await`` / ``async with``) runs under anyio. Blocks that read a results file name
  ``deepseekbench-demo.jsonl``, which the README's first command makes
  (``python -m deepseekbench demo``, run as written in a fresh folder: it writes a
  timestamped file and copies it to that name); the test puts the results of that
  one demo run there. A block marked
  ``<!-- docs-test: not run (why) -->`` is compiled and its imports run; only the
  blocks listed in ``NOT_RUN`` may carry that mark.
* ``toml``: a plan (or a plan section, inside a minimal plan) that validates.
  ``json``: a JSON document or JSON lines; lines of tasks are valid tasks.
* ``bash``/``sh``: each ``python -m deepseekbench ...`` command parses with the
  CLI's own parser; ``bash .ci/<script>`` names a script that exists; any other
  program must be one of ``EXTERNAL`` (engines, pip). Leading ``VAR=value``
  environment assignments are skipped.
* plain blocks: CLI usage lines (every option exists), or the demo's scorecard
  (a block starting ``Scorecard (``) whose shape (numbers and quoted texts
  aside) is what the demo prints now; other excerpts are not compared.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
import shutil
import tomllib
import warnings
from dataclasses import dataclass
from pathlib import Path

import anyio
import orjson
import pytest

from deepseekbench import BenchmarkPlan
from deepseekbench._cli._parser import build_parser
from deepseekbench._plan._tasks import parse_tasks
from tests._helpers import DemoRun

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DEMO_FILE = "deepseekbench-demo.jsonl"
NOT_RUN = {"docs/engines.md"}  # the llama_servers and vllm_servers examples need engine builds
EXTERNAL = {"python3", ".", "pip", "vllm", "llama-server", "python -m sglang.launch_server",
            "python -m pytest"}  # fmt: skip

BLOCK = re.compile(
    r"^(?:<!-- docs-test: (?P<mark>[^>]*) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)^```",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class Block:
    path: str
    index: int
    lang: str
    body: str
    mark: str | None

    @property
    def name(self) -> str:
        return f"{self.path}#{self.index}"


def _blocks() -> list[Block]:
    out: list[Block] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        rel = str(doc.relative_to(ROOT))
        for i, m in enumerate(BLOCK.finditer(text)):
            out.append(Block(rel, i, m["lang"], m["body"], m["mark"]))
    return out


BLOCKS = _blocks()


def _of(*langs: str) -> list[Block]:
    return [b for b in BLOCKS if b.lang in langs]


@pytest.fixture(scope="module")
def demo(demo_run: DemoRun) -> tuple[Path, str]:
    """The shared ``python -m deepseekbench demo`` run (tests/conftest.py), the README's
    first command in a fresh folder: the results the README's snippet reads are there
    under ``DEMO_FILE``."""
    assert demo_run.returncode == 0, demo_run.stderr
    folder = demo_run.folder
    stamped = list(folder.glob("deepseekbench-demo-*.jsonl"))
    assert len(stamped) == 1 and (folder / DEMO_FILE).read_bytes() == stamped[0].read_bytes()
    assert f"results: {stamped[0]}" in demo_run.stderr
    assert f"(a copy): {folder / DEMO_FILE}" in demo_run.stderr
    return folder / DEMO_FILE, demo_run.stdout


def test_every_block_has_a_known_kind() -> None:
    assert len(BLOCKS) >= 15
    assert {b.lang for b in BLOCKS} <= {"python", "toml", "json", "bash", "sh", ""}
    assert {b.path for b in BLOCKS if b.mark is not None} == NOT_RUN


def _run_source(source: str, name: str) -> None:
    code = compile(source, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, object] = {"__name__": "__docs__"}

    async def cell() -> None:
        with anyio.fail_after(120):
            result = eval(code, namespace)  # a coroutine when the block awaits
            if result is not None:
                await result

    anyio.run(cell)


@pytest.mark.parametrize("block", _of("python"), ids=lambda b: b.name)
def test_python_block_runs_twice_in_a_fresh_folder(
    block: Block, demo: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    if block.mark is not None:
        tree = ast.parse(block.body)
        imports: list[ast.stmt] = [
            n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
        ]
        exec(compile(ast.Module(body=imports, type_ignores=[]), block.name, "exec"), {})
        compile(block.body, block.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        return
    shutil.copy(demo[0], tmp_path / DEMO_FILE)
    for run in (1, 2):
        _run_source(block.body, f"{block.name} (run {run})")


_BASE_PLAN = {
    "model": "m",
    "routes": [
        {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:8000/v1"},
        {"label": "mtp", "speculative": "mtp", "base_url": "http://127.0.0.1:8001/v1"},
    ],
}


@pytest.mark.parametrize("block", _of("toml"), ids=lambda b: b.name)
def test_toml_block_is_a_valid_plan_or_plan_section(block: Block) -> None:
    data = tomllib.loads(block.body)
    if "routes" not in data:  # a section of a plan: valid inside a minimal one
        data = {**_BASE_PLAN, **data}
    assert BenchmarkPlan.from_mapping(data).routes


LAUNCH_PLANS = [b for b in _of("toml") if "routes" in tomllib.loads(b.body) and "launch" in b.body]


def test_the_docs_show_launch_plans() -> None:
    assert len(LAUNCH_PLANS) >= 2  # docs/plan.md: the minimal launch plan and the depth grid


@pytest.mark.parametrize("block", LAUNCH_PLANS, ids=lambda b: b.name)
def test_a_documented_launch_plan_loads_and_validates_without_a_warning(block: Block) -> None:
    """A newcomer's first launch plan, copied from the docs, says nothing about its
    own defaults: no warning at load or at validation (the sources read, the
    workload's coverage counted)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BenchmarkPlan.from_toml(block.body).validate_sources()


@pytest.mark.parametrize("block", _of("json"), ids=lambda b: b.name)
def test_json_block_is_json_and_task_lines_are_valid_tasks(block: Block) -> None:
    try:
        orjson.loads(block.body)  # one JSON document
        return
    except orjson.JSONDecodeError:
        pass
    lines = [orjson.loads(ln) for ln in block.body.splitlines() if ln.strip()]  # JSON lines
    if all(isinstance(x, dict) and {"id", "prompt"} <= set(x) for x in lines):
        assert parse_tasks(block.body.splitlines(), source=block.name)


def _commands(body: str) -> list[str]:
    joined = body.replace("\\\n", " ")
    return [c.strip() for line in joined.splitlines() for c in line.split("&&") if c.strip()]


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("block", _of("bash", "sh"), ids=lambda b: b.name)
def test_shell_block_commands_exist(block: Block) -> None:
    for command in _commands(block.body):
        command = re.sub(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)+", "", command)  # VAR=value prefixes
        if command.startswith("bash .ci/"):  # a CI step script of this repository
            assert (ROOT / shlex.split(command)[1]).is_file(), command
        elif command.startswith("python -m deepseekbench"):
            args = shlex.split(command)[3:]
            assert "--help" not in args
            build_parser().parse_args(args)  # argparse exits 2 on an unknown option
        else:
            assert any(command.startswith(p) for p in EXTERNAL), command


_CLIENT_NOTE = re.compile(r"client (starved|saturated|waited|lagged)\b")
# a verified route whose speed a busy machine left uncredited (the client-clock checks) gets a note
# that the README's run, on a quieter machine, did not print
_NOISE_NOTE = re.compile(r"\S+ @ \S+ \([^)]*\): no speedup credited; parity verified")


def _without_client_flag(text: str) -> str:
    """``text`` with the scorecard's ``client`` column cut out of its main table."""
    lines = text.splitlines()
    out: list[str] = []
    cut: tuple[int, int] | None = None
    for line in lines:
        if cut is None and re.search(r"\bclient\s+speedup$", line):
            cut = (line.index("client"), line.index("speedup"))
        elif cut is not None and not line.strip():
            cut = (-1, -1)
        if cut is not None and cut[0] >= 0:
            line = line[: cut[0]] + line[cut[1] :]
        out.append(line)
    return "\n".join(out)


_VERDICT = re.compile(
    r"\d+(\.\d+)?× by \w+( — slower)? \(95% CI [^)]*\)|no significant difference \([^)]*\) by \w+"
)
_CROSSOVER = re.compile(r"^crossover: (\S+ @ \S+):.*")


def _shape(text: str) -> list[str]:
    """Lines with quoted texts, numbers, rule lines and spacing made uniform (and the
    "within noise" mark, which a busy machine's noise can add, dropped; the
    decomposition section reduced to its heading: its rows are the credited lines)."""
    out: list[str] = []
    in_parts = False  # the decomposition: one row per credited line, as many as noise allows
    for line in text.strip("\n").splitlines():
        if line.startswith("Where the speedup comes from ("):
            in_parts = True
            out.append("Where the speedup comes from")
            continue
        if in_parts:
            if line.strip():
                continue
            in_parts = False
        line = line.replace(" within noise", "")
        # a speed verdict's figure or "no significant difference" (the significance rule), and the
        # crossover's wording, follow the machine's noise: their place is checked
        line = _VERDICT.sub("SPEED", line)
        line = _CROSSOVER.sub(r"crossover: \1", line)
        line = re.sub(r"'[^']*'", "Q", line)
        line = re.sub(r"plan [0-9a-f]{16}", "plan H", line)  # the hash of the run's ports
        line = re.sub(r"-{3,}", "-", line)
        line = re.sub(r"\d+(\.\d+)?", "N", line)
        out.append(re.sub(r"\s+", " ", line).strip())
    return out


@pytest.mark.parametrize("block", _of(""), ids=lambda b: b.name)
def test_plain_block_matches_the_cli(block: Block, demo: tuple[Path, str]) -> None:
    if block.body.startswith("python -m deepseekbench"):
        subs = _subparsers()
        for line in block.body.splitlines():
            sub = subs[line.split()[3]]
            for option in re.findall(r"--[a-z][a-z-]*", line):
                assert option in sub._option_string_actions, f"{line}: {option}"
        return
    if not block.body.startswith("Scorecard ("):
        return  # an excerpt of another run (a load sweep), not the demo's output
    # the client flag (a column and a note per flag) shows only when the machine was
    # too busy to time well, in the demo's run or in the one the block shows
    printed, shown = (
        [
            ln
            for ln in _shape(_without_client_flag(text))
            if not _CLIENT_NOTE.match(ln) and not _NOISE_NOTE.match(ln)
        ]
        for text in (demo[1], block.body)  # a block may show a busy run's flags too
    )
    assert shown == printed[: len(shown)], "\n".join(shown)
    if block.path == "README.md":
        assert shown == printed  # the README shows the demo's whole output


def test_the_readme_sample_shows_the_client_column_and_explains_it() -> None:
    """The README's sample is a real demo run's output, whose busy machine flagged the
    client: the column, its note, and the text before the sample saying what they mean."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (sample,) = [b for b in _of("") if b.path == "README.md" and b.body.startswith("Scorecard (")]
    header = next(ln for ln in sample.body.splitlines() if ln.startswith("cell "))
    assert header.split()[-2:] == ["client", "speedup"]
    assert any(_CLIENT_NOTE.match(ln) for ln in sample.body.splitlines())
    before = readme[: readme.index(sample.body)]
    assert "The `client` column shows only when" in " ".join(before[-1200:].split())


def test_the_cli_synopsis_lists_every_option() -> None:
    """docs/plan.md's synopsis names every option of each command's parser, and no
    other (a line ending ``...`` lists only some), so it cannot drift from the CLI."""
    (synopsis,) = [
        b for b in _of("") if b.path == "docs/plan.md" and b.body.startswith("python -m ")
    ]
    subs = _subparsers()
    assert {line.split()[3] for line in synopsis.body.splitlines()} == set(subs)
    for line in synopsis.body.splitlines():
        sub = subs[line.split()[3]]
        documented = set(re.findall(r"--[a-z][a-z-]*", line))
        options = {o for o in sub._option_string_actions if o.startswith("--")} - {"--help"}
        if line.rstrip().endswith("..."):
            assert documented <= options, line
        else:
            assert documented == options, f"{line}: missing {sorted(options - documented)}"


def test_the_demo_fixture_runs_the_readmes_first_command_as_written() -> None:
    first = _of("bash")[0]
    assert first.path == "README.md"
    assert _commands(first.body.splitlines()[0])[-1] == "python -m deepseekbench demo"
