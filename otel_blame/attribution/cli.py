"""``otel-blame attribute`` (one saved run) and ``otel-blame eval`` (a Who&When-layout dataset)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from otel_blame.attribution.base import AttributionError, AttributionMethod
from otel_blame.attribution.llm_client import LLMSettings
from otel_blame.attribution.registry import DEFAULT_METHOD, METHOD_NAMES, create_method, is_llm_method
from otel_blame.attribution.result import Attribution
from otel_blame.bench.evaluate import (
    BaselineSummary,
    PredictionRecord,
    SubsetSummary,
    best_baseline,
    evaluate,
    evaluate_baselines,
    select_files,
    summarise,
)
from otel_blame.bench.who_and_when import SUBSETS
from otel_blame.loaders import TrajectoryFormatError, load_trajectory

_method_option = click.option(
    "--method",
    "method_name",
    type=click.Choice(METHOD_NAMES),
    default=DEFAULT_METHOD,
    show_default=True,
    help="Attribution method; 'heuristic' needs no LLM.",
)
_model_option = click.option(
    "--model", default=None, help="LLM model (default: $OTEL_BLAME_MODEL or gpt-4o)."
)
_base_url_option = click.option(
    "--base-url", default=None, help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL, else OpenAI)."
)
_ground_truth_option = click.option(
    "--with-ground-truth", is_flag=True, help="Show the expected answer to the method, when the file has one."
)
_cache_option = click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Cache LLM answers here.",
)


def _build_method(
    method_name: str, model: str | None, base_url: str | None, with_ground_truth: bool, cache_dir: Path | None
) -> AttributionMethod:
    settings = None
    if is_llm_method(method_name):
        settings = LLMSettings.from_env(model=model, base_url=base_url, cache_dir=cache_dir)
    try:
        return create_method(method_name, llm=settings, with_ground_truth=with_ground_truth)
    except AttributionError as error:
        raise click.ClickException(str(error)) from None


def _print_attribution(attribution: Attribution, roles: dict[int, str]) -> None:
    click.echo(f"agent:      {attribution.agent}")
    role = roles.get(attribution.step)
    click.echo(
        f"step:       {attribution.step}" + (f"  ({role})" if role and role != attribution.agent else "")
    )
    click.echo(f"confidence: {attribution.confidence:.2f}")
    click.echo(f"reason:     {attribution.reason}")
    click.echo(
        f"method:     {attribution.method}" + (f"  (model {attribution.model})" if attribution.model else "")
    )
    if len(attribution.candidates) > 1:
        click.echo(
            "candidates: "
            + ", ".join(f"step {c.step} {c.agent} {c.score:.2f}" for c in attribution.candidates)
        )
    cost = attribution.cost
    if cost.llm_calls:
        click.echo(
            f"cost:       {cost.llm_calls} LLM calls, {cost.input_tokens} input + "
            f"{cost.output_tokens} output tokens, {cost.seconds:.1f}s"
        )


@click.command("attribute")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_method_option
@_model_option
@_base_url_option
@_ground_truth_option
@_cache_option
@click.option("--json", "as_json", is_flag=True, help="Print the Attribution as JSON.")
def attribute_command(
    file: Path,
    method_name: str,
    model: str | None,
    base_url: str | None,
    with_ground_truth: bool,
    cache_dir: Path | None,
    as_json: bool,
) -> None:
    """Name the agent and step that caused a failed run saved in FILE.

    FILE is a conversation ({"history": [...]} / {"conversation": [...]}, Who&When logs included)
    or an OTLP JSON export of one trace (Collector file exporter, Jaeger /api/v3/traces).
    """
    try:
        trajectory = load_trajectory(file)
    except TrajectoryFormatError as error:
        raise click.ClickException(str(error)) from None
    method = _build_method(method_name, model, base_url, with_ground_truth, cache_dir)
    try:
        attribution = method.attribute(trajectory)
    except AttributionError as error:
        raise click.ClickException(f"{method_name}: {error}") from None
    if as_json:
        click.echo(attribution.model_dump_json(indent=2))
    else:
        _print_attribution(attribution, {step.index: step.role for step in trajectory.steps})


def _percent(value: float) -> str:
    return f"{100 * value:5.1f}%"


def _print_summaries(summaries: list[SubsetSummary]) -> None:
    header = (
        f"{'subset':<20} {'logs':>5} {'agent':>7} {'step':>7} {'step±1':>7} {'step±3':>7} "
        f"{'calls':>6} {'in tok':>8} {'out tok':>8} {'sec':>7}"
    )
    click.echo(header)
    for s in summaries:
        click.echo(
            f"{s.subset:<20} {s.traces:>5} {_percent(s.agent_accuracy):>7} {_percent(s.step_accuracy):>7} "
            f"{_percent(s.step_within_1):>7} {_percent(s.step_within_3):>7} {s.mean_llm_calls:>6.1f} "
            f"{s.mean_input_tokens:>8.0f} {s.mean_output_tokens:>8.0f} {s.mean_seconds:>7.3f}"
            + (f"   ({s.failed} unanswered)" if s.failed else "")
        )


def _print_baselines(summaries: list[SubsetSummary], baselines: list[BaselineSummary]) -> None:
    """Positional baselines on the same logs, and the method's margin over the best of them."""
    click.echo("\nbaselines on the same logs (agent / step), and the method's margin over the best:")
    for s in summaries:
        click.echo(f"{s.subset}:")
        for b in (b for b in baselines if b.subset == s.subset):
            accuracy = f"{_percent(b.agent_accuracy):>7} {_percent(b.step_accuracy):>7}"
            click.echo(f"  {b.name:<26} {accuracy}  {b.description}")
        by_agent, by_step = best_baseline(baselines, s.subset)
        click.echo(
            f"  margin over best baseline: agent {100 * (s.agent_accuracy - by_agent.agent_accuracy):+.1f} "
            f"points (vs {by_agent.name}), step {100 * (s.step_accuracy - by_step.step_accuracy):+.1f} "
            f"points (vs {by_step.name})"
        )


@click.command("eval")
@click.option(
    "--dataset",
    "dataset_dir",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A directory with the Who&When layout: Algorithm-Generated/*.json, Hand-Crafted/*.json.",
)
@click.option(
    "--subset", "subsets", multiple=True, type=click.Choice(SUBSETS), help="Only these subsets (repeatable)."
)
@_method_option
@_model_option
@_base_url_option
@_ground_truth_option
@_cache_option
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most N logs from each subset.")
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
    limit: int | None,
    out_path: Path,
) -> None:
    """Score a method on a Who&When-layout dataset by exact match; write predictions to --out."""
    try:
        files = select_files(dataset_dir, subsets or SUBSETS, limit)
    except FileNotFoundError as error:
        raise click.ClickException(str(error)) from None
    method = _build_method(method_name, model, base_url, with_ground_truth, cache_dir)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with out_path.open("w", encoding="utf-8") as out:

        def write(record: PredictionRecord, error: AttributionError | None) -> None:
            out.write(json.dumps(record.model_dump()) + "\n")
            out.flush()
            if error is not None:
                errors.append(f"{record.file}: {error}")

        with click.progressbar(
            files,
            label=f"{method_name}",
            file=sys.stderr,
            show_pos=True,
            item_show_func=lambda p: p and p.name,
        ) as bar:
            try:
                records = evaluate(method, dataset_dir, bar, on_record=write)
            except TrajectoryFormatError as error:
                raise click.ClickException(str(error)) from None
    for line in errors[:10]:
        click.echo(f"unanswered: {line}", err=True)
    summaries = summarise(records)
    _print_summaries(summaries)
    _print_baselines(summaries, evaluate_baselines(dataset_dir, files))
    click.echo(f"predictions: {out_path}")
