"""Refit the offline ranker on every real data set and the zoo, write the models the package ships,
and judge it out of sample.

Reads Who&When dev (``--who-and-when``), TRAIL dev (``--trail``), AEGIS dev (``--aegis``) and the zoo's
labelled campaigns (``--zoo DIR``: every app directory below DIR; repeatable, e.g. one per seed), each
run read once and cached under ``--cache`` (keyed by the reading code). Then:

1. the held-out verdicts: every data set (every zoo app) scored by stages fitted without it;
2. the shipped model: the step and agent stages on everything, the correctness model and decided
   threshold on those held-out verdicts, the failure-mode model on AEGIS's labelled agents; written
   to ``otel_blame/attribution/ranker_model.json`` and ``mode_model.json`` (unless ``--no-write``);
3. with ``--report``: the out-of-sample figures of :mod:`otel_blame.training.real_data` (each real
   data set left out, AEGIS by question and by shape, each zoo app left out, and ``--fresh`` zoo
   campaigns never fitted on), as the markdown tables docs/benchmarks.md keeps.

Usage::

    PYTHONPATH=$PWD .venv/bin/python bench/train_ranker.py --who-and-when ../shared/who_and_when/dev \\
        --trail ../shared/trail/dev --aegis ../shared/aegis --zoo /work/zoo-data/r0 --zoo /work/zoo-data/r1 \\
        --fresh /work/zoo-data/r2 --cache /work/cache --report [--json report.json]

(the zoo campaigns: ``bench/zoo.py --runs 120 --seed S --data-dir /work/zoo-data/rS``, S = 0, 1, 2;
the crew app through ``.venv-crewai``.)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from otel_blame.attribution.modes import MODEL_FILE as MODE_FILE
from otel_blame.attribution.ranker import MODEL_FILE
from otel_blame.training import ranker_fit as rf
from otel_blame.training import real_data as rd
from otel_blame.training import runs as lr

PACKAGE = Path(__file__).resolve().parent.parent / "otel_blame" / "attribution"


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--who-and-when", type=Path, help="the Who&When dev directory")
    parser.add_argument("--trail", type=Path, help="the TRAIL dev directory (traces/, annotations/)")
    parser.add_argument("--aegis", type=Path, help="the AEGIS dev directory or file")
    parser.add_argument("--zoo", type=Path, action="append", default=[], help="a directory of app campaigns")
    parser.add_argument("--fresh", type=Path, action="append", default=[], help="zoo campaigns only scored")
    parser.add_argument("--cache", type=Path, help="keep each data set's read runs here")
    parser.add_argument("--out", type=Path, default=PACKAGE, help="where to write the two model files")
    parser.add_argument("--no-write", action="store_true", help="write no model")
    parser.add_argument("--report", action="store_true", help="the out-of-sample figures (about an hour)")
    parser.add_argument("--json", type=Path, help="write the report's figures here")
    args = parser.parse_args()
    started = time.monotonic()

    def say(what: str) -> None:
        print(f"[{time.monotonic() - started:6.0f}s] {what}", file=sys.stderr, flush=True)

    runs: list[lr.LabelledRun] = []
    if args.who_and_when:
        runs += lr.load_cached("who_and_when", lambda: lr.who_and_when_runs(args.who_and_when), args.cache)
    if args.trail:
        runs += lr.load_cached("trail", lambda: lr.trail_runs(args.trail), args.cache)
    if args.aegis:
        runs += lr.load_cached("aegis", lambda: lr.aegis_runs(args.aegis), args.cache)
    if args.zoo:
        name = "zoo-" + "-".join(folder.name for folder in args.zoo)
        runs += lr.load_cached(name, lambda: lr.zoo_runs(args.zoo), args.cache)
    fresh = lr.zoo_runs(args.fresh) if args.fresh else []
    if not runs:
        parser.error("give --who-and-when, --trail, --aegis and/or --zoo")
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.dataset] = counts.get(run.dataset, 0) + 1
    print(
        f"Measured {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit {_commit()}, "
        f"{platform.machine()} {os.cpu_count()} cores, load average "
        f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}; "
        + ", ".join(f"{name} {count} runs" for name, count in sorted(counts.items()))
        + "\n"
    )
    say("held-out verdicts (one stage fit per data set and zoo app)")
    pool = rf.held_out_verdicts(runs)
    say("the shipped model")
    model = rd.fit_shipped(runs, pool)
    print(
        f"Shipped model: decided at odds {model.decided_threshold}; trained on {model.trained_on}; "
        f"failure modes from {model.modes.trained_on if model.modes else 'nothing'}\n"
    )
    if not args.no_write:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / MODEL_FILE).write_text(json.dumps(model.to_dict(), indent=1) + "\n", encoding="utf-8")
        if model.modes is not None:
            (args.out / MODE_FILE).write_text(json.dumps(model.modes.to_dict()) + "\n", encoding="utf-8")
        say(f"wrote {args.out / MODEL_FILE} and {args.out / MODE_FILE}")
    if args.report:
        report = rd.evaluate(runs, pool, fresh=fresh, progress=say)
        print("\n".join(rd.report_lines(report)))
        if args.json:
            figures = {
                result.name: result.summary()
                for result in [
                    *report.datasets,
                    *([report.aegis_by_question] if report.aegis_by_question else []),
                    *report.aegis_shapes,
                    *report.zoo_apps,
                ]
            }
            args.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    say("done")


if __name__ == "__main__":
    main()
