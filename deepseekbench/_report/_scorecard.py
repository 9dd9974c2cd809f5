"""The scorecard: one line per cell, load point and route, a speedup only where it was earned.

Each speculative row is paired with the ``off`` row of the same cell and load
(every key axis but ``speculative`` equal) and judged by
:func:`~deepseekbench.compare_speedup` (:mod:`deepseekbench._analysis._lines`).
The speedup column shows a number only when that verdict is printed; otherwise
it shows the refusal reasons. With 2 or more paired rounds a printed figure is
the geometric mean of the rounds' ratios with a Student-t interval on their
logs (:func:`paired_speedup_ci`), widened by the choice of prompts where the
requests name theirs (a paired cluster bootstrap over prompts,
``deepseekbench._analysis._prompt_bootstrap``); otherwise, with per-request samples, it
carries a 95 % bootstrap interval (``scipy.stats.bootstrap``, percentile
method, each route's requests resampled independently; Efron & Tibshirani 1993,
*An Introduction to the Bootstrap*). Refused lines list their first divergence
and every task flip; routes measured at several loads get a crossover note
(:meth:`Scorecard.crossovers`).

Holds :class:`Scorecard`: building it from rows, a run or a results file, its
queries, and its renderings, each one format of the registry
(:mod:`deepseekbench._report._formats`): :meth:`Scorecard.to_text`,
:meth:`~Scorecard.to_markdown`, :meth:`~Scorecard.to_json`,
:meth:`~Scorecard.to_csv`, ``_repr_html_`` (Jupyter), :meth:`~Scorecard.to_html`
and :meth:`~Scorecard.to_pandas` (needs the ``pandas`` extra).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deepseekbench._analysis._analysis import RunMeta, RunResult, load_results
from deepseekbench._analysis._best_config import BestConfig
from deepseekbench._analysis._capacity import CapacityReport, capacity_report
from deepseekbench._analysis._lines import (
    CategoryLine,
    ParityDetail,
    ScorecardLine,
    cell_id,
    judge_rows,
    line_key,
    load_point,
    load_words,
)
from deepseekbench._analysis._speedup import (
    SpeedupMetric,
    bootstrap_speedup_ci,
    evidence_field,
    paired_speedup_ci,
)
from deepseekbench._analysis._stopping import StoppingReport, stopping_report
from deepseekbench._errors import MissingExtraError
from deepseekbench._report import _formats
from deepseekbench._report._formats._html import html_table
from deepseekbench._report._grid import grid_choices, grid_json
from deepseekbench._report._notes import crossover_text, crossovers
from deepseekbench._types._axes import Speculative
from deepseekbench._types._clock import Clock
from deepseekbench._types._row import Row

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "CategoryLine",
    "MissingExtraError",
    "ParityDetail",
    "Scorecard",
    "ScorecardLine",
    "bootstrap_speedup_ci",
    "cell_id",
    "crossover_text",
    "html_table",
    "line_key",
    "load_point",
    "load_words",
    "paired_speedup_ci",
]


class Scorecard:
    """Scorecard lines in row order, with renderings.

    Build with :meth:`from_rows`, :meth:`from_run` or :meth:`from_results`.
    ``rows``: the rows behind the lines, in line order (empty when built from
    lines alone; :meth:`plot` needs them). ``meta``: the run's metadata (model,
    plan hash, dates, deepseekbench version, engines) when built from a run;
    every rendering carries it.
    """

    def __init__(
        self,
        lines: Sequence[ScorecardLine],
        *,
        metric: SpeedupMetric,
        client_workers: int | None = None,
        rows: Sequence[Row] = (),
        meta: RunMeta | None = None,
    ) -> None:
        self.lines: tuple[ScorecardLine, ...] = tuple(lines)
        self.meta = meta
        self.metric = metric
        self.client_workers = client_workers  # the run's plan key workers, when known
        self.rows: tuple[Row, ...] = tuple(rows)
        # depth grids (route label -> grid label) and the metric per round
        self.grids: dict[str, str] = {}
        self.round_values: Mapping[str, Mapping[int, float]] = {}
        # the clock the verdicts were judged on: the main TPOT column shows its figure
        self.clock: Clock = Clock.client
        # capacity under SLO, set by from_run when the plan has [search]
        self.capacity: CapacityReport | None = None
        # [stopping] sequential: each line's rounds and why it stopped, set by from_run
        self.stopping: StoppingReport | None = None
        # notes the caller adds about the run (a demo scenario's explanation), printed
        # after the scorecard's own notes in every format; from_run takes the run's
        # recorded ones (RunResult.run_notes)
        self.run_notes: tuple[str, ...] = ()
        # the run has no run_end record (from_rows' run_unfinished; from_run: not
        # RunResult.complete): the header says so, and each line's unfinished_reasons
        self.unfinished = False

    # ------------------------------------------------------------ building
    @classmethod
    def from_rows(
        cls,
        rows: Sequence[Row],
        *,
        samples: Mapping[str, Sequence[float]] | None = None,
        details: Mapping[str, ParityDetail] | None = None,
        metric: SpeedupMetric | str = SpeedupMetric.tpot_ms,
        n_resamples: int = 2000,
        seed: int = 0,
        rounds: Mapping[str, Mapping[int, float]] | None = None,
        clock: Clock | str = Clock.client,
        results_tampered: bool = False,
        acceptance: Mapping[str, Sequence[float]] | None = None,
        prompts: Mapping[str, Mapping[str, Mapping[int, float]]] | None = None,
        acceptance_prompts: Mapping[str, Sequence[str | None]] | None = None,
        run_unfinished: bool = False,
    ) -> Scorecard:
        """Judge every speculative row against the ``off`` row of its cell and load.

        Args:
            rows: rows of any cells, load points and routes.
            samples: per-request values of ``metric`` keyed by :func:`line_key`;
                where both sides have them, a printed speedup gets a 95 % bootstrap
                interval.
            details: first divergence and task flips keyed by :func:`line_key`.
            metric: the speedup metric (default TPOT).
            rounds: ``metric`` per round keyed by :func:`line_key`; where both sides
                share 2 or more rounds, a printed speedup's figure and interval come
                from the paired rounds (:func:`paired_speedup_ci`) instead.
            clock: ``"client"`` or ``"server"`` (see
                :func:`~deepseekbench.compare_speedup`); ``samples``/``rounds`` are then
                of the clock's own field (:func:`evidence_field`).
            results_tampered: the rows come from an edited results file: every
                speedup is refused (``results_tampered``).
            acceptance: per-request acceptance lengths (tokens per verify step) keyed
                by :func:`line_key`: the interval of each credited line's
                decomposition (:func:`~deepseekbench.decompose_speedup`);
                ``acceptance_prompts`` the prompt (workload item id) of each, same
                keys and order: the interval then resamples prompts.
            prompts: ``metric`` per prompt (workload item id) and round, keyed by
                :func:`line_key`; where both sides share enough prompts, a printed
                speedup's interval also covers the choice of prompts (a paired cluster
                bootstrap over them, combined with the rounds' interval: see
                :func:`~deepseekbench.compare_speedup`).
            run_unfinished: the rows are of a run that did not finish (no ``run_end``
                record): the header says so, and a refusal reason it may owe to
                stopping early is marked ``‡`` on its line, with one footnote
                (:func:`~deepseekbench._analysis._lines.unfinished_reasons`; no verdict
                changes).

        Raises:
            ValueError: ``metric`` is unknown.
        """
        m = SpeedupMetric(metric)
        lines = judge_rows(
            rows,
            metric=m,
            samples=samples,
            details=details,
            rounds=rounds,
            n_resamples=n_resamples,
            seed=seed,
            clock=Clock(clock),
            results_tampered=results_tampered,
            acceptance=acceptance,
            prompts=prompts,
            acceptance_prompts=acceptance_prompts,
            run_unfinished=run_unfinished,
        )
        card = cls(lines, metric=m, rows=rows)
        card.round_values = rounds or {}
        card.clock = Clock(clock)
        card.unfinished = run_unfinished
        return card

    @classmethod
    def from_run(
        cls, result: RunResult, *, metric: SpeedupMetric | str = SpeedupMetric.tpot_ms
    ) -> Scorecard:
        """The scorecard of a :class:`~deepseekbench.RunResult` (samples, rounds and
        details included; an unfinished one, ``complete`` False, says so: see
        :meth:`from_rows`' ``run_unfinished``).

        Raises:
            ValueError: ``metric`` is not a :class:`SpeedupMetric` value.
        """
        m = SpeedupMetric(metric)
        samples: dict[str, list[float]] = {}
        rounds: dict[str, dict[int, float]] = {}
        details: dict[str, ParityDetail] = {}
        acceptance: dict[str, list[float]] = {}
        prompts: dict[str, dict[str, dict[int, float]]] = {}
        acc_prompts: dict[str, list[str | None]] = {}
        clock = result.plan.clock  # the plan's clock judges
        for row, (route, cell, load) in zip(result.rows, result.row_keys, strict=True):
            key = line_key(row)
            if row.speculative is not Speculative.off:
                acceptance[key] = result.samples(route, cell, "acceptance_length", load)
                acc_prompts[key] = result.sample_prompts(route, cell, "acceptance_length", load)
            row_samples, rounds[key] = result.speedup_evidence(row, evidence_field(m, clock))
            if row_samples is not None:
                samples[key] = list(row_samples)
            by_prompt = result.prompt_evidence(row, evidence_field(m, clock))
            if by_prompt is not None:
                prompts[key] = by_prompt
            rp = result.parity.get((route, row.reasoning_mode))
            traffic = result.traffic.get((route, cell, load))
            # the parity set's divergence first (it names the prompt); the measured
            # traffic's when the parity set passed
            first = rp.first_divergence if rp is not None else None
            if first is None and traffic is not None and traffic.first_divergence is not None:
                first = "measured traffic, " + traffic.first_divergence.describe("off", route)
            details[key] = ParityDetail(
                first_divergence=first, task_flips=rp.task_flips if rp is not None else ()
            )
        card = cls.from_rows(
            result.rows,
            samples=samples,
            details=details,
            metric=m,
            rounds=rounds,
            clock=clock,
            results_tampered=result.results_tampered,
            acceptance=acceptance,
            prompts=prompts,
            acceptance_prompts=acc_prompts,
            run_unfinished=not result.complete,
        )
        card.client_workers = result.plan.pool_workers
        card.meta = result.meta
        card.run_notes = result.run_notes  # recorded with the run: report prints them too
        card.grids = {r.label: r.grid_of for r in result.plan.routes if r.grid_of is not None}
        card.capacity = capacity_report(result, metric=m)
        card.stopping = stopping_report(result)
        return card

    @classmethod
    def from_results(
        cls, path: str | Path, *, metric: SpeedupMetric | str = SpeedupMetric.tpot_ms
    ) -> Scorecard:
        """Rebuild the scorecard from a results JSONL file written by ``run_plan``.

        Raises:
            ResultsFormatError: the file cannot be read back.
            ValueError: ``metric`` is not a :class:`SpeedupMetric` value.
        """
        return cls.from_run(load_results(path), metric=metric)

    # ------------------------------------------------------------ queries
    @property
    def credited(self) -> tuple[ScorecardLine, ...]:
        """Lines that earned a speedup (:attr:`ScorecardLine.credited`: > 1, interval
        above 1, parity verified on both rows). A verified, significant slowdown is
        printed but not credited: it is in :attr:`slower`."""
        return tuple(ln for ln in self.lines if ln.credited)

    @property
    def slower(self) -> tuple[ScorecardLine, ...]:
        """Lines printing a verified, significant slowdown (figure below 1, "— slower")."""
        return tuple(
            ln for ln in self.lines if ln.verdict is not None and ln.printed and ln.verdict.slower
        )

    @property
    def refused(self) -> tuple[ScorecardLine, ...]:
        """Speculative lines with no figure printed (refused or no significant
        difference); a line in :attr:`credited` or :attr:`slower` is not refused."""
        return tuple(
            ln for ln in self.lines if ln.speculative is not Speculative.off and not ln.printed
        )

    def crossovers(self) -> tuple[str, ...]:
        """Per route and cell measured at 2 or more load points: where it stops paying
        (:func:`crossover_text` over its credited speedups, ascending load), plus the
        loads where no speedup was credited."""
        return crossovers(self.lines)

    def best_configs(self) -> list[BestConfig]:
        """The best configuration per depth grid, cell and load point :
        the highest conservative score (median of the paired-round speedups minus
        their MAD; the idea of vLLM's ``tune_speculative_k.py``) among credited
        configurations, by this scorecard's metric, never by acceptance rate
        (:mod:`deepseekbench._analysis._best_config`). Empty when the run had no
        grid (a launched route with a list of depths, draft models or methods)."""
        if not self.grids or not self.rows:
            return []
        return grid_choices(
            self.lines, self.rows, self.grids, self.round_values, self.metric, line_key
        )

    def best_config_json(self) -> str:
        """:meth:`best_configs` as JSON a deployment can read:
        ``{"metric", "score_rule", "choices": [{"grid", "cell", "load", "best",
        "score", "speedup", "spec_config", "acceptance_length",
        "acceptance_by_position", "candidates"}, ...]}``."""
        return grid_json(self.best_configs(), self.metric)

    # ------------------------------------------------------------ renderings
    def render(self, fmt: str = "text") -> str:
        """Render as one of :data:`~deepseekbench._report._formats.FORMAT_NAMES`:
        ``text``, ``markdown``, ``json``, ``csv`` or ``html`` (a whole page).

        Raises:
            ValueError: unknown format.
        """
        return _formats.render(fmt, self)

    def to_text(self) -> str:
        """A fixed-width terminal table plus notes on every refused line."""
        return _formats.render("text", self)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return (
            f"Scorecard(lines={len(self.lines)}, credited={len(self.credited)}, "
            f"refused={len(self.refused)}, metric={self.metric.value!r})"
        )

    def to_markdown(self) -> str:
        """A GitHub-flavoured Markdown table plus bullet lists of the other sections."""
        return _formats.render("markdown", self)

    def to_dict(self) -> dict[str, Any]:
        """``{"metric", "run", "lines": [...]}``; ``run`` is the run's metadata
        (:class:`~deepseekbench.RunMeta` fields, ``null`` when unknown); each line's
        ``speedup`` is ``null`` unless credited; ``best_configs`` (only when the run
        had a depth grid): :meth:`best_configs`. A run with ``[search]`` adds
        ``capacity`` (:meth:`~deepseekbench._analysis._capacity.CapacityReport.to_dict`)."""
        from deepseekbench._report._formats._json import to_dict

        return to_dict(self)

    def to_json(self) -> str:
        """:meth:`to_dict` as indented JSON text."""
        return _formats.render("json", self)

    def to_records(self) -> list[dict[str, Any]]:
        """One flat dict per line (the CSV and DataFrame columns; the run's metadata in
        ``model``, ``plan_hash``, ``run_started_at`` and ``engine``, empty when unknown)."""
        from deepseekbench._report._formats._csv import records

        return records(self)

    def to_csv(self) -> str:
        """CSV with a header row; ``speedup`` is empty unless credited."""
        return _formats.render("csv", self)

    def _repr_html_(self) -> str:
        """Every section (as in :meth:`to_text`) as an HTML fragment."""
        from deepseekbench._report._formats._html import fragment

        return fragment(self)

    def to_pandas(self) -> Any:
        """A ``pandas.DataFrame`` of :meth:`to_records`.

        Raises:
            MissingExtraError: pandas is not installed (``pip install 'deepseekbench[pandas]'``).
        """
        try:
            import pandas as pd
        except ImportError as exc:
            raise MissingExtraError(
                "Scorecard.to_pandas() needs pandas: pip install 'deepseekbench[pandas]'"
            ) from exc
        from deepseekbench._report._formats._csv import CSV_FIELDS

        return pd.DataFrame.from_records(self.to_records(), columns=list(CSV_FIELDS))

    def plot(self, path: str | Path | None = None) -> Figure:
        """Speedup vs load per route (95 % CI bars) and TPOT vs output throughput per route.

        Returns the matplotlib ``Figure`` (a notebook displays it); with ``path``
        it is also written there (format from the suffix: ``.png``, ``.svg``,
        ``.pdf``). See ``docs/scorecard.md``.

        Raises:
            MissingExtraError: matplotlib is not installed (``pip install 'deepseekbench[plot]'``).
            ValueError: the scorecard has no rows (built from lines alone), or
                ``path`` has a suffix matplotlib cannot write.
            OSError: ``path`` cannot be written.
        """
        from deepseekbench._report._plot import plot_lines, save_figure

        if len(self.rows) != len(self.lines):
            raise ValueError("plotting needs the rows: build the scorecard with from_rows/from_run")
        fig = plot_lines(self.lines, self.rows, metric=self.metric.value, capacity=self.capacity)
        if path is not None:
            save_figure(fig, path)
        return fig

    def to_html(self, *, plots: bool = True) -> str:
        """One self-contained HTML page: every section and the plots as inline PNG.

        Nothing is fetched from elsewhere (no scripts, styles or images by URL).
        Without matplotlib the page says how to get the plots
        (``pip install 'deepseekbench[plot]'``) instead of failing.
        """
        from deepseekbench._report._formats._html import page

        return page(self, plots=plots)
