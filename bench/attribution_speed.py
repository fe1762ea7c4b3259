"""CPU time of the offline default's verdict, per 100 steps, on the real Who&When logs.

The target (issue 17): ``RankerAttribution().attribute(trajectory)`` under 10 ms of CPU per 100
steps over Who&When's dev logs, whose long steps are whole web pages. CPU time
(``time.process_time``) after a warm-up pass, over several repeats: the best repeat is the least
disturbed by other load on the machine, the median says how steady it was. ``--stages`` also times
the reading's stages on their own (the causal graph, the causal reading, the signals). On a shared
machine compare two trees in the same session, alternating runs. Usage::

    .venv/bin/python bench/attribution_speed.py --repeats 5 --stages   # OTEL_BLAME_WHO_AND_WHEN: the logs
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from otel_blame.attribution.causal import build_graph, read_causally
from otel_blame.attribution.ranker import RankerAttribution
from otel_blame.attribution.signals import ScoringContext
from otel_blame.attribution.step_rows import RANKER_SIGNALS
from otel_blame.datasets.who_and_when import SUBSETS, case_files, load_case
from otel_blame.trajectory import Trajectory

WHO_AND_WHEN = Path(os.environ.get("OTEL_BLAME_WHO_AND_WHEN", "/work/shared/who_and_when/dev"))


def _load(dataset: Path) -> list[Trajectory]:
    subsets = [subset for subset in SUBSETS if (dataset / subset).is_dir()]
    runs = [load_case(path, dataset).trajectory for path in case_files(dataset, subsets)]
    return [run for run in runs if run.steps]


def _pass(method: RankerAttribution, runs: list[Trajectory]) -> float:
    started = time.process_time()
    for run in runs:
        method.attribute(run)
    return time.process_time() - started


def _stages(runs: list[Trajectory]) -> dict[str, float]:
    """CPU seconds of each stage over one pass: the causal graph, the causal reading over it, the
    signals' context and the ranker's signals (the ranking and the verdict make up the rest)."""
    spent = dict.fromkeys(("graph", "reading", "signals"), 0.0)
    for run in runs:
        clock = time.process_time()
        graph = build_graph(run)
        spent["graph"] += time.process_time() - clock
        clock = time.process_time()
        read_causally(run, graph)
        spent["reading"] += time.process_time() - clock
        clock = time.process_time()
        context = ScoringContext.build(run)
        for signal in RANKER_SIGNALS:
            signal.evidence(context)
        spent["signals"] += time.process_time() - clock
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=WHO_AND_WHEN, help="a Who&When-layout directory")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stages", action="store_true", help="also time the reading's stages")
    args = parser.parse_args()
    runs = _load(args.dataset)
    steps = sum(len(run.steps) for run in runs)
    method = RankerAttribution()
    _pass(method, runs)  # warm-up: imports, compiled regexes, the packaged model
    times = [_pass(method, runs) for _ in range(args.repeats)]
    per_100 = [1000 * spent * 100 / steps for spent in times]
    print(f"{len(runs)} runs, {steps} steps, load average {os.getloadavg()[0]:.2f}")
    print(f"verdict: best {min(per_100):.2f} ms, median {statistics.median(per_100):.2f} ms per 100 steps")
    if args.stages:
        for stage, spent in _stages(runs).items():
            print(f"  {stage}: {1000 * spent * 100 / steps:.2f} ms per 100 steps")


if __name__ == "__main__":
    main()
