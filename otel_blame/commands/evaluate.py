"""``otel-blame eval``: score an attribution method on a Who&When-layout dataset (a decisive agent and step
per log), a TRAIL-layout one (real traces with errors labelled on their spans) or an AEGIS-layout one
(failed runs whose faulty agents and failure modes are labelled). Every layout also reports what a
user lives with: the share of verdicts decided, how often those are right, and the risk-coverage
table."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click

from otel_blame.commands.options import (
    base_url_option,
    build_method,
    cache_option,
    escalation_option,
    ground_truth_option,
    method_option,
    model_option,
)
from otel_blame.datasets.who_and_when import SUBSETS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from otel_blame.attribution.base import AttributionMethod
    from otel_blame.attribution.registry import Escalation
    from otel_blame.evaluation.who_and_when import BaselineSummary, SubsetSummary


def _percent(value: float) -> str:
    return f"{100 * value:5.1f}%"


def _print_summaries(summaries: list[SubsetSummary]) -> None:
    """One line per subset, at most 80 columns (the LLM cost columns only when a method spent any)."""
    spent = any(s.mean_llm_calls or s.mean_input_tokens for s in summaries)
    cost_header = f" {'calls':>5} {'in tok':>7} {'out':>6}" if spent else ""
    click.echo(
        f"{'subset':<19} {'logs':>4} {'agent':>6} {'step':>6} {'±1':>6} {'±3':>6}{cost_header} {'sec':>6}"
    )
    for s in summaries:
        cost = (
            f" {s.mean_llm_calls:>5.1f} {s.mean_input_tokens:>7.0f} {s.mean_output_tokens:>6.0f}"
            if spent
            else ""
        )
        click.echo(
            f"{s.subset:<19} {s.traces:>4} {_percent(s.agent_accuracy):>6} {_percent(s.step_accuracy):>6} "
            f"{_percent(s.step_within_1):>6} {_percent(s.step_within_3):>6}{cost} {s.mean_seconds:>6.2f}"
        )
        if s.failed:
            click.echo(f"{'':<19} ({s.failed} unanswered)")
    click.echo("step ±1, ±3: the step within one or three of the labelled one; sec: per log")


def _print_baselines(summaries: list[SubsetSummary], baselines: list[BaselineSummary]) -> None:
    """Positional baselines on the same logs, and the method's margin over the best of them."""
    from otel_blame.evaluation.who_and_when import best_baseline
    from otel_blame.terminal import wrap

    click.echo("\nbaselines on the same logs (agent / step), and the margin over the best:")
    for s in summaries:
        click.echo(f"{s.subset}:")
        for b in (b for b in baselines if b.subset == s.subset):
            accuracy = f"{_percent(b.agent_accuracy):>6} {_percent(b.step_accuracy):>6}"
            line = f"  {b.name:<25} {accuracy}  "
            described = wrap(b.description, 80 - len(line)).splitlines()
            click.echo(line + described[0])
            for more in described[1:]:
                click.echo(" " * len(line) + more)
        by_agent, by_step = best_baseline(baselines, s.subset)
        margin = (
            f"margin over best baseline: agent {100 * (s.agent_accuracy - by_agent.agent_accuracy):+.1f} "
            f"points (vs {by_agent.name}), step {100 * (s.step_accuracy - by_step.step_accuracy):+.1f} "
            f"points (vs {by_step.name})"
        )
        click.echo(wrap(margin, 80, indent="  "))


@click.command("eval")
@click.option(
    "--dataset",
    "dataset_dir",
    required=True,
    type=click.Path(exists=True, path_type=Path),
    help="A directory with the Who&When layout (Algorithm-Generated/*.json, Hand-Crafted/*.json), the "
    "TRAIL layout (traces/*.json[.gz] span trees or OTLP exports, annotations/*.json span-level labels), "
    "or the AEGIS layout (a *.jsonl[.gz] of runs with faulty_agents, or a directory holding one).",
)
@click.option(
    "--subset",
    "subsets",
    multiple=True,
    help=f"Only these subsets (repeatable): {', '.join(SUBSETS)}; for TRAIL, the traces' name prefix "
    "(gaia, swe_bench); for AEGIS, system shapes (debate, graph-nodes, magentic-one, ...).",
)
@method_option
@model_option
@base_url_option
@ground_truth_option
@cache_option
@escalation_option
@click.option(
    "--limit", type=click.IntRange(min=1), default=None, help="At most N logs from each subset (AEGIS: all)."
)
@click.option(
    "--out",
    "out_path",
    required=True,
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Predictions JSONL, one object per log.",
)
def eval_command(
    dataset_dir: Path,
    subsets: tuple[str, ...],
    method_name: str,
    model: str | None,
    base_url: str | None,
    with_ground_truth: bool,
    cache_dir: Path | None,
    escalation: Escalation,
    limit: int | None,
    out_path: Path,
) -> None:
    """Score a method on a Who&When-layout dataset by exact match, on a TRAIL-layout dataset by its
    span-level labels, or on an AEGIS-layout dataset by its faulty agents and failure modes; write
    predictions to --out."""
    from otel_blame.datasets.aegis import is_aegis_dataset
    from otel_blame.datasets.trail import is_trail_dataset

    if is_aegis_dataset(dataset_dir):
        method = build_method(method_name, model, base_url, with_ground_truth, cache_dir, escalation)
        _eval_aegis(dataset_dir, subsets, method, limit, out_path)
        return
    if not dataset_dir.is_dir():
        raise click.BadParameter(f"{dataset_dir}: not a directory, nor AEGIS runs", param_hint="--dataset")
    if is_trail_dataset(dataset_dir):
        method = build_method(method_name, model, base_url, with_ground_truth, cache_dir, escalation)
        _eval_trail(dataset_dir, subsets, method, limit, out_path)
        return
    unknown = [subset for subset in subsets if subset not in SUBSETS]
    if unknown:
        raise click.BadParameter(
            f"{', '.join(unknown)}: not a Who&When subset; choose from {', '.join(SUBSETS)}",
            param_hint="--subset",
        )
    from otel_blame.evaluation.who_and_when import (
        evaluate,
        evaluate_baselines,
        select_files,
        summarise,
    )

    try:
        files = select_files(dataset_dir, subsets or SUBSETS, limit)
    except FileNotFoundError as error:
        raise click.ClickException(str(error)) from None
    method = build_method(method_name, model, base_url, with_ground_truth, cache_dir, escalation)
    records = _predict_each(
        files, method.name, out_path, lambda bar, write: evaluate(method, dataset_dir, bar, on_record=write)
    )
    summaries = summarise(records)
    _print_summaries(summaries)
    _print_baselines(summaries, evaluate_baselines(dataset_dir, files))
    _print_decided(records, key=lambda record: record.file.split("/", 1)[0])
    click.echo(f"predictions: {out_path}")


def _eval_trail(
    dataset_dir: Path, subsets: tuple[str, ...], method: AttributionMethod, limit: int | None, out_path: Path
) -> None:
    """hit@1, hit@1 on HIGH-impact errors, hit@3 and the agent and step of the earliest HIGH-impact
    error, beside first-step, last-step, first-failed-step and random baselines on the same traces."""
    from otel_blame.datasets.trail import trail_files
    from otel_blame.evaluation.trail import evaluate_trail, summarise_trail, trail_baselines, trail_table
    from otel_blame.loaders import TrajectoryFormatError

    try:
        files = trail_files(dataset_dir, limit)
    except FileNotFoundError as error:
        raise click.ClickException(str(error)) from None
    if subsets:
        files = [path for path in files if path.name.split("-", 1)[0] in subsets]
        if not files:
            raise click.ClickException(f"no traces of subset {', '.join(subsets)} under {dataset_dir}/traces")
    method_name = method.name
    records = _predict_each(
        files,
        method_name,
        out_path,
        lambda bar, write: evaluate_trail(method, dataset_dir, bar, on_record=write),
    )
    try:
        baselines = trail_baselines(dataset_dir, files)
    except TrajectoryFormatError as error:
        raise click.ClickException(str(error)) from None
    rows = summarise_trail(records, name=method_name) + baselines
    click.echo("span-level labels (%): hit@1, hit@1 on HIGH-impact errors, hit@3; agent and")
    click.echo("step of the earliest HIGH-impact error (TRAIL's closest to a decisive step)")
    for line in trail_table(rows, method_name):
        click.echo(line)
    _print_decided(records, key=lambda record: record.subset, right=lambda record: record.hit1, what="hit@1")
    click.echo(f"predictions: {out_path}")


def _eval_aegis(
    dataset: Path, shapes: tuple[str, ...], method: AttributionMethod, limit: int | None, out_path: Path
) -> None:
    """The blamed agent against the faulty ones, decided verdicts, and the failure mode named against
    the blamed agent's labelled one (its MAST group too), per system shape, beside a random speaker."""
    from otel_blame.datasets.aegis import iter_runs
    from otel_blame.evaluation.aegis import aegis_table, evaluate_aegis, summarise_aegis
    from otel_blame.loaders import TrajectoryFormatError

    try:
        runs = [run for run in iter_runs(dataset) if not shapes or run.shape in shapes][:limit]
    except (FileNotFoundError, TrajectoryFormatError) as error:
        raise click.ClickException(str(error)) from None
    if not runs:
        raise click.ClickException(f"no runs of shape {', '.join(shapes)} in {dataset}")
    by_file = {f"aegis:{run.line}": run for run in runs}
    records = _predict_each(
        [Path(name) for name in by_file],
        method.name,
        out_path,
        lambda bar, write: evaluate_aegis(method, (by_file[str(path)] for path in bar), on_record=write),
    )
    click.echo("faulty agent named % (random: a speaker picked at random); decided share and how")
    click.echo("often right; failure mode and MAST group %, where the blamed agent is faulty")
    for line in aegis_table(summarise_aegis(records)):
        click.echo(line)
    _print_decided(records, key=lambda record: record.shape, decided_table=False)
    click.echo(f"predictions: {out_path}")


def _print_decided(
    records: Iterable[Any],
    *,
    key: Callable[[Any], str],
    right: Callable[[Any], bool] = lambda record: bool(record.agent_correct),
    what: str = "agent",
    decided_table: bool = True,
) -> None:
    """Decided verdicts (share, and how often right) and the risk-coverage table, per group."""
    from otel_blame.evaluation.coverage import coverage_lines, decided_summary, percent

    groups: dict[str, list[Any]] = {}
    for record in records:
        groups.setdefault(key(record), []).append(record)
    if not groups:
        return
    if decided_table:
        click.echo(f"\ndecided verdicts: share of runs, and {what} right among them, %")
        for name, group in groups.items():
            found = decided_summary([(record.decided, right(record)) for record in group])
            share, accuracy = percent(found.share), percent(found.accuracy)
            click.echo(f"  {name[:24]:<24} {share:>6} decided, {accuracy:>6} right")
    click.echo("")
    curves = [(name, [(r.confidence or 0.0, right(r)) for r in group]) for name, group in groups.items()]
    for line in coverage_lines(curves, what):
        click.echo(line)


class _Record(Protocol):
    """A scored file: a Who&When prediction or a TRAIL record."""

    file: str

    def model_dump(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=_Record)


def _predict_each(
    files: list[Path],
    label: str,
    out_path: Path,
    predict: Callable[[Iterable[Path], Callable[[R, Exception | None], None]], list[R]],
) -> list[R]:
    """``predict`` over ``files`` behind a progress bar on stderr, each record written to ``out_path``
    (JSON lines) as it comes, so a long run interrupted keeps what it scored; the first ten files the
    method could not answer are named on stderr."""
    from otel_blame.loaders import TrajectoryFormatError

    out_path.parent.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with out_path.open("w", encoding="utf-8") as out:

        def write(record: R, error: Exception | None) -> None:
            out.write(json.dumps(record.model_dump()) + "\n")
            out.flush()
            if error is not None:
                errors.append(f"{record.file}: {error}")

        with click.progressbar(
            files, label=label, file=sys.stderr, show_pos=True, item_show_func=lambda p: p and p.name
        ) as bar:
            try:
                records = predict(bar, write)
            except TrajectoryFormatError as error:
                raise click.ClickException(str(error)) from None
    for line in errors[:10]:
        click.echo(f"unanswered: {line}", err=True)
    return records
