"""``otel-blame attribute``: name the agent and step that broke one saved run.

Whether the run is blamed at all is :func:`otel_blame.attribution.decision.blame_decision`, the
one decision the processor, the API and the web UI take too. Everything heavier than click is
imported inside the command, so a call on a small file is quick (see docs/benchmarks.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from otel_blame.commands.options import (
    base_url_option,
    build_method,
    cache_option,
    ground_truth_option,
    method_option,
    model_option,
)

if TYPE_CHECKING:
    from rich.console import Console

    from otel_blame.attribution.decision import BlameDecision
    from otel_blame.attribution.result import Attribution
    from otel_blame.loaders import Annotation, SavedRun
    from otel_blame.trajectory import Trajectory

LARGE_FILE_BYTES = 5 * 1024 * 1024
_GENERIC_ROLES = {"assistant", "user", "system", "tool", "function", "human", "ai"}
# the kind column's short names, so the step table fits 80 columns
_KIND_SHORT = {"message": "msg", "tool": "tool", "code_execution": "code"}
CULPRIT_MARK, CANDIDATE_MARK, ANNOTATED_MARK = "►", "?", "◆"


def annotation_matches(annotation: Annotation, attribution: Attribution | None) -> dict[str, bool | None]:
    """Whether the verdict's agent and step are the file's known answer (None: nothing to compare);
    agent names compared case- and space-insensitively."""
    from otel_blame.attribution.known_answer import same_agent

    if attribution is None:
        return {"agent_matches": None, "step_matches": None}
    agent = None if annotation.agent is None else same_agent(annotation.agent, attribution.agent)
    step = None if annotation.step is None else annotation.step == attribution.step
    return {"agent_matches": agent, "step_matches": step}


def annotation_verdict(annotation: Annotation, attribution: Attribution | None) -> tuple[str, str]:
    """(``agent and step match`` …, a style word: good, partial, bad, none) for the annotation line."""
    from otel_blame.attribution.known_answer import compare

    if attribution is None:
        return "", "none"
    return compare(annotation.agent, annotation.step, attribution.agent, attribution.step)


def _verdict_json(
    run: SavedRun,
    decision: BlameDecision,
    attribution: Attribution | None,
    recorded: bool,
    scores: dict[int, float],
) -> dict[str, Any]:
    """The JSON answer: the Attribution's fields at the top level, plus what the table shows."""
    trajectory = run.trajectory
    out: dict[str, Any] = (
        attribution.model_dump(mode="json") if attribution else {"agent": None, "step": None}
    )
    out["outcome"] = trajectory.outcome.value
    out["blamed"] = attribution is not None
    if attribution is not None:
        from otel_blame.attribution.decision import undecided_sentence

        out["verdict"] = (
            f"{attribution.agent} at step {attribution.step}"
            if attribution.decided
            else undecided_sentence(attribution.candidates, attribution.agent, attribution.step)
        )
    out["decision"] = decision.model_dump(mode="json")
    out["recorded"] = recorded
    out["steps"] = [
        {"step": step.index, "agent": step.agent, "kind": step.kind.value, "score": scores.get(step.index)}
        for step in trajectory.steps
    ]
    if run.annotation is not None:
        out["annotation"] = run.annotation.model_dump() | annotation_matches(run.annotation, attribution)
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


def _verdict_rows(
    run: SavedRun, decision: BlameDecision, attribution: Attribution | None, recorded: bool, forced: bool
) -> list[tuple[str, Any]]:
    """(label, text) lines of the verdict, first thing printed: who and where (or "Undecided: …"),
    why, how; for a run not blamed, why not; and the known answer when the file gives one."""
    from rich.text import Text

    from otel_blame.attribution.decision import undecided_sentence

    trajectory = run.trajectory
    rows: list[tuple[str, Any]] = []
    if attribution is None:
        hint = " Pass --assume-failed to blame a step anyway." if trajectory.steps else ""
        rows.append(("verdict", Text(decision.why + hint, style="bold")))
    else:
        role = trajectory.steps[attribution.step].role if attribution.step < len(trajectory.steps) else None
        shown_role = role and role != attribution.agent and role.lower() not in _GENERIC_ROLES
        step_text = f"{attribution.step}" + (f"  ({role})" if shown_role else "")
        model = f"  (model {attribution.model})" if attribution.model else ""
        cost = attribution.cost
        spent = (
            f"{cost.llm_calls} LLM calls, {cost.input_tokens} input + {cost.output_tokens} output "
            f"tokens, {cost.seconds:.1f}s"
            if cost.llm_calls
            else ""
        )
        cross_run = attribution.cross_run_suspiciousness
        if attribution.decided:
            named: list[tuple[str, Any]] = [
                ("agent", Text(attribution.agent, style="bold red")),
                ("step", step_text),
            ]
            reason: Any = attribution.reason
        else:
            sentence = undecided_sentence(attribution.candidates, attribution.agent, attribution.step)
            named = [("verdict", Text(sentence, style="bold yellow"))]
            reason = Text.assemble(("the first candidate: ", "dim"), attribution.reason)
        for label, value in (
            *named,
            ("confidence", f"{attribution.confidence:.2f}"),
            ("reason", reason),
            ("method", attribution.method + model),
            ("category", _category_text(attribution)),
            ("mode", _mode_text(attribution)),
            ("cross-run", f"{cross_run:.2f} suspiciousness" if cross_run is not None else ""),
            ("cost", spent),
        ):
            if value:
                rows.append((label, value))
        if forced:
            rows.append(("", Text(decision.blamed_anyway() + " (--assume-failed)", style="dim")))
        if recorded:
            note = "blame recorded in the file by the processor (blame.*); --recompute attributes it again"
            rows.append(("", Text(note, style="dim")))
    annotation = run.annotation
    if annotation is not None:
        known = f"{annotation.agent} at step {annotation.step}"
        said, quality = annotation_verdict(annotation, attribution)
        if said:
            style = {"good": "green", "partial": "yellow", "bad": "red"}[quality]
            rows.append(("annotation", Text.assemble(f"{known}: the verdict ", (said, style))))
        else:
            rows.append(("annotation", f"{known} (the file's known mistake; nothing blamed to compare)"))
    return rows


_EXCERPT = 240  # more than any terminal's content column shows; rich measures every character given


def _excerpt(text: str) -> str:
    flat = " ".join(text[: 4 * _EXCERPT].split())
    return flat if len(flat) <= _EXCERPT else flat[: _EXCERPT - 1] + "…"


def _print_table(
    run: SavedRun,
    decision: BlameDecision,
    attribution: Attribution | None,
    recorded: bool,
    forced: bool,
    scores: dict[int, float],
    file: Path,
) -> None:
    """The verdict first (who, or why nobody), then one row per step; the content column takes what
    the others leave, so the table reads at 80 columns (short kind names, marks in the step column,
    agent names whole up to what the width allows and then cut at a word, no vertical rules)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from otel_blame.terminal import fit_name

    console = Console(highlight=False, soft_wrap=False)
    trajectory = run.trajectory
    console.print(Text.assemble(("file:       ", "bold"), str(file)), soft_wrap=True)
    verdict = Table.grid(padding=(0, 1))
    verdict.add_column(no_wrap=True, min_width=11, style="bold")
    verdict.add_column()  # long reasons wrap under themselves, not under the labels
    rows = [
        ("outcome", trajectory.outcome.value),
        *_verdict_rows(run, decision, attribution, recorded, forced),
    ]
    for label, value in rows:
        verdict.add_row(f"{label}:" if label else "", value)
    console.print(verdict)
    table = Table(
        title="steps", title_justify="left", expand=True, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1)
    )
    agent_width = min(
        max((len(step.agent) for step in trajectory.steps), default=5), max(10, console.width - 46)
    )
    table.add_column("step", justify="right", no_wrap=True, min_width=4)
    table.add_column("agent", no_wrap=True, min_width=min(agent_width, 8), max_width=agent_width)
    table.add_column("kind", no_wrap=True, min_width=4)
    table.add_column("score", justify="right", no_wrap=True, min_width=5)
    table.add_column("content", overflow="ellipsis", no_wrap=True, ratio=1, min_width=20)
    annotation = run.annotation
    decided = attribution is not None and attribution.decided
    named = set() if attribution is None or decided else {c.step for c in attribution.candidates[:2]}
    for step in trajectory.steps:
        score = scores.get(step.index)
        mark, style = " ", None
        if decided and attribution is not None and step.index == attribution.step:
            mark, style = CULPRIT_MARK, "bold red"
        elif step.index in named:
            mark, style = CANDIDATE_MARK, "yellow"
        elif annotation is not None and attribution is not None and annotation.step == step.index:
            mark = ANNOTATED_MARK
        table.add_row(
            f"{mark}{step.index}",
            Text(fit_name(step.agent, agent_width)),
            _KIND_SHORT.get(step.kind.value, step.kind.value),
            "" if score is None else f"{score:.2f}",
            Text(_excerpt(step.content)),
            style=style,
        )
    console.print(table)
    legend = []
    if decided:
        legend.append(f"{CULPRIT_MARK} culprit")
    if named:
        legend.append(f"{CANDIDATE_MARK} a candidate (undecided)")
    if annotation is not None and annotation.step is not None and attribution is not None:
        legend.append(f"{ANNOTATED_MARK} the file's known answer")
    if legend:
        console.print(Text("   ".join(legend), style="dim"))


@click.command("attribute")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@method_option
@model_option
@base_url_option
@ground_truth_option
@cache_option
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

    from otel_blame.attribution.base import AttributionError
    from otel_blame.attribution.decision import blame_decision
    from otel_blame.trajectory import Outcome

    fmt = "json" if as_json else output_format
    stderr = Console(stderr=True)
    if progress is None:
        progress = stderr.is_terminal and file.stat().st_size > LARGE_FILE_BYTES
    run = _load_run(file, stderr if progress else None)
    trajectory = run.trajectory
    decision = blame_decision(trajectory)
    attribution: Attribution | None = None
    recorded = False
    scores: dict[int, float] = {}
    forced = assume_failed and not decision.blame and bool(trajectory.steps)
    if run.recorded is not None and not recompute:
        attribution, recorded, scores = run.recorded, True, dict(run.recorded_scores)
    elif decision.blame or forced:
        method = build_method(method_name, model, base_url, with_ground_truth, cache_dir)
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
        click.echo(json.dumps(_verdict_json(run, decision, attribution, recorded, scores), indent=2))
        _say_on_stderr(decision, attribution, forced, bool(trajectory.steps))
    else:
        _print_table(run, decision, attribution, recorded, forced, scores, file)


def _say_on_stderr(
    decision: BlameDecision, attribution: Attribution | None, forced: bool, steps: bool
) -> None:
    """With --format json, what the table would have said first, on stderr, wrapped at 80 columns."""
    from otel_blame.terminal import wrap

    if attribution is None:
        hint = " Pass --assume-failed to blame a step anyway." if steps else ""
        click.echo(wrap(decision.why + hint), err=True)
    elif forced:
        click.echo(wrap(decision.blamed_anyway() + " (--assume-failed)"), err=True)


def _redacted_for(method_name: str, trajectory: Trajectory) -> Trajectory:
    """What leaves the machine for an LLM method is redacted, as in the processor."""
    from otel_blame.attribution.registry import is_llm_method

    if not is_llm_method(method_name):
        return trajectory
    from otel_blame.redaction import Redactor, redact_trajectory

    return redact_trajectory(trajectory, Redactor())


def _load_run(file: Path, progress_console: Console | None) -> SavedRun:
    """Load FILE; with a console, a byte progress bar while reading, then a parsing spinner."""
    from otel_blame.loaders import TrajectoryFormatError, load_saved_run, parse_saved_run, read_text

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
