"""Real Who&When logs attributed by the offline method, as blame-store records for tests."""

from __future__ import annotations

import hashlib
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


# --- failure patterns ---------------------------------------------------------------------------------

# (service, workflow, blamed step, agent, category, dependency, failure mode, decided, reasons, runs,
#  hours ago of the oldest run) of a support desk and a research team: recurring causes, written several
# ways (numbers, ids, clause order), a new one, one that undecided runs share, and undecided runs.
PATTERN_CAUSES = (
    ("support-desk", "refund", 2, "lookup", "dependency", "orders_api", None, True,
     ("Step 2: orders_api failed (HTTP 503) on the call researcher relied on: a dependency, not the "
      "agent's own output.",
      "Step 2: orders_api failed (HTTP 502) on the call researcher relied on: a dependency, not the "
      "agent's own output."), 16, 20.0),
    ("support-desk", "refund", 3, "writer", "agent", None, None, True,
     ("Step 3 by writer: it overrode what it was given; the final answer's value first appears here.",
      "Step 3 by writer: the final answer's value first appears here; it overrode what it was given."),
     10, 23.0),
    ("support-desk", "refund", 4, "reviewer", "agent", None, "premature_termination", True,
     ("Step 4 by reviewer: it stopped the run before any answer, with work still to do.",), 6, 0.8),
    ("support-desk", "refund", 2, "lookup", "dependency", "payments_api", None, False,
     ("Step 2: payments_api failed (timeout) on the call researcher relied on: a dependency.",), 4, 9.0),
    ("support-desk", "refund", 3, "writer", "agent", None, None, False,
     ("Step 3 by writer: a value first appears here.",), 7, 22.0),
    ("research-agents", "market-report", 0, "planner", "specification", None, None, True,
     ("Step 0 by planner: its plan left out part of what the task asks. Step 2 says the task or its "
      "instructions were wrong: a specification problem.",), 8, 18.0),
)  # fmt: skip


def _desk_run(position: int, dependency: str | None, step: int) -> Trajectory:
    order, amount = 1000 + 37 * position, 20 + position
    call = f"tool_call {dependency or 'orders_api'}({{'id': {order}}})"
    steps = [
        Step(index=0, agent="planner", content=f"Plan: check order ORD-{order} and refund {amount} EUR."),
        Step(index=1, agent="researcher", content=call),
        Step(
            index=2, agent="lookup", kind="tool", tool_name=dependency or "orders_api",
            content="HTTP 503 Service Unavailable" if dependency else f"total {amount * 10} EUR",
            is_error=bool(dependency),
        ),
        Step(index=3, agent="writer", content=f"We refund {amount * 10} EUR for order ORD-{order}."),
        Step(index=4, agent="reviewer", content="Looks fine. TERMINATE" if step == 4 else "Looks fine."),
    ]  # fmt: skip
    task = Task(name=f"refund ORD-{order}", workflow="refund", input=f"Refund order ORD-{order}?")
    return Trajectory(
        task=task,
        steps=steps,
        outcome=Outcome.FAILURE,
        trace_id=hashlib.md5(f"run {position}".encode()).hexdigest(),
    )


def pattern_runs(book, now: float) -> list[StoredRun]:  # noqa: ANN001 - a pattern book
    """Runs of :data:`PATTERN_CAUSES`, oldest first, each assigned its pattern by ``book`` (as the
    processor assigns them) and carrying its definition, as a blame the processor keeps does."""
    from otel_blame.attribution.result import Attribution, Candidate
    from otel_blame.patterns import PatternDefinition, cause_of

    planned = []
    for cause_number, cause in enumerate(PATTERN_CAUSES):
        service, workflow, step, agent, category, dependency, mode, decided, reasons, count, oldest = cause
        for run in range(count):
            # later runs closer together: a cause getting worse
            hours = oldest * (1 - run / count) ** 1.5 + 0.02
            planned.append((now - hours * 3600, cause_number, run))
    runs = []
    for position, (at, cause_number, run) in enumerate(sorted(planned)):
        service, workflow, step, agent, category, dependency, mode, decided, reasons, _, _ = PATTERN_CAUSES[
            cause_number
        ]
        trajectory = _desk_run(position, dependency if category == "dependency" else None, step)
        if workflow != "refund":
            trajectory = trajectory.model_copy(update={"task": Task(name="market report", workflow=workflow)})
        candidates = [
            Candidate(step=step, agent=agent, score=0.4),
            Candidate(step=0, agent="planner", score=0.3),
        ]
        verdict = Attribution(
            agent=agent, step=step, confidence=0.8 if decided else 0.3, decided=decided,
            reason=reasons[run % len(reasons)], method="ranker", category=category, dependency=dependency,
            failure_mode=mode, candidates=[] if decided else candidates,
        )  # fmt: skip
        cause = cause_of(service, workflow, trajectory, verdict)
        known = book.assign(cause, at)
        runs.append(
            build_run(
                trajectory,
                verdict,
                trace_id=hashlib.md5(f"run {position}".encode()).hexdigest(),
                service=service,
                attributed_at=at,
                pattern=PatternDefinition.of(known, cause),
            )  # fmt: skip
        )
    return runs
