"""How fast `otel-blame --help`, `--version` and `attribute` on a small file answer, against a
same-run baseline.

Each command runs ``--runs`` times as a fresh process, the commands in turn; the median wall time is
reported with its ratio to a bare ``python -c pass`` (the interpreter's own start) and to importing every
subcommand up front (what the CLI did before its subcommands became lazy). ``attribute`` runs
the heuristic on a small Who&When log (``--file``), a second time with pydantic's plugins off:
the dev environment carries ``logfire`` (a test-only extra), whose pydantic plugin imports the
OpenAI SDK on the first model a process builds; a user's install has no such plugin. Usage::

    git archive 9522cee otel_blame | tar -x -C /tmp/before
    .venv/bin/python bench/cli_startup.py --runs 15 --file /work/shared/who_and_when/dev/Hand-Crafted/1.json \
        --before /tmp/before
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def seconds(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def median_seconds(cases: dict[str, list[str]], runs: int) -> dict[str, float]:
    """Each case's median over ``runs``, the cases taken in turn (one run of each per round), so a
    change of load on a shared machine weighs on every case alike rather than on one."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, argv in cases.items():
            times[name].append(seconds(argv))
    return {name: statistics.median(taken) for name, taken in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="runs per command (median reported)")
    parser.add_argument("--file", type=Path, default=None, help="a small saved run for `attribute`")
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        help="a directory holding an earlier tree's otel_blame package (git archive REF otel_blame | tar -x)"
        ": its `attribute` is timed too, as the baseline",
    )
    args = parser.parse_args()
    script = shutil.which("otel-blame") or str(Path(sys.executable).parent / "otel-blame")
    eager = (
        "import otel_blame.cli, otel_blame.commands.attribute, otel_blame.commands.evaluate, "
        "otel_blame.commands.serve, otel_blame.commands.demo"
    )
    cases = {
        "python -c pass (baseline)": [sys.executable, "-c", "pass"],
        "otel-blame --version": [script, "--version"],
        "otel-blame --help": [script, "--help"],
        "importing every subcommand (the former eager CLI)": [sys.executable, "-c", eager],
    }
    if args.file is not None:
        cases["otel-blame attribute FILE"] = [script, "attribute", str(args.file)]
        no_plugins = ["env", "PYDANTIC_DISABLE_PLUGINS=__all__"]
        cases["otel-blame attribute FILE, pydantic plugins off"] = [
            *no_plugins,
            script,
            "attribute",
            str(args.file),
        ]
        if args.before is not None:
            before = ["env", f"PYTHONPATH={args.before}", "PYDANTIC_DISABLE_PLUGINS=__all__"]
            before += [sys.executable, "-m", "otel_blame.console_script", "attribute", str(args.file)]
            cases["the earlier tree's attribute FILE, pydantic plugins off (before)"] = before
    results = median_seconds(cases, args.runs)
    baseline = results["python -c pass (baseline)"]
    print(f"| command | median s ({args.runs} runs) | × python -c pass |")
    print("| --- | --- | --- |")
    for name, seconds in results.items():
        print(f"| {name} | {seconds:.3f} | {seconds / baseline:.1f} |")


if __name__ == "__main__":
    main()
