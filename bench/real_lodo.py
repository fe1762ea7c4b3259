"""The offline ranker judged on real failures, leave-one-dataset-out (issue 27).

Data sets: Who&When dev (Algorithm-Generated and Hand-Crafted, one data set each), TRAIL dev (GAIA and
SWE-bench, labels on spans: the decisive step is the earliest HIGH-impact error's, every annotated step
counts as a hit) and, when given, the zoo's injected campaigns (``--zoo DIR``: every app's directory
below it, all of them one data set for this script). Each real data set is scored by a model fitted on
every other data set; each figure is printed beside the positional rules and a random pick on the same
runs. Nothing here is in sample.

Prints, per data set: agent and step accuracy (TRAIL: hit@1, the blamed step carries an annotated
error), the best positional rule, a random speaker and a random step; the share of verdicts on step 0
against the labels' share; and decided verdicts: coverage and accuracy at the threshold fitted on the
other data sets, with the risk-coverage curve.

Usage::

    PYTHONPATH=$PWD .venv/bin/python bench/real_lodo.py --who-and-when ../shared/who_and_when/dev \\
        --trail ../shared/trail/dev [--zoo /work/zoo-data/r0 --zoo /work/zoo-data/r1] [--json out.json]
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
from otel_blame.training import real_data as rd


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--who-and-when", type=Path)
    parser.add_argument("--trail", type=Path)
    parser.add_argument("--zoo", type=Path, action="append", default=[], help="a directory of app campaigns")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    datasets = rd.load_datasets(args.who_and_when, args.trail, args.zoo)
    print(
        f"Measured {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit {_commit()}, "
        f"{platform.machine()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
        + ", ".join(f"{name} {len(runs)} runs" for name, runs in datasets.items())
        + "\n"
    )
    report = rd.leave_one_dataset_out(datasets)
    for line in rd.report_lines(report, positional_baselines()):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(report.to_dict(), indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
