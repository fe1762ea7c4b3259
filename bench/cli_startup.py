"""How fast `otel-blame --help` and `--version` answer, against a same-run baseline.

Each command runs ``--runs`` times as a fresh process; the median wall time is reported with its
ratio to a bare ``python -c pass`` (the interpreter's own start) and to importing every
subcommand up front (what the CLI did before its subcommands became lazy). Usage::

    .venv/bin/python bench/cli_startup.py --runs 15
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def median_seconds(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="runs per command (median reported)")
    args = parser.parse_args()
    script = shutil.which("otel-blame") or str(Path(sys.executable).parent / "otel-blame")
    eager = "import otel_blame.cli, otel_blame.attribution.cli, otel_blame.commands.serve, otel_blame.demo"
    cases = {
        "python -c pass (baseline)": [sys.executable, "-c", "pass"],
        "otel-blame --version": [script, "--version"],
        "otel-blame --help": [script, "--help"],
        "importing every subcommand (the former eager CLI)": [sys.executable, "-c", eager],
    }
    results = {name: median_seconds(argv, args.runs) for name, argv in cases.items()}
    baseline = results["python -c pass (baseline)"]
    print(f"| command | median s ({args.runs} runs) | × python -c pass |")
    print("| --- | --- | --- |")
    for name, seconds in results.items():
        print(f"| {name} | {seconds:.3f} | {seconds / baseline:.1f} |")


if __name__ == "__main__":
    main()
