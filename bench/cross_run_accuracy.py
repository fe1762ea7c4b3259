"""Accuracy with and without cross-run evidence, as the observed runs grow, on inject campaigns.

Runs the same campaign twice (``otel-blame inject --app demo --json``, same seed, passing runs mixed
in with ``--clean-fraction``): once with ``cross_run.enabled: true``, once with ``false`` (the
processor configuration of the in-process processor). The processor sees the campaign's runs in order,
so the first N runs of a campaign are what the cross-run statistics had seen by then; the table
gives the agent and step accuracy over the failed, attributed runs among the first N, and the
number of verdicts the evidence changed.

    .venv/bin/python bench/cross_run_accuracy.py --runs 200 --checkpoints 10 50 200 --clean-fraction 0.3

``--reuse DIR`` reads ``with.json`` / ``without.json`` already written there instead of running.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def campaign(directory: Path, mode: str, args: argparse.Namespace) -> dict:
    config = directory / f"{mode}.yaml"
    config.write_text(f"cross_run:\n  enabled: {'true' if mode == 'with' else 'false'}\n", encoding="utf-8")
    out = directory / f"{mode}.json"
    command = [
        str(Path(sys.executable).with_name("otel-blame")),
        "inject",
        "--app",
        args.app,
        "--runs",
        str(args.runs),
        "--seed",
        str(args.seed),
        "--clean-fraction",
        str(args.clean_fraction),
        "--processor-config",
        str(config),
        "--json",
    ]
    with out.open("w", encoding="utf-8") as sink:
        subprocess.run(command, stdout=sink, check=True)
    return json.loads(out.read_text(encoding="utf-8"))


def scored(report: dict, first: int) -> tuple[int, float | None, float | None, int]:
    records = [r for r in report["results"][:first] if r["status"] == "attributed"]
    if not records:
        return 0, None, None, 0
    agent = sum(bool(r["agent_correct"]) for r in records) / len(records)
    step = sum(bool(r["step_correct"]) for r in records) / len(records)
    changed = sum(
        "cross-run evidence changed the verdict" in (r["prediction"] or {}).get("reason", "") for r in records
    )
    return len(records), agent, step, changed


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--app", default="demo")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clean-fraction", type=float, default=0.3)
    parser.add_argument("--checkpoints", type=int, nargs="+", default=[10, 50, 200])
    parser.add_argument(
        "--reuse", type=Path, default=None, help="a directory with with.json and without.json"
    )
    args = parser.parse_args()
    if args.reuse is not None:
        reports = {
            mode: json.loads((args.reuse / f"{mode}.json").read_text()) for mode in ("with", "without")
        }
    else:
        with tempfile.TemporaryDirectory(prefix="cross-run-accuracy-") as directory:
            reports = {mode: campaign(Path(directory), mode, args) for mode in ("with", "without")}
    print(
        "| campaign runs seen | failed runs scored | agent % without | agent % with | step % without "
        "| step % with | verdicts changed |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for first in args.checkpoints:
        n, agent_without, step_without, _ = scored(reports["without"], first)
        _, agent_with, step_with, changed = scored(reports["with"], first)
        print(
            f"| {first} | {n} | {pct(agent_without)} | {pct(agent_with)} | {pct(step_without)} "
            f"| {pct(step_with)} | {changed} |"
        )
    statuses = reports["with"]["statuses"]
    print(f"\nstatuses (with): {statuses}")


if __name__ == "__main__":
    main()
