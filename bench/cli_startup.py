"""How fast `otel-blame --help`, `--version` and `attribute` on a small file answer, against a
same-run baseline.

Each command runs ``--runs`` times as a fresh process, the commands in turn (so a change of load on
a shared machine weighs on each alike). Reported: the median wall time and the median CPU time
(user + system, which other jobs stretch far less than the wall clock), each with its ratio to a
bare ``python -c pass`` (the interpreter's own start); and importing every subcommand up front (what
the CLI did before its subcommands became lazy). The package (and ``--before``) is byte-compiled
first, as an install leaves it. ``attribute`` runs the default method on a small Who&When log
(``--file``), a second time with pydantic's plugins off: the dev environment carries ``logfire`` (a
test-only extra), whose pydantic plugin imports the OpenAI SDK on the first model a process
builds; a user's install has no such plugin. ``--before`` runs an earlier tree's command (with
``python -P``, so the working directory's checkout does not shadow it). Usage::

    git archive main otel_blame | tar -x -C /tmp/before
    .venv/bin/python bench/cli_startup.py --runs 21 --file /work/shared/who_and_when/dev/Hand-Crafted/1.json \
        --before /tmp/before
"""

from __future__ import annotations

import argparse
import compileall
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def seconds(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run; CPU is the child's user + system time, which other jobs on a
    shared machine stretch far less than the wall clock."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_seconds(cases: dict[str, list[str]], runs: int) -> dict[str, tuple[float, float]]:
    """Each case's median (wall, CPU) over ``runs``, the cases taken in turn (one run of each per
    round), so a change of load on a shared machine weighs on every case alike rather than on one."""
    taken: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, argv in cases.items():
            taken[name].append(seconds(argv))
    return {
        name: (statistics.median(w for w, _ in runs_of), statistics.median(c for _, c in runs_of))
        for name, runs_of in taken.items()
    }


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
    # byte-compiled as an install leaves them (pip writes .pyc files): with PYTHONDONTWRITEBYTECODE
    # set, as on the development machine, a checkout's modules would be compiled again on every run
    import otel_blame

    trees = [Path(otel_blame.__file__).parent]
    if args.before is not None:
        trees.append(args.before / "otel_blame")
    for tree in trees:
        compileall.compile_dir(str(tree), quiet=1)
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
            # -P: no working directory on sys.path, which from a checkout would put ITS otel_blame first
            before += [sys.executable, "-P", "-m", "otel_blame.console_script", "attribute", str(args.file)]
            cases["the earlier tree's attribute FILE, pydantic plugins off (before)"] = before
    results = median_seconds(cases, args.runs)
    wall_base, cpu_base = results["python -c pass (baseline)"]
    runs = f"{args.runs} runs"
    print(f"| command | median wall s ({runs}) | × python -c pass | median CPU s | × python -c pass |")
    print("| --- | --- | --- | --- | --- |")
    for name, (wall, cpu) in results.items():
        print(f"| {name} | {wall:.3f} | {wall / wall_base:.1f} | {cpu:.3f} | {cpu / cpu_base:.1f} |")


if __name__ == "__main__":
    main()
