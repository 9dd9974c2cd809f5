"""Developer sessions: ``nox -s tests lint typecheck typing ray`` (CI runs the same via .ci/run).

``tests`` is README's test command (markers ``engine``, ``vllm``, ``ray`` and ``typing``
deselected by pyproject's ``addopts``); each of those markers has a session of its own.
"""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck", "typing", "ray"]
PYTHON = ["3.11", "3.12", "3.13"]


def _pytest(session: nox.Session, extras: str, *args: str) -> None:
    session.install("-e", f".[{extras}]")
    session.run("python", "-m", "pytest", *args, *session.posargs)


@nox.session(python=PYTHON[0])
def tests(session: nox.Session) -> None:
    """The unit, property and loopback end-to-end tests (no real engine), in parallel."""
    _pytest(session, "test", "-n", "auto")


@nox.session(python=PYTHON[0])
def typing(session: nox.Session) -> None:
    """mypy --strict on user code outside the repository (marker ``typing``)."""
    _pytest(session, "test,dev", "-m", "typing")


@nox.session(python=PYTHON[0])
def ray(session: nox.Session) -> None:
    """RayPool against a local Ray instance on 127.0.0.1 (marker ``ray``)."""
    _pytest(session, "test,ray", "-m", "ray")


@nox.session(python=PYTHON[0])
def lint(session: nox.Session) -> None:
    """ruff lint and format check over the whole tree."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


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
