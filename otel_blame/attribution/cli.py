"""``otel-blame attribute`` (one saved run) and ``otel-blame eval`` (a Who&When-layout dataset)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

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
from otel_blame.loaders import (
    Annotation,
    SavedRun,
    TrajectoryFormatError,
    load_saved_run,
    parse_saved_run,
    read_text,
)
from otel_blame.trajectory import Outcome, Trajectory

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


LARGE_FILE_BYTES = 5 * 1024 * 1024
_EXCERPT = 72
_GENERIC_ROLES = {"assistant", "user", "system", "tool", "function", "human", "ai"}


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _EXCERPT else flat[: _EXCERPT - 1] + "…"


def _matches(annotation: Annotation, attribution: Attribution | None) -> dict[str, bool | None]:
    if attribution is None:
        return {"agent_matches": None, "step_matches": None}
    agent = None if annotation.agent is None else annotation.agent == attribution.agent
    step = None if annotation.step is None else annotation.step == attribution.step
    return {"agent_matches": agent, "step_matches": step}


def _verdict_json(
    run: SavedRun, attribution: Attribution | None, recorded: bool, scores: dict[int, float]
) -> dict[str, Any]:
    """The JSON answer: the Attribution's fields at the top level, plus what the table shows."""
    trajectory = run.trajectory
    out: dict[str, Any] = (
        attribution.model_dump(mode="json") if attribution else {"agent": None, "step": None}
    )
    out["outcome"] = trajectory.outcome.value
    out["blamed"] = attribution is not None
    out["recorded"] = recorded
    out["steps"] = [
        {"step": step.index, "agent": step.agent, "kind": step.kind.value, "score": scores.get(step.index)}
        for step in trajectory.steps
    ]
    if run.annotation is not None:
        out["annotation"] = run.annotation.model_dump() | _matches(run.annotation, attribution)
    return out


def _category_text(attribution: Attribution) -> str:
    """``dependency (web_search)``, ``agent``, or empty when the method did not say."""
    if attribution.category == "dependency" and attribution.dependency:
        return f"dependency ({attribution.dependency})"
    return attribution.category or ""


def _mode_text(attribution: Attribution) -> str:
    """The MAST failure mode with its number, e.g. ``premature_termination (MAST FM-3.1)``."""
    from otel_blame.attribution.systemic import FAILURE_MODES

    if not attribution.failure_mode:
        return ""
    known = FAILURE_MODES.get(attribution.failure_mode)
    return f"{attribution.failure_mode} (MAST {known[0]})" if known else attribution.failure_mode


def _print_verdict(console: Any, run: SavedRun, attribution: Attribution | None, recorded: bool) -> None:
    from rich.text import Text

    trajectory = run.trajectory
    if attribution is not None:
        role = trajectory.steps[attribution.step].role if attribution.step < len(trajectory.steps) else None
        shown_role = role and role != attribution.agent and role.lower() not in _GENERIC_ROLES
        step_text = f"{attribution.step}" + (f"  ({role})" if shown_role else "")
        model = f"  (model {attribution.model})" if attribution.model else ""
        for label, value in (
            ("agent", attribution.agent),
            ("step", step_text),
            ("confidence", f"{attribution.confidence:.2f}"),
            ("reason", attribution.reason),
            ("method", attribution.method + model),
            ("category", _category_text(attribution)),
            ("mode", _mode_text(attribution)),
            (
                "cross-run",
                f"{attribution.cross_run_suspiciousness:.2f} suspiciousness"
                if attribution.cross_run_suspiciousness is not None
                else "",
            ),
        ):
            if value:
                console.print(Text.assemble((f"{label + ':':<12}", "bold"), value))
        if recorded:
            note = "blame recorded in the file by the processor (blame.*); --recompute attributes it again"
            console.print(Text(note, style="dim"))
        cost = attribution.cost
        if cost.llm_calls:
            spent = (
                f"{cost.llm_calls} LLM calls, {cost.input_tokens} input + {cost.output_tokens} output "
                f"tokens, {cost.seconds:.1f}s"
            )
            console.print(Text.assemble(("cost:       ", "bold"), spent))
    annotation = run.annotation
    if annotation is None:
        return
    known = f"{annotation.agent} at step {annotation.step}"
    if attribution is None:
        console.print(Text.assemble(("annotation: ", "bold"), known))
        return
    verdict = _matches(annotation, attribution)
    agent_ok, step_ok = verdict["agent_matches"], verdict["step_matches"]
    if agent_ok and step_ok:
        said, style = "agent and step match", "green"
    elif agent_ok:
        said, style = "agent matches, step does not", "yellow"
    elif step_ok:
        said, style = "step matches, agent does not", "yellow"
    else:
        said, style = "does not match", "red"
    console.print(Text.assemble(("annotation: ", "bold"), f"{known}: the verdict ", (said, style)))


def _print_table(
    run: SavedRun, attribution: Attribution | None, recorded: bool, scores: dict[int, float], file: Path
) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False, soft_wrap=False)
    trajectory = run.trajectory
    console.print(Text.assemble(("file:       ", "bold"), str(file)))
    console.print(Text.assemble(("outcome:    ", "bold"), trajectory.outcome.value))
    _print_verdict(console, run, attribution, recorded)
    table = Table(title="steps", title_justify="left", expand=True)
    widest_agent = max((len(step.agent) for step in trajectory.steps), default=5)
    widest_kind = max((len(step.kind.value) for step in trajectory.steps), default=4)
    table.add_column("step", justify="right", no_wrap=True, min_width=4)
    table.add_column("agent", no_wrap=True, min_width=min(widest_agent, 24))
    table.add_column("kind", no_wrap=True, min_width=widest_kind)
    table.add_column("score", justify="right", no_wrap=True, min_width=5)
    table.add_column("content", overflow="ellipsis", no_wrap=True, ratio=1)
    table.add_column("", no_wrap=True, min_width=7)
    annotation = run.annotation
    for step in trajectory.steps:
        score = scores.get(step.index)
        marks, style = [], None
        if attribution is not None and step.index == attribution.step:
            marks.append("culprit")
            style = "bold red"
        if annotation is not None and annotation.step == step.index:
            marks.append("annotated")
        table.add_row(
            str(step.index),
            Text(step.agent),
            step.kind.value,
            "" if score is None else f"{score:.2f}",
            Text(_excerpt(step.content)),
            ", ".join(marks),
            style=style,
        )
    console.print(table)


def _not_failed_message(outcome: Outcome) -> str:
    if outcome is Outcome.SUCCESS:
        return "The run succeeded: nothing to blame. Pass --assume-failed to blame a step anyway."
    return (
        "The file does not say whether the run failed (outcome unknown): nothing blamed. "
        "Pass --assume-failed to treat it as a failed run."
    )


@click.command("attribute")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_method_option
@_model_option
@_base_url_option
@_ground_truth_option
@_cache_option
@click.option(
    "--assume-failed",
    is_flag=True,
    help="Blame a step even when the file says the run succeeded or does not say how it ended.",
)
@click.option(
    "--recompute",
    is_flag=True,
    help="Attribute again even when the file already carries the processor's blame.* attributes.",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Output: 'table' prints the verdict and a per-step table; 'json' prints one JSON object.",
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show progress while reading and attributing (default: on for files over 5 MB on a terminal).",
)
def attribute_command(
    file: Path,
    method_name: str,
    model: str | None,
    base_url: str | None,
    with_ground_truth: bool,
    cache_dir: Path | None,
    assume_failed: bool,
    recompute: bool,
    output_format: str,
    as_json: bool,
    progress: bool | None,
) -> None:
    """Name the agent and step that caused a failed run saved in FILE.

    FILE is a conversation ({"history": [...]} or {"conversation": [...]}, Who&When logs
    included) or an OTLP JSON export of one trace (Collector file exporter, Jaeger
    /api/v3/traces). A run that succeeded, or whose outcome the file does not give, is reported
    as such and blamed only with --assume-failed. Blame that the processor already wrote on the
    spans (blame.*) is shown as recorded unless --recompute. When the file names the known
    mistake (Who&When mistake_agent and mistake_step), the output says whether the verdict
    matches it.
    """
    from rich.console import Console

    fmt = "json" if as_json else output_format
    stderr = Console(stderr=True)
    if progress is None:
        progress = stderr.is_terminal and file.stat().st_size > LARGE_FILE_BYTES
    run = _load_run(file, stderr if progress else None)
    trajectory = run.trajectory
    attribution: Attribution | None = None
    recorded = False
    scores: dict[int, float] = {}
    if run.recorded is not None and not recompute:
        attribution, recorded, scores = run.recorded, True, dict(run.recorded_scores)
    elif trajectory.outcome is Outcome.FAILURE or assume_failed:
        method = _build_method(method_name, model, base_url, with_ground_truth, cache_dir)
        failed = trajectory.model_copy(update={"outcome": Outcome.FAILURE})
        given = _redacted_for(method_name, failed)
        try:
            if progress:
                with stderr.status(f"attributing {len(failed.steps)} steps with {method_name}"):
                    attribution = method.attribute(given)
            else:
                attribution = method.attribute(given)
        except AttributionError as error:
            raise click.ClickException(f"{method_name}: {error}") from None
        scores = {candidate.step: candidate.score for candidate in attribution.candidates}
    if fmt == "json":
        click.echo(json.dumps(_verdict_json(run, attribution, recorded, scores), indent=2))
    else:
        _print_table(run, attribution, recorded, scores, file)
    if attribution is None:
        click.echo(_not_failed_message(trajectory.outcome), err=fmt == "json")


def _redacted_for(method_name: str, trajectory: Trajectory) -> Trajectory:
    """What leaves the machine for an LLM method is redacted, as in the processor."""
    if not is_llm_method(method_name):
        return trajectory
    from otel_blame.redaction import Redactor, redact_trajectory

    return redact_trajectory(trajectory, Redactor())


def _load_run(file: Path, progress_console: Any) -> SavedRun:
    """Load FILE; with a console, a byte progress bar while reading, then a parsing spinner."""
    try:
        if progress_console is None:
            return load_saved_run(file)
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

        with Progress(
            TextColumn("reading {task.description}"),
            BarColumn(),
            DownloadColumn(),
            console=progress_console,
            transient=True,
        ) as bar:
            task = bar.add_task(file.name, total=file.stat().st_size)
            text = read_text(file, lambda done, total: bar.update(task, completed=done, total=total))
        with progress_console.status(f"parsing {file.name}"):
            return parse_saved_run(text, str(file))
    except TrajectoryFormatError as error:
        raise click.ClickException(str(error)) from None


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
