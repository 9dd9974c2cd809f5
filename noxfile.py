"""Developer sessions: ``nox -s tests lint typecheck`` (CI runs the same via .ci/run)."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
PYTHON = ["3.11", "3.12", "3.13"]


@nox.session(python=PYTHON[0])
def tests(session: nox.Session) -> None:
    """The unit, property and loopback end-to-end tests (no real engine)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(python=PYTHON[0])
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff")
    session.run("ruff", "check", ".")


@nox.session(python=PYTHON[0])
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package, tests, benchmarks and this file."""
    session.install("-e", ".[test,dev]")
    session.run("mypy", "--strict")


@nox.session(python=PYTHON[0])
def engine(session: nox.Session) -> None:
    """Build llama.cpp's llama-server and run the real-engine tests (marker ``engine``)."""
    session.install("-e", ".[test,engine]")
    session.run("bash", ".ci/engine.sh", external=True)


@nox.session(python=PYTHON[0])
def vllm(session: nox.Session) -> None:
    """Install vLLM's CPU build in its own venv and run the real-vLLM tests (marker ``vllm``)."""
    session.install("-e", ".[test]")
    session.run("bash", ".ci/vllm.sh", external=True)


@nox.session(python=PYTHON[0])
def schema(session: nox.Session) -> None:
    """Regenerate docs/row.schema.json from the Row model."""
    session.install("-e", ".")
    session.run(
        "python",
        "-c",
        "import json, deepseekbench as d; "
        "open('docs/row.schema.json','w').write("
        "json.dumps(d.row_json_schema(), indent=2, sort_keys=True) + '\\n')",
    )
