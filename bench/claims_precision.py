"""How often a claim that checks false names a faulty agent, on every real data set and the zoo.

A verdict resting on such a claim is decided without odds (docs/methods.md, "Claims that check
false"), so what matters is how often the agent of the run's first one (the claim
:func:`otel_blame.attribution.ranker.proven_wrong` finds) is labelled faulty. The checks have no
fitted part, so these runs are out of sample for them whatever the shipped model was fitted on.

    PYTHONPATH=$PWD .venv/bin/python bench/claims_precision.py --who-and-when ../shared/who_and_when/dev \\
        --trail ../shared/trail/dev --aegis ../shared/aegis --zoo /work/zoo-data/r2 --cache /work/cache
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rich.console import Console
from rich.table import Table

from otel_blame.attribution.ranker import proven_wrong
from otel_blame.training import runs as lr


def wilson_lower(right: int, total: int, z: float = 1.96) -> float:
    """The 95 % Wilson lower bound of ``right`` of ``total``."""
    if total == 0:
        return 0.0
    share = right / total
    centre = share + z * z / (2 * total)
    spread = z * math.sqrt(share * (1 - share) / total + z * z / (4 * total * total))
    return (centre - spread) / (1 + z * z / total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--who-and-when", type=Path)
    parser.add_argument("--trail", type=Path)
    parser.add_argument("--aegis", type=Path)
    parser.add_argument("--zoo", type=Path, action="append", default=[])
    parser.add_argument("--cache", type=Path, help="the reading cache bench/train_ranker.py keeps")
    args = parser.parse_args()
    runs: list[lr.LabelledRun] = []
    if args.who_and_when:
        runs += lr.load_cached("who_and_when", lambda: lr.who_and_when_runs(args.who_and_when), args.cache)
    if args.trail:
        runs += lr.load_cached("trail", lambda: lr.trail_runs(args.trail), args.cache)
    if args.aegis:
        runs += lr.load_cached("aegis", lambda: lr.aegis_runs(args.aegis), args.cache)
    if args.zoo:
        runs += lr.zoo_runs(args.zoo)
    found: dict[str, list[bool]] = {}
    for run in runs:
        claim = proven_wrong(run.rows)
        if claim is not None:
            faulty = run.trajectory.steps[claim.step].agent in run.faulty
            found.setdefault(f"{run.group} ({claim.kind})", []).append(faulty)
    table = Table(title=f"The first claim that checks false, by data set and kind ({len(runs)} runs read)")
    for column in ("group (kind)", "runs with one", "its agent faulty", "95 % lower bound"):
        table.add_column(column, justify="left" if column.startswith("group") else "right")
    for group, marks in sorted(found.items()):
        table.add_row(group, str(len(marks)), str(sum(marks)), f"{wilson_lower(sum(marks), len(marks)):.2f}")
    every = [mark for marks in found.values() for mark in marks]
    table.add_row("all", str(len(every)), str(sum(every)), f"{wilson_lower(sum(every), len(every)):.2f}")
    Console(width=110).print(table)


if __name__ == "__main__":
    main()
