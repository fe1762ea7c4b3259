"""Blame accuracy on every app of the zoo: per app and fault kind, the offline default next to the
positional baselines on the same runs, and leave-one-app-out figures for a method fitted on the zoo.

For each app that runs here (``otel-blame inject --list-apps``; CrewAI's app through its own
environment), it runs ``otel-blame inject --app zoo:NAME --runs N --seed S --json --dataset-out DIR``
(the offline default through the in-process processor) and scores, on the labelled runs it wrote:
- the campaign's own verdicts (the current offline default), per fault kind;
- every positional baseline (otel_blame/attribution/baselines.py) on the same runs;
- leave-one-app-out: a method fitted on the other apps' runs, scored on the held-out app. The fit is
  pluggable (``--fit module:function``, taking the training runs and returning a predictor); the
  default refits the heuristic's weights (otel_blame/training/crossval.py's coordinate search);
  ``--fit zoo_ranker_fit:fit_ranker`` refits the trained ranker, the offline default
  (bench/zoo_ranker_fit.py).
Prints one rich table (and markdown rows for docs/benchmarks.md with ``--markdown``). With
``--data-dir`` the datasets stay there as ``DIR/<app>/`` (e.g. /work/zoo-data, for training), with
the campaign's report beside them (``report.json``, ``report.html``).

Usage: python bench/zoo.py [--runs 50] [--seed 0] [--apps orchestrator,customer_service]
                           [--data-dir /work/zoo-data] [--fit module:function] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from otel_blame.attribution.baselines import positional_baselines
from otel_blame.inject import zoo
from otel_blame.inject.dataset import SUBSET
from otel_blame.training.crossval import LabelledRun, fit_weights, load_runs
from otel_blame.trajectory import Trajectory

Predictor = Callable[[Trajectory], tuple[str, int]]
FitFunction = Callable[[Sequence[LabelledRun]], Predictor]


def fit_heuristic_weights(runs: Sequence[LabelledRun]) -> Predictor:
    """The default fit: the heuristic's weights by coordinate search on the training runs."""
    from otel_blame.attribution.heuristic import HeuristicAttribution

    method = HeuristicAttribution(weights=fit_weights(runs))

    def predict(trajectory: Trajectory) -> tuple[str, int]:
        answer = method.attribute(trajectory)
        return answer.agent, answer.step

    return predict


def load_fit(reference: str | None) -> FitFunction:
    if not reference:
        return fit_heuristic_weights
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


# --- one app ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class AppResult:
    app: str
    report: dict[str, Any]
    seconds: float
    load: float
    runs: list[dict[str, Any]]  # per labelled run: kind, truth, default's verdict, baselines' verdicts
    labelled: list[LabelledRun]


def run_campaign(app: str, runs: int, seed: int, dataset: Path) -> tuple[dict[str, Any], float, float]:
    command = [
        sys.executable, "-m", "otel_blame.cli", "inject", "--app", f"zoo:{app}", "--runs", str(runs),
        "--seed", str(seed), "--json", "--dataset-out", str(dataset), "--run-timeout", "120",
        "--html", str(dataset / "report.html"),
    ]  # fmt: skip
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1) or not done.stdout.strip():
        raise RuntimeError(
            f"otel-blame inject --app zoo:{app} failed ({done.returncode}): {done.stderr[-2000:]}"
        )
    report = json.loads(done.stdout)
    (dataset / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return report, time.monotonic() - started, max(load_before, os.getloadavg()[0])


def score_app(
    app: str, report: dict[str, Any], dataset: Path
) -> tuple[list[dict[str, Any]], list[LabelledRun]]:
    """Per labelled run: the truth, the campaign's verdict and every baseline's answer."""
    from otel_blame.datasets.who_and_when import load_case

    verdicts = {r["trace_id"]: r for r in report["results"] if r.get("trace_id")}
    baselines = positional_baselines()
    rows = []
    for path in sorted((dataset / SUBSET).glob("*.json"), key=lambda p: int(p.stem)):
        raw = json.loads(path.read_text(encoding="utf-8"))
        record = verdicts.get(raw.get("trace_id"))
        if record is None or record.get("prediction") is None:
            continue
        case = load_case(path, dataset)
        row = {
            "file": path.name,
            "app": app,
            "kind": raw["fault_kind"],
            "agent": case.mistake_agent,
            "step": case.mistake_step,
            "steps": len(case.trajectory.steps),
            "default": (record["prediction"]["agent"], record["prediction"]["step"]),
        }
        for baseline in baselines:
            answer = baseline.attribute(case.trajectory)
            row[baseline.name] = (answer.agent, answer.step)
        rows.append(row)
    labelled = [dataclasses.replace(run, subset=app) for run in load_runs(dataset, [SUBSET])]
    return rows, labelled


# --- scoring ---------------------------------------------------------------------------------------


def accuracy(rows: Sequence[dict[str, Any]], key: str) -> tuple[float | None, float | None]:
    if not rows:
        return None, None
    agent = sum(r[key][0] == r["agent"] for r in rows) / len(rows)
    step = sum(r[key][0] == r["agent"] and r[key][1] == r["step"] for r in rows) / len(rows)
    return agent, step


def best_baseline(rows: Sequence[dict[str, Any]]) -> tuple[str, float | None, float | None]:
    """The positional rule with the best (agent + step) on these runs."""
    names = [b.name for b in positional_baselines()]
    scored = [(name, *accuracy(rows, name)) for name in names]
    name, agent, step = max(scored, key=lambda item: (item[1] or 0) + (item[2] or 0))
    return name.removeprefix("baseline:"), agent, step


def leave_one_app_out(results: Sequence[AppResult], fit: FitFunction) -> dict[str, list[dict[str, Any]]]:
    """Held-out app -> its rows with the LOAO verdict under ``"loao"`` (fitted on the other apps)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for held in results:
        training = [run for other in results if other.app != held.app for run in other.labelled]
        if not training or not held.labelled:
            continue
        predict = fit(training)
        by_file = {Path(run.file).name: run for run in held.labelled}
        rows = [
            {**row, "loao": predict(by_file[row["file"]].evidence.context.trajectory)}
            for row in held.runs
            if row["file"] in by_file
        ]
        out[held.app] = rows
    return out


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def render(
    results: Sequence[AppResult], loao: dict[str, list[dict[str, Any]]], console: Console
) -> list[str]:
    table = Table(title="zoo: blame accuracy per app and fault kind (agent % / step %)")
    for column in ("app", "fault kind", "runs", "default", "best positional", "LOAO fit"):
        table.add_column(
            column, justify="left" if column in ("app", "fault kind", "best positional") else "right"
        )
    markdown = [
        "| app | fault kind | runs | default agent % | default step % | best positional (agent / step %) | "
        "LOAO agent % | LOAO step % |",
        "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for result in results:
        by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in result.runs:
            by_kind[row["kind"]].append(row)
        loao_rows = loao.get(result.app, [])
        loao_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in loao_rows:
            loao_kind[row["kind"]].append(row)
        for kind, rows in [*sorted(by_kind.items()), ("all", result.runs)]:
            agent, step = accuracy(rows, "default")
            name, b_agent, b_step = best_baseline(rows)
            l_rows = loao_rows if kind == "all" else loao_kind.get(kind, [])
            l_agent, l_step = accuracy(l_rows, "loao") if l_rows else (None, None)
            label = f"[bold]{kind}[/bold]" if kind == "all" else kind
            table.add_row(
                result.app if kind == "all" else "",
                label,
                str(len(rows)),
                f"{_pct(agent)} / {_pct(step)}",
                f"{name}: {_pct(b_agent)} / {_pct(b_step)}",
                f"{_pct(l_agent)} / {_pct(l_step)}",
            )
            shown = "**all**" if kind == "all" else kind
            baseline = f"{name}: {_pct(b_agent)} / {_pct(b_step)}"
            markdown.append(
                f"| {result.app} | {shown} | {len(rows)} | {_pct(agent)} | {_pct(step)} | {baseline} | "
                f"{_pct(l_agent)} | {_pct(l_step)} |"
            )
    console.print(table)
    runs = Table(title="zoo: campaigns")
    for column in ("app", "framework", "clean-run steps", "statuses", "wall s/run", "load"):
        runs.add_column(column)
    markdown += [
        "",
        "| app | framework | clean-run steps | statuses | wall time / run (s) | load |",
        "| --- | --- | ---: | --- | ---: | ---: |",
    ]
    for result in results:
        report = result.report
        statuses = ", ".join(f"{k} {v}" for k, v in report["statuses"].items())
        per_run = result.seconds / max(1, report["runs"] + 1)
        framework = zoo.get_app(result.app).framework
        clean = str(len(report["baseline"]["steps"]))
        runs.add_row(result.app, framework, clean, statuses, f"{per_run:.2f}", f"{result.load:.1f}")
        markdown.append(
            f"| {result.app} | {framework} | {clean} | {statuses} | {per_run:.2f} | {result.load:.1f} |"
        )
    console.print(runs)
    return markdown


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--apps", default="", help="comma-separated zoo apps (default: every app that runs here)"
    )
    parser.add_argument("--data-dir", type=Path, default=None, help="keep each app's dataset in DIR/<app>/")
    parser.add_argument("--fit", default=None, help="module:function fitting a predictor on training runs")
    parser.add_argument("--json", type=Path, default=None, help="write every scored row here")
    parser.add_argument("--markdown", action="store_true", help="print markdown rows for docs/benchmarks.md")
    args = parser.parse_args(argv)
    console = Console()
    wanted = [a for a in args.apps.split(",") if a] or [
        app.name for app in zoo.APPS if zoo.availability(app) in ("ready", "other env")
    ]
    skipped = [app.name for app in zoo.APPS if app.name not in wanted]
    console.print(
        f"zoo bench: apps {', '.join(wanted)}; skipped (not runnable here or not asked): "
        f"{', '.join(skipped) or 'none'}; {args.runs} runs each, seed {args.seed}; {platform.node()}, "
        f"{os.cpu_count()} CPUs"
    )
    results = []
    with tempfile.TemporaryDirectory(prefix="otel-blame-zoo-bench-") as scratch:
        for app in wanted:
            dataset = (args.data_dir or Path(scratch)) / app
            try:
                report, seconds, load = run_campaign(app, args.runs, args.seed, dataset)
            except RuntimeError as error:
                console.print(f"[red]{app}: {error}[/red]")
                continue
            rows, labelled = score_app(app, report, dataset)
            results.append(AppResult(app, report, seconds, load, rows, labelled))
            console.print(f"{app}: {len(rows)} scored runs in {seconds:.0f} s (load {load:.1f})")
        loao = leave_one_app_out(results, load_fit(args.fit)) if len(results) > 1 else {}
    markdown = render(results, loao, console)
    if args.markdown:
        print("\n".join(markdown))
    if args.json is not None:
        rows = [{**r, "loao": r.get("loao")} for result in results for r in loao.get(result.app, result.runs)]
        args.json.write_text(json.dumps(rows, indent=1, default=list), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
