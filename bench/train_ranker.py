"""Refit the offline ranker and validate it out of sample.

Fits the conditional logit of ``otel_blame.training.ranker_fit`` on the Who&When dev split (each subset
one data set), TRAIL's dev traces (``--trail``: GAIA and SWE-bench, one data set each) and labelled
fault-injection campaigns (each ``--inject DIR`` one app: a directory written by ``otel-blame inject
--dataset-out DIR``, the app named by the directory; together the zoo), writes the model the package
ships (``otel_blame/attribution/ranker_model.json`` unless ``--out``) with its decided threshold read
on every real data set's held-out verdicts (``otel_blame.training.real_data.fit_shipped``), and prints the
out-of-sample figures: leave-one-dataset-out on the real data sets (``bench/real_lodo.py`` prints the
same with the risk-coverage curves), 5-fold CV on Who&When, leave-one-app-out on the campaigns (the
real data always in training), per app and fault kind, each beside the best positional baseline of the
same runs.

Usage::

    PYTHONPATH=$PWD .venv/bin/python bench/train_ranker.py --who-and-when ../shared/who_and_when/dev \
        --trail ../shared/trail/dev \
        --inject /work/zoo-data/demo --inject /work/zoo-data/triage ... [--score /work/zoo-fresh/demo ...]

``--inject`` may name one app's campaigns of several seeds (the directory name is the app). ``--score``
campaigns are never fitted on: each app's is scored by a model fitted on the *other* apps' ``--inject``
campaigns and Who&When, so its figures are out of sample twice over (other runs, another app).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
from pathlib import Path

from otel_blame.attribution.baselines import positional_baselines
from otel_blame.training import ranker_fit as rf
from otel_blame.training import real_data as rd

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "otel_blame" / "attribution" / "ranker_model.json"


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def best_positional(runs: list[rf.LabelledRun]) -> tuple[str, float, str, float]:
    """The best positional baseline on these runs: (name, agent acc), (name, step acc)."""
    best_agent, best_step = ("", -1.0), ("", -1.0)
    for baseline in positional_baselines():
        agent = step = 0
        for run in runs:
            answer = baseline.attribute(run.rows.trajectory)
            agent += answer.agent == run.mistake_agent
            step += answer.step == run.mistake_step
        if agent / len(runs) > best_agent[1]:
            best_agent = (baseline.name, agent / len(runs))
        if step / len(runs) > best_step[1]:
            best_step = (baseline.name, step / len(runs))
    return best_agent[0], best_agent[1], best_step[0], best_step[1]


def _table(title: str, scored: list[rf.Scored], runs: list[rf.LabelledRun], key: str) -> list[str]:
    lines = [
        f"#### {title}",
        "",
        "| group | runs | agent % | step % | best positional agent % | best positional step % | "
        "margin agent / step (points) |",
        "|---|---|---|---|---|---|---|",
    ]
    groups = sorted({getattr(run, key) for run in runs})
    for group in groups:
        members = [s for s in scored if getattr(s.run, key) == group]
        if not members:
            continue
        count = len(members)
        agent = sum(s.agent_correct for s in members) / count
        step = sum(s.step_correct for s in members) / count
        name_a, base_a, name_s, base_s = best_positional([s.run for s in members])
        lines.append(
            f"| {group or '(none)'} | {count} | {_pct(agent)} | {_pct(step)} | {_pct(base_a)} ({name_a}) | "
            f"{_pct(base_s)} ({name_s}) | {_pct(agent - base_a)} / {_pct(step - base_s)} |"
        )
    if len(groups) > 1:
        count = len(scored)
        agent = sum(s.agent_correct for s in scored) / count
        step = sum(s.step_correct for s in scored) / count
        lines.append(f"| **all** | {count} | {_pct(agent)} | {_pct(step)} | | | |")
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--who-and-when", type=Path, help="the Who&When dev directory")
    parser.add_argument("--trail", type=Path, help="the TRAIL dev directory (traces/, annotations/)")
    parser.add_argument("--inject", type=Path, action="append", default=[], help="a labelled campaign dir")
    parser.add_argument(
        "--score",
        type=Path,
        action="append",
        default=[],
        help="a labelled campaign dir only scored, never fitted on: each app by a model fitted on the "
        "other apps' --inject campaigns and Who&When (new runs of an app the model never saw)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the model")
    parser.add_argument("--no-write", action="store_true", help="validate only")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    who = rf.load_group(args.who_and_when) if args.who_and_when else []
    trail = rf.load_trail(args.trail) if args.trail else []
    injected: list[rf.LabelledRun] = []
    for folder in args.inject:
        injected += rf.load_group(folder, group=folder.name)
    if not who and not injected and not trail:
        parser.error("give --who-and-when, --trail and/or --inject")
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = "?"
    print(
        f"Measured {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit {commit}, "
        f"{platform.machine()} {os.cpu_count()} cores, load average "
        f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}.\n"
    )
    datasets: dict[str, list[rf.LabelledRun]] = {}
    for run in [*who, *trail]:
        datasets.setdefault(rd.dataset_name(run.group), []).append(run)
    if injected:
        datasets[rd.ZOO] = injected
    fits: rd.Fits = {}  # each model fitted once, for the report and the model shipped
    if who or trail:
        print("#### Real data sets, leave-one-dataset-out\n")
        report = rd.leave_one_dataset_out(datasets, fits=fits)
        print("\n".join(rd.report_lines(report, positional_baselines())) + "\n")
    if who:
        scored = rf.cross_validate(who, k=args.folds, seed=args.seed, extra=[*injected, *trail])
        print(
            "\n".join(_table(f"Who&When dev, {args.folds}-fold CV (seed {args.seed})", scored, who, "group"))
        )
    if injected and len({run.group for run in injected}) > 1:
        scored = rf.leave_one_group_out(injected, extra=[*who, *trail])
        print("\n".join(_table("Campaigns, leave-one-app-out", scored, injected, "group")))
        print("\n".join(_table("Campaigns, leave-one-app-out, by fault kind", scored, injected, "kind")))
    held: list[rf.LabelledRun] = []
    for folder in args.score:
        held += rf.load_group(folder, group=folder.name)
    if held:
        scored = rf.leave_one_group_out(injected, extra=[*who, *trail], held=held)
        title = "Fresh campaigns (--score), each app by a model fitted on the other apps"
        print("\n".join(_table(title, scored, held, "group")))
        print("\n".join(_table(f"{title}, by fault kind", scored, held, "kind")))
    if injected:
        scored = rf.cross_validate(injected, k=args.folds, seed=args.seed, extra=[*who, *trail])
        print("\n".join(_table(f"Campaigns, {args.folds}-fold CV", scored, injected, "group")))
        print("\n".join(_table(f"Campaigns, {args.folds}-fold CV, by fault kind", scored, injected, "kind")))
    if not args.no_write:
        model = rd.fit_shipped(datasets, fits=fits)
        args.out.write_text(json.dumps(model.to_dict(), indent=1) + "\n", encoding="utf-8")
        said = f"trained on {model.trained_on}; decided at support {model.decided_threshold}"
        print(f"wrote {args.out} ({said})")


if __name__ == "__main__":
    main()
