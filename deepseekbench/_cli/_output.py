"""What the command line prints besides the scorecard: error summaries, dry-run tables.

Holds :func:`known_secrets` and :func:`redact_text` (every key this process knows,
kept out of what is printed), :func:`exit_for` (a run's exit code),
:func:`write_error_summary` (request errors per route) and :func:`render_dry_run`
(a dry run's rows in each format).
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from deepseekbench._cli._exits import EXIT_ERRORS, EXIT_OK

if TYPE_CHECKING:
    from deepseekbench._analysis._analysis import RunResult
    from deepseekbench._plan._plan import BenchmarkPlan
    from deepseekbench._runner._dry_run import DryRunResult

__all__ = ["exit_for", "known_secrets", "redact_text", "render_dry_run", "write_error_summary"]


def known_secrets(plan: BenchmarkPlan) -> list[str]:
    """The keys this process knows for ``plan``: the gate's and each route's (from the env)."""
    from deepseekbench._net._gate import ENV_API_KEY

    names = [ENV_API_KEY, *(r.api_key_env for r in plan.routes if r.api_key_env)]
    return [v for n in names if (v := os.environ.get(n)) and v.strip()]


def redact_text(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every known secret replaced by ``***`` (older results files included):
    the one redaction, :func:`deepseekbench._types._secrets.redact`."""
    from deepseekbench._types._secrets import redact

    return redact(text, secrets)


def exit_for(result: RunResult) -> int:
    """The exit code of a finished run: ``EXIT_ERRORS`` when a measured request errored."""
    return EXIT_ERRORS if result.n_errors else EXIT_OK


def write_error_summary(result: RunResult, err: TextIO, secrets: Sequence[str]) -> None:
    """Per route: each error kind, how many requests it ended, and its first message."""
    summary = result.error_summary()
    if not summary:
        return
    err.write("request errors by route (kind × count: first message):\n")
    for e in summary:
        from deepseekbench._types._secrets import safe_server_text

        message = safe_server_text(e.first_message, secrets)  # a server's words: no escapes
        err.write(f"  {e.route}: {e.kind} × {e.count}: {message[:200]}\n")


_DRY_COLUMNS = ("route", "speculative", "cell", "load", "gate")


def _dry_table(result: DryRunResult) -> list[dict[str, str]]:
    from deepseekbench._report._scorecard import cell_id, load_point

    out: list[dict[str, str]] = []
    for row in result.rows:
        label = row.route_label or row.speculative.value
        refusal = result.refusals.get(label)
        lp = load_point(row)
        out.append(
            {
                "route": label,
                "speculative": row.speculative.value,
                "cell": cell_id(row),
                "load": lp.label if lp is not None else "—",
                "gate": f"would refuse: {refusal}" if refusal else "admitted",
            }
        )
    return out


def render_dry_run(result: DryRunResult, fmt: str) -> str:
    """The rows a dry run would measure, in ``fmt`` (text, markdown, json, csv or html:
    a self-contained page, as ``report --format html``)."""
    if fmt == "json":
        data = {
            "plan_hash": result.plan_hash,
            "n_requests": result.n_requests,
            "refusals": result.refusals,
            "launch_commands": result.launch_commands,
            "launch_env": result.launch_env,
            "rows": [row.model_dump(mode="json") for row in result.rows],
        }
        return json.dumps(data, indent=2) + "\n"
    table = _dry_table(result)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=_DRY_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
        return buf.getvalue()
    if fmt == "html":
        from deepseekbench._report._plot import html_page
        from deepseekbench._report._scorecard import html_table

        rows = [[r[c] for c in _DRY_COLUMNS] for r in table]
        summary = (
            f"<p>plan {html.escape(result.plan_hash)}: {len(result.rows)} rows, "
            f"{result.n_requests} requests would be sent; no connection opened</p>"
        )
        return html_page(
            summary + html_table(_DRY_COLUMNS, rows), None, title="deepseekbench dry run"
        )
    if fmt == "markdown":
        lines = ["| " + " | ".join(_DRY_COLUMNS) + " |", "|" + "---|" * len(_DRY_COLUMNS)]
        lines += ["| " + " | ".join(r[c] for c in _DRY_COLUMNS) + " |" for r in table]
        return "\n".join(lines) + "\n"
    widths = {c: max([len(c), *(len(r[c]) for r in table)]) for c in _DRY_COLUMNS}
    lines = ["  ".join(c.ljust(widths[c]) for c in _DRY_COLUMNS).rstrip()]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in _DRY_COLUMNS).rstrip() for r in table]
    return "\n".join(lines) + "\n"
