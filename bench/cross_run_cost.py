"""Cost of the cross-run statistics at scale: memory and per-trace time at N workflows x M agents.

Fills a real CrossRunStatistics (SQLite, the processor's own class and settings) with ``--workflows``
workflows of ``--agents`` agents each (every agent a message step, every fifth also a tool step, so
~2.4 components per agent), then times, for ``--samples`` failed traces of random workflows, what
the processor adds per failed trace: read the evidence, combine it with the heuristic's answer, count
the run. The same-run baseline is the heuristic attribution of the same traces.

    .venv/bin/python bench/cross_run_cost.py --workflows 10000 --agents 50
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import tempfile
import time
from pathlib import Path

from otel_blame.attribution.cross_run import combine
from otel_blame.attribution.heuristic import HeuristicAttribution
from otel_blame.processor.config import CrossRunConfig
from otel_blame.processor.cross_run import CrossRunStatistics
from otel_blame.trajectory import Outcome, StepKind, Task, Trajectory


def run_of(workflow: int, agents: int, rng: random.Random) -> Trajectory:
    steps: list[dict] = []
    for agent in range(agents):
        name = f"agent{agent:02d}"
        steps.append({"agent": name, "content": f"{name} of workflow {workflow}: step {rng.randint(1, 99)}"})
        if agent % 5 == 0:
            steps.append(
                {"agent": name, "content": "42", "kind": StepKind.TOOL, "tool_name": f"tool{agent % 7}"}
            )
    return Trajectory.from_steps(steps, task=Task(name=f"task{workflow}"), outcome=Outcome.FAILURE)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workflows", type=int, default=10_000)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    config = CrossRunConfig(max_workflows=args.workflows, max_agents_per_workflow=args.agents)
    with tempfile.TemporaryDirectory(prefix="cross-run-bench-") as directory:
        path = Path(directory) / "cross_run.sqlite"
        stats = CrossRunStatistics(config, path)
        before = rss_mib()
        started = time.perf_counter()
        for workflow in range(args.workflows):
            stats.observe(f"svc/task{workflow}", run_of(workflow, args.agents, rng), failed=workflow % 2 == 0)
        fill = time.perf_counter() - started
        sizes = stats.sizes()
        heuristic = HeuristicAttribution()
        baseline: list[float] = []
        added: list[float] = []
        for _ in range(args.samples):
            workflow = rng.randrange(args.workflows)
            trajectory = run_of(workflow, args.agents, rng)
            t0 = time.perf_counter()
            answer = heuristic.attribute(trajectory)
            t1 = time.perf_counter()
            evidence = stats.evidence(f"svc/task{workflow}", trajectory)
            combined = combine(trajectory, answer, evidence, min_failing_runs=1)
            stats.observe(f"svc/task{workflow}", trajectory, failed=True, blamed_step=combined.step)
            t2 = time.perf_counter()
            baseline.append(t1 - t0)
            added.append(t2 - t1)
        stats.close()
        disk = sum(f.stat().st_size for f in Path(directory).iterdir()) / 2**20
    after = rss_mib()

    def ms(values: list[float], q: float) -> float:
        return 1000 * statistics.quantiles(values, n=100)[int(q) - 1] if q < 100 else 1000 * max(values)

    print(f"workflows x agents: {args.workflows} x {args.agents}; components kept: {sizes['components']}")
    print(f"fill: {fill:.1f} s ({1000 * fill / args.workflows:.2f} ms per run counted)")
    print(f"database on disk: {disk:.1f} MiB; process max RSS {before:.0f} -> {after:.0f} MiB")
    print(
        f"per failed trace, cross-run (evidence + combine + count): median {ms(added, 50):.2f} ms, "
        f"p95 {ms(added, 95):.2f} ms"
    )
    print(f"baseline, heuristic attribution of the same trace: median {ms(baseline, 50):.2f} ms")
    print(
        f"ratio cross-run / heuristic (medians): {statistics.median(added) / statistics.median(baseline):.2f}"
    )


if __name__ == "__main__":
    main()
