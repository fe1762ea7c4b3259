"""``otel-blame attribute``: name the agent and step that broke one saved run.

Whether the run is blamed at all is :func:`otel_blame.attribution.decision.blame_decision`, the
one decision the processor, the API and the web UI take too. Everything heavier than click is
imported inside the command, so a call on a small file is quick (see docs/benchmarks.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from rich.console import Console

    from otel_blame.attribution.decision import BlameDecision
    from otel_blame.attribution.registry import Escalation
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
        from otel_blame.attribution.decision import verdict_sentence

        out["verdict"] = verdict_sentence(attribution)
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


_STYLES = {
    "strong": {"bold": True},
    "culprit": {"fg": "red", "bold": True},
    "undecided": {"fg": "yellow", "bold": True},
    "dim": {"dim": True},
    "good": {"fg": "green"},
    "partial": {"fg": "yellow"},
    "bad": {"fg": "red"},
}
Styled = tuple[str, str | None]  # (text, a key of _STYLES or None)


def _verdict_rows(
    run: SavedRun, decision: BlameDecision, attribution: Attribution | None, recorded: bool, forced: bool
) -> list[tuple[str, list[Styled]]]:
    """(label, styled text) lines of the verdict, first thing printed: who and where (or
    "Undecided: …"), why, how; for a run not blamed, why not; and the known answer when the file
    gives one."""
    from otel_blame.attribution.decision import undecided_sentence

    trajectory = run.trajectory
    rows: list[tuple[str, list[Styled]]] = []
    if attribution is None:
        hint = " Pass --assume-failed to blame a step anyway." if trajectory.steps else ""
        rows.append(("verdict", [(decision.why + hint, "strong")]))
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
            named = [("agent", [(attribution.agent, "culprit")]), ("step", [(step_text, None)])]
            reason = [(attribution.reason, None)]
        else:
            sentence = undecided_sentence(attribution.candidates, attribution.agent, attribution.step)
            named = [("verdict", [(sentence, "undecided")])]
            reason = [("the first candidate: ", "dim"), (attribution.reason, None)]
        plain = (
            ("confidence", f"{attribution.confidence:.2f}"),
            ("method", attribution.method + model),
            ("category", _category_text(attribution)),
            ("mode", _mode_text(attribution)),
            ("cross-run", f"{cross_run:.2f} suspiciousness" if cross_run is not None else ""),
            ("cost", spent),
        )
        rows += named
        rows.append(("confidence", [(plain[0][1], None)]))
        rows.append(("reason", reason))
        rows += [(label, [(value, None)]) for label, value in plain[1:] if value]
        if forced:
            rows.append(("", [(decision.blamed_anyway() + " (--assume-failed)", "dim")]))
        if recorded:
            note = "blame recorded in the file by the processor (blame.*); --recompute attributes it again"
            rows.append(("", [(note, "dim")]))
    annotation = run.annotation
    if annotation is not None:
        from otel_blame.attribution.known_answer import compare

        known = f"{annotation.agent} at step {annotation.step}"
        said, quality = compare(annotation, attribution)
        if said:
            rows.append(("annotation", [(f"{known}: the verdict ", None), (said, quality)]))
        else:
            rows.append(
                ("annotation", [(f"{known} (the file's known mistake; nothing blamed to compare)", None)])
            )
    return rows


def _styled_lines(parts: list[Styled], width: int, indent: int) -> list[str]:
    """Styled words wrapped at ``width`` columns of text, every line after the first indented by
    ``indent`` (the label column the first line follows)."""
    lines: list[str] = []
    line, used = "", 0
    for text, style in parts:
        for word in text.split():
            if used and used + 1 + len(word) > width:
                lines.append(line)
                line, used = "", 0
            gap = " " if used else ""
            shown = click.style(word, **_STYLES[style]) if style else word
            line, used = line + gap + shown, used + len(gap) + len(word)
    lines.append(line)
    return [lines[0], *(" " * indent + rest for rest in lines[1:])]


_EXCERPT = 240  # more than any terminal's content column shows


def _excerpt(text: str, width: int) -> str:
    flat = " ".join(text[: 4 * _EXCERPT].split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _print_table(
    run: SavedRun,
    decision: BlameDecision,
    attribution: Attribution | None,
    recorded: bool,
    forced: bool,
    scores: dict[int, float],
    file: Path,
) -> None:
    """The verdict first (who, or why nobody), then one line per step, at the terminal's width (80
    when it does not say): sentences wrapped, the step's text cut to what the line leaves, agent
    names whole up to what the width allows and then cut at a word. Plain columns styled with
    click (loaded already), not a table library: this command answers within ten interpreter
    starts on a small file (docs/benchmarks.md, "CLI start-up")."""
    from otel_blame.terminal import columns, fit_name

    width = columns()
    trajectory = run.trajectory
    click.echo(click.style("file:", bold=True) + "       " + str(file))
    label_width = 12  # "annotation: "
    rows = [
        ("outcome", [(trajectory.outcome.value, None)]),
        *_verdict_rows(run, decision, attribution, recorded, forced),
    ]
    for label, parts in rows:
        lines = _styled_lines(parts, width - label_width, label_width)
        head = f"{label}:" if label else ""
        click.echo(click.style(head.ljust(label_width), bold=True) + lines[0])
        for line in lines[1:]:
            click.echo(line)
    widest = max((len(step.agent) for step in trajectory.steps), default=5)
    agent_width = max(5, min(widest, max(10, width - 46)))
    number_width = max(4, len(str(len(trajectory.steps))) + 1)
    content_width = max(20, width - (number_width + agent_width + 4 + 5 + 4 * 2))
    click.echo("")
    click.echo(click.style("steps", bold=True))
    header = f"{'step':>{number_width}}  {'agent':<{agent_width}}  kind  score  content"
    click.echo(click.style(header, bold=True))
    click.echo("─" * min(width, len(header) + content_width - len("content")))
    annotation = run.annotation
    decided = attribution is not None and attribution.decided
    named = set() if attribution is None or decided else {c.step for c in attribution.candidates[:2]}
    for step in trajectory.steps:
        score = scores.get(step.index)
        mark, style = " ", None
        if decided and attribution is not None and step.index == attribution.step:
            mark, style = CULPRIT_MARK, "culprit"
        elif step.index in named:
            mark, style = CANDIDATE_MARK, "partial"
        elif annotation is not None and attribution is not None and annotation.step == step.index:
            mark = ANNOTATED_MARK
        kind = _KIND_SHORT.get(step.kind.value, step.kind.value)
        shown = "" if score is None else f"{score:.2f}"
        line = (
            f"{mark + str(step.index):>{number_width}}  {fit_name(step.agent, agent_width):<{agent_width}}  "
            f"{kind:<4}  {shown:>5}  {_excerpt(step.content, content_width)}"
        )
        click.echo(click.style(line, **_STYLES[style]) if style else line)
    legend = []
    if decided:
        legend.append(f"{CULPRIT_MARK} culprit")
    if named:
        legend.append(f"{CANDIDATE_MARK} a candidate (undecided)")
    if annotation is not None and annotation.step is not None and attribution is not None:
        legend.append(f"{ANNOTATED_MARK} the file's known answer")
    if legend:
        click.echo(click.style("   ".join(legend), dim=True))


@click.command("attribute")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@method_option
@model_option
@base_url_option
@ground_truth_option
@cache_option
@escalation_option
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
    escalation: Escalation,
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
    from otel_blame.attribution.base import AttributionError
    from otel_blame.attribution.decision import blame_decision
    from otel_blame.attribution.registry import is_llm_method
    from otel_blame.trajectory import Outcome

    fmt = "json" if as_json else output_format
    if progress is None:
        progress = sys.stderr.isatty() and file.stat().st_size > LARGE_FILE_BYTES
    stderr = _stderr_console() if progress else None
    run = _load_run(file, stderr)
    trajectory = run.trajectory
    decision = blame_decision(trajectory)
    attribution: Attribution | None = None
    recorded = False
    scores: dict[int, float] = {}
    forced = assume_failed and not decision.blame and bool(trajectory.steps)
    if run.recorded is not None and not recompute:
        attribution, recorded, scores = run.recorded, True, dict(run.recorded_scores)
    elif decision.blame or forced:
        method = build_method(
            method_name, model, base_url, with_ground_truth, cache_dir, escalation, for_llm=_redacted
        )
        failed = trajectory.model_copy(update={"outcome": Outcome.FAILURE})
        given = _redacted(failed) if is_llm_method(method_name) else failed
        try:
            if stderr is not None:
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


def _stderr_console() -> Console:
    """Where the progress of a large file is shown (rich, loaded only then)."""
    from rich.console import Console

    return Console(stderr=True)


def _redacted(trajectory: Trajectory) -> Trajectory:
    """What leaves the machine for an LLM is redacted, as in the processor."""
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
