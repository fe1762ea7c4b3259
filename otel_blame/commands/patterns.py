"""``otel-blame patterns DIR|STORE``: the failure patterns of saved traces or of a blame store, offline.

A directory: every file in it (not below) that is a saved run (conversation or OTLP JSON, as
``otel-blame attribute`` reads) and failed is attributed (by ``--method``, default the offline
ranker, what ``otel-blame serve`` runs; a trace that carries the
processor's ``blame.*`` keeps that verdict), described and grouped as the processor groups, in the
order the runs happened. A blame store file (``blame-store.sqlite3``): its failures keep the patterns
the processor gave them (the ids on their spans); failures kept before patterns existed are grouped
here, joining the store's patterns where they fall into one.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click

from otel_blame.commands.options import build_method, method_option
from otel_blame.patterns import DEFAULT_SIMILARITY

_MISSING_EXTRA = "otel-blame patterns needs the 'ui' extra: pip install 'otel-blame[ui]'"


@click.command("patterns")
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--since", default=None, help="Only failures of this window: 15m, 1h, 24h, 7d (default: all).")
@method_option
@click.option(
    "--similarity",
    type=click.FloatRange(0, 100, min_open=True),
    default=DEFAULT_SIMILARITY,
    show_default=True,
    help="How alike two reasons must be to be one pattern (the processor's patterns.similarity).",
)
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Patterns shown.")
@click.option(
    "--format",
    "output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="A table of at most 80 columns, or the patterns as JSON.",
)
def patterns_command(
    source: Path, since: str | None, method_name: str, similarity: float, limit: int, output: str
) -> None:
    """Group the failures of SOURCE (a directory of saved traces, or a blame store file) into failure
    patterns: what keeps breaking, how often, since when."""
    try:
        from rich.console import Console

        from otel_blame.terminal import columns
        from otel_blame.ui.top import render_patterns
        from otel_blame.ui.views import parse_duration
    except ImportError as error:
        raise click.ClickException(f"{_MISSING_EXTRA} ({error})") from None
    window = None
    if since is not None:
        try:
            window = parse_duration(since)
        except (ValueError, KeyError):
            message = f"{since!r}: expected a duration such as 15m, 1h, 24h or 7d"
            raise click.BadParameter(message, param_hint="--since") from None
    if source.is_dir():
        method = build_method(method_name, None, None, False, None)
        report = _from_traces(source, method, similarity, window, limit)
    else:
        report = _from_store(source, similarity, window, limit)
    if output == "json":
        click.echo(json.dumps(report.model_dump(mode="json"), indent=1))
        return
    console = Console(width=columns(), highlight=False)
    name = source.name or str(source)
    console.print(render_patterns(report, name, since, limit=limit, width=console.width))


def _from_store(path: Path, similarity: float, window: float | None, limit: int):  # noqa: ANN202
    from otel_blame.patterns import (
        Known,
        PatternDefinition,
        PatternIndex,
        PatternRun,
        build_report,
        cause_of,
    )
    from otel_blame.store import StoreConfig, open_store

    try:
        store = open_store(StoreConfig(path=path))
        store.count()
    except Exception as error:  # not SQLite, not a blame store, unreadable
        why = f"{type(error).__name__}: {error}"
        raise click.ClickException(
            f"{path} is neither a directory of saved traces nor a blame store ({why})"
        ) from None
    try:
        until = time.time()
        since = until - window if window is not None else 0.0
        runs, definitions, older = store.pattern_runs(since, until)
        if older:  # kept before patterns existed: grouped here, into the store's patterns where they fall
            index = PatternIndex(similarity)
            for definition in store.pattern_definitions().values():
                index.add(
                    definition.signature(),
                    Known(definition.id, definition.gist, definition.first_seen or 0.0),
                )
            for run in sorted(older, key=lambda r: r.attributed_at):
                attribution = _attribution_of(run)
                workflow = run.trajectory.task.workflow or run.trajectory.task.name
                cause = cause_of(run.service, workflow, run.trajectory, attribution)
                known, _ = index.assign(cause, run.attributed_at)
                definitions.setdefault(known.id, PatternDefinition.of(known, cause))
                runs.append(PatternRun(run.trace_id, known.id, run.agent, run.attributed_at, run.decided))
        if not runs:
            since = until - (window or 3600)
        elif window is None:
            since = min(run.at for run in runs)
        report = build_report(runs, definitions, since=since, until=until, limit=limit)
        store.add_candidates(report)
        return report
    finally:
        store.close()


def _attribution_of(run):  # noqa: ANN001, ANN202 - a StoredRun
    from otel_blame.attribution.result import Attribution

    return Attribution(
        agent=run.agent,
        step=run.step,
        confidence=run.confidence,
        decided=run.decided,
        reason=run.reason,
        method=run.method,
        candidates=run.candidates,
        category=run.category,
        dependency=run.dependency,
        failure_mode=run.failure_mode,
    )


def _from_traces(folder: Path, method, similarity: float, window: float | None, limit: int):  # noqa: ANN001, ANN202
    from otel_blame.attribution.decision import blame_decision
    from otel_blame.attribution.systemic import describe_failure
    from otel_blame.loaders import TrajectoryFormatError, load_saved_run
    from otel_blame.patterns import PatternDefinition, PatternIndex, PatternRun, build_report, cause_of
    from otel_blame.trajectory import Outcome

    index = PatternIndex(similarity)
    found = []
    skipped = 0
    for path in sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")):
        try:
            saved = load_saved_run(path)
        except (TrajectoryFormatError, OSError, ValueError, UnicodeDecodeError):
            skipped += 1
            continue
        trajectory = saved.trajectory
        if not blame_decision(trajectory).blame:
            continue
        started = next((s.start_time_unix_nano for s in trajectory.steps if s.start_time_unix_nano), None)
        at = started / 1e9 if started else os.stat(path).st_mtime
        found.append((at, path, saved))
    if skipped:
        click.echo(f"{skipped} file(s) in {folder} are not saved runs; left out", err=True)
    until = max((at for at, _, _ in found), default=time.time())
    since = until - window if window is not None else min((at for at, _, _ in found), default=until - 3600)
    runs, definitions = [], {}
    for at, path, saved in sorted(found, key=lambda item: (item[0], item[1].name)):
        if at < since:
            continue
        trajectory = saved.trajectory.model_copy(update={"outcome": Outcome.FAILURE})
        attribution = describe_failure(trajectory, saved.recorded or method.attribute(trajectory))
        workflow = trajectory.task.workflow or trajectory.task.name
        cause = cause_of(saved.service, workflow, trajectory, attribution)
        known, _ = index.assign(cause, at)
        definitions.setdefault(known.id, PatternDefinition.of(known, cause))
        runs.append(
            PatternRun(
                trajectory.trace_id or path.name,
                known.id,
                attribution.agent,
                at,
                attribution.decided,
                attribution.dependency,
                tuple(dict.fromkeys(c.agent for c in attribution.candidates)),
            )
        )
    return build_report(runs, definitions, since=since, until=until, limit=limit)
