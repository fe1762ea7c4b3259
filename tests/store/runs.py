"""Real Who&When logs attributed by the offline method, as blame-store records for tests."""

from __future__ import annotations

import os
from pathlib import Path

from otel_blame.attribution.registry import create_method
from otel_blame.loaders import load_trajectory
from otel_blame.store.records import StoredRun, build_run
from otel_blame.trajectory import Outcome, Step, Task, Trajectory

WHO_AND_WHEN = Path(os.environ.get("OTEL_BLAME_WHO_AND_WHEN", "/work/shared/who_and_when/dev"))


def who_and_when_files(limit: int, subset: str = "*") -> list[Path]:
    files = sorted(WHO_AND_WHEN.glob(f"{subset}/*.json"), key=lambda p: (p.parent.name, int(p.stem)))
    return files[:limit]


def attributed_runs(
    count: int,
    *,
    start: float,
    spacing: float,
    services: tuple[str, ...] = ("checkout",),
    subset: str = "*",
    times: list[float] | None = None,
    decided: bool | None = None,
) -> list[StoredRun]:
    """``count`` Who&When logs, attributed with the heuristic, spaced ``spacing`` seconds apart.
    ``decided``: None keeps each verdict's own ``decided``; True or False sets it on every run (the
    store's mechanics count decided verdicts only, so tests of those mechanics use decided runs)."""
    method = create_method("heuristic")
    runs = []
    for position, path in enumerate(who_and_when_files(count, subset)):
        trajectory = load_trajectory(path)
        runs.append(
            build_run(
                trajectory,
                method.attribute(trajectory),
                trace_id=f"{position + 1:032x}",
                service=services[position % len(services)],
                attributed_at=times[position] if times else start + position * spacing,
            )
        )
    if decided is not None:
        runs = [run.model_copy(update={"decided": decided}) for run in runs]
    return runs


def hostile_run(trace_id: str, attributed_at: float) -> StoredRun:
    """A run whose agents write HTML and script: the UI must show it as text."""
    steps = [
        Step(index=0, agent="planner", content="Plan: look up the order <b>bold?</b>"),
        Step(index=1, agent="<img src=x onerror=alert(2)>", content="<script>alert(1)</script>"),
        Step(
            index=2, agent="executor", content="</pre><script>alert(3)</script>", kind="tool", tool_name="db"
        ),
    ]
    trajectory = Trajectory(
        task=Task(
            name="refund",
            input="<script>alert(4)</script> refund order <i>42</i>",
            expected_output="42",
            final_output="41",
        ),
        steps=steps,
        outcome=Outcome.FAILURE,
    )
    attribution = create_method("heuristic").attribute(trajectory)
    return build_run(trajectory, attribution, trace_id=trace_id, service="<svc>", attributed_at=attributed_at)
