"""``otel-blame inject``: plant faults in your own app and measure how well blame finds them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import click

from otel_blame.inject.faults import FAULT_KINDS, FaultKind


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def render_terminal(report: object, console: object) -> None:
    """The report as rich tables: totals, per fault kind, per agent, confusion, calibration."""
    from rich.table import Table

    from otel_blame.inject.report import CampaignReport

    assert isinstance(report, CampaignReport)
    print_ = console.print  # type: ignore[attr-defined]
    print_(
        f"[bold]otel-blame inject[/bold]: app {report.app}, method {report.method}, seed {report.seed}, "
        f"{report.runs} runs, {report.scored} scored"
    )
    statuses = Table(title="runs by status")
    statuses.add_column("status")
    statuses.add_column("runs", justify="right")
    for status, count in report.statuses.items():
        statuses.add_row(status, str(count))
    print_(statuses)
    if report.scored:
        print_(
            f"agent accuracy [bold]{_fmt(report.agent_accuracy)}[/bold], step accuracy "
            f"[bold]{_fmt(report.step_accuracy)}[/bold] over {report.scored} attributed runs"
        )
        for title, groups, label in (
            ("by fault kind", report.by_fault_kind, "fault kind"),
            ("by planted agent", report.by_agent, "agent"),
        ):
            table = Table(title=title)
            for column in (label, "runs", "agent acc.", "step acc."):
                table.add_column(column, justify="left" if column == label else "right")
            for name, score in groups.items():
                table.add_row(name, str(score.runs), _fmt(score.agent_accuracy), _fmt(score.step_accuracy))
            print_(table)
        blamed = sorted({b for row in report.confusion.values() for b in row})
        confusion = Table(title="confusion: planted agent (rows) x blamed agent (columns)")
        confusion.add_column("planted \\ blamed")
        for name in blamed:
            confusion.add_column(name, justify="right")
        for planted, row in report.confusion.items():
            confusion.add_row(planted, *(str(row.get(name, 0)) or "0" for name in blamed))
        print_(confusion)
        calibration = Table(title="calibration: confidence bins vs accuracy")
        for column in ("confidence", "runs", "mean conf.", "agent acc.", "step acc."):
            calibration.add_column(column, justify="right")
        for item in report.calibration:
            if item.runs:
                calibration.add_row(
                    f"{item.lower:.1f}-{item.upper:.1f}",
                    str(item.runs),
                    f"{item.mean_confidence:.2f}" if item.mean_confidence is not None else "-",
                    _fmt(item.agent_accuracy),
                    _fmt(item.step_accuracy),
                )
        print_(calibration)
        print_(f"expected calibration error (agent): {report.expected_calibration_error}")
        if report.cost is not None and report.cost.llm_calls_per_run:
            print_(
                f"cost per run: {report.cost.llm_calls_per_run} LLM calls, "
                f"{report.cost.input_tokens_per_run} input / "
                f"{report.cost.output_tokens_per_run} output tokens"
            )
    for problem in report.problems:
        print_(f"[yellow]note:[/yellow] {problem}")


def _list_apps(as_json: bool) -> None:
    from otel_blame.inject import zoo

    rows = [
        {
            "name": app.name,
            "framework": app.framework,
            "shape": app.shape,
            "environment": app.environment,
            "status": zoo.availability(app),
        }
        for app in zoo.APPS
    ]
    if as_json:
        click.echo(json.dumps(rows))
        return
    from otel_blame.terminal import columns as terminal_columns
    from otel_blame.terminal import wrap

    width = terminal_columns(100)
    click.echo(
        wrap(
            f"The app zoo (otel-blame inject --app zoo:NAME); this environment: {zoo.current_environment()}",
            width,
        )
    )
    click.echo("")
    columns = ("name", "framework", "environment", "status")
    widths = {c: max(len(c), *(len(str(row[c])) for row in rows)) for c in columns}
    click.echo("  ".join(c.ljust(widths[c]) for c in columns).rstrip())
    click.echo("-" * min(width, sum(widths.values()) + 2 * (len(columns) - 1)))
    styles = {"ready": "green", "other env": "cyan", "no env": "yellow", "missing": "red"}
    for row in rows:
        cells = [str(row[c]).ljust(widths[c]) for c in columns[:-1]]
        status = click.style(row["status"], fg=styles[row["status"]])
        click.echo("  ".join([*cells, status]))
        click.echo(wrap(row["shape"], width, indent="    "))
    click.echo("")
    click.echo(
        wrap(
            "status: ready = runs here; other env = runs through that environment's python; "
            "no env = that environment is not installed; missing = its module is not in this installation",
            width,
        )
    )


@click.command("inject")
@click.option(
    "--app",
    "app",
    default="demo",
    show_default=True,
    help="The app: an importable module:function that runs one task, 'demo' (the built-in AG2 app), "
    "or zoo:NAME (an app of the zoo: see --list-apps).",
)
@click.option(
    "--list-apps", is_flag=True, help="List the zoo's apps (name, framework, shape, environment) and exit."
)
@click.option(
    "--runs",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Runs, each with one fault (unless drawn clean by --clean-fraction); a clean run comes first.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same campaign.")
@click.option(
    "--fault",
    "faults",
    multiple=True,
    type=click.Choice([k.value for k in FAULT_KINDS]),
    metavar="KIND",
    help=f"Fault kinds to plant (repeatable): {', '.join(k.value for k in FAULT_KINDS)}; default: the "
    "kinds the app declares in FAULTS, else all; one drawn per run.",
)
@click.option("--agent", default=None, help="Plant faults only into this agent's messages (default: random).")
@click.option("--step", type=click.IntRange(min=0), default=None, help="Plant faults only at this step.")
@click.option(
    "--run-timeout", type=click.FloatRange(min=0.1), default=60.0, show_default=True, help="Seconds per run."
)
@click.option(
    "--blame-timeout",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds to wait for the processor's verdicts after the last run.",
)
@click.option(
    "--clean-fraction",
    type=click.FloatRange(0.0, 0.95),
    default=0.0,
    show_default=True,
    help="Share of the runs made without a fault (passing runs the processor sees too).",
)
@click.option(
    "--method", default=None, help="attribution.method of the in-process processor (default: its own)."
)
@click.option(
    "--processor-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="YAML configuration for the in-process processor (as for otel-blame serve).",
)
@click.option(
    "--endpoint",
    default=None,
    help="A running otel-blame serve's HTTP URL (e.g. http://127.0.0.1:4318) instead of an in-process one.",
)
@click.option("--token", envvar="OTEL_BLAME_TOKEN", default=None, help="Bearer token for --endpoint.")
@click.option(
    "--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the HTML report here."
)
@click.option(
    "--dataset-out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write the failed injected runs here as a labelled Who&When-layout dataset (for otel-blame eval).",
)
@click.option(
    "--calibration-out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write a calibration file (for attribution.calibration) fitted on this campaign.",
)
@click.option(
    "--calibration-target",
    type=click.Choice(["agent", "step"]),
    default="agent",
    show_default=True,
    help="What counts as right for the calibration: the blamed agent, or agent and step.",
)
@click.option(
    "--app-log",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Append the app's stdout/stderr here (default: discarded).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def inject_command(
    app: str,
    runs: int,
    seed: int,
    faults: tuple[str, ...],
    agent: str | None,
    step: int | None,
    run_timeout: float,
    blame_timeout: float,
    clean_fraction: float,
    method: str | None,
    processor_config: Path | None,
    endpoint: str | None,
    token: str | None,
    html_path: Path | None,
    dataset_out: Path | None,
    calibration_out: Path | None,
    calibration_target: str,
    app_log: Path | None,
    as_json: bool,
    list_apps: bool,
) -> None:
    """Run an instrumented app N times, plant one fault per run, and score the blame it gets."""
    import logging

    if list_apps:
        _list_apps(as_json)
        return

    from rich.console import Console

    from otel_blame.inject.campaign import Campaign, CampaignError, CampaignSettings
    from otel_blame.inject.report import RunRecord, build_report

    if app in ("demo", "zoo:demo") and importlib.util.find_spec("autogen") is None:
        raise click.ClickException("the demo app is an AG2 group chat: pip install 'otel-blame[autogen]'")
    if endpoint and (processor_config or method):
        raise click.UsageError(
            "--processor-config / --method configure the in-process processor, not --endpoint"
        )
    settings = CampaignSettings(
        app=app,
        runs=runs,
        seed=seed,
        faults=tuple(FaultKind(f) for f in faults) or None,
        agent=agent,
        step=step,
        run_timeout=run_timeout,
        blame_timeout=blame_timeout,
        clean_fraction=clean_fraction,
        endpoint=endpoint,
        token=token,
        processor_config=processor_config,
        method=method,
        log_path=app_log,
    )
    err = Console(stderr=True)
    processor_log = logging.getLogger("otel_blame.processor")
    quiet_level = processor_log.level
    if logging.getLogger().getEffectiveLevel() >= logging.WARNING:  # no -v: the report says what matters
        processor_log.setLevel(logging.ERROR)

    def progress(record: RunRecord) -> None:
        if not as_json and sys.stderr.isatty():
            fault = record.fault or record.planned
            what = f"{fault.kind} -> {fault.agent}@{fault.step}" if fault else "no fault"
            err.print(f"  run {record.index + 1}/{runs}: {what}: {record.status.value}", highlight=False)

    try:
        result = Campaign(settings, progress).run()
    except CampaignError as error:
        raise click.ClickException(str(error)) from None
    finally:  # the command may run inside a longer-lived process (tests, a notebook)
        processor_log.setLevel(quiet_level)
    report = build_report(
        app=app,
        method=result.method,
        seed=seed,
        runs=runs,
        baseline=result.baseline,
        records=result.records,
    )
    if dataset_out is not None:
        from otel_blame.inject.dataset import write_dataset

        written = write_dataset(result, dataset_out)
        if not as_json:
            err.print(
                f"dataset: {written} labelled run(s) in {dataset_out}/ "
                f"(otel-blame eval --dataset {dataset_out})"
            )
    if calibration_out is not None:
        from otel_blame.attribution.calibration import fit_calibration

        try:
            calibration = fit_calibration(report, target=calibration_target)  # type: ignore[arg-type]
        except ValueError as error:
            err.print(f"[yellow]no calibration file written:[/yellow] {error}")
        else:
            calibration.save(calibration_out)
            if not as_json:
                err.print(f"calibration: {calibration_out} (attribution.calibration: {calibration_out})")
    if html_path is not None:
        from otel_blame.inject.html import render_html

        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(render_html(report), encoding="utf-8")
        if not as_json:
            err.print(f"HTML report: {html_path}")
    if as_json:
        click.echo(json.dumps(report.model_dump(mode="json")))
    else:
        render_terminal(report, Console())
    if not report.scored:
        sys.exit(1)
