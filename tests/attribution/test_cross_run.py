"""Cross-run (spectrum) evidence, the pure part: Ochiai, a step's suspiciousness, the combination."""

from __future__ import annotations

import math

from otel_blame.attribution.cross_run import (
    CrossRunEvidence,
    EntityCounts,
    combine,
    ochiai,
    run_entities,
    step_suspiciousness,
)
from otel_blame.attribution.result import Attribution, Candidate
from otel_blame.trajectory import Outcome, StepKind, Trajectory


def _run() -> Trajectory:
    return Trajectory.from_steps(
        [
            {"agent": "Planner", "content": "Plan: fetch the rate, then compute."},
            {"agent": "Fetcher", "content": "Calling rates."},
            {"agent": "Fetcher", "content": "1.09", "kind": StepKind.TOOL, "tool_name": "rates"},
            {"agent": "Solver", "content": "The answer is 41."},
        ],
        outcome=Outcome.FAILURE,
    )


def _attribution() -> Attribution:
    return Attribution(
        agent="Solver",
        step=3,
        confidence=0.4,
        reason="Step 3 by Solver: the wrong final answer first appeared here.",
        method="heuristic",
        candidates=[
            Candidate(step=3, agent="Solver", score=0.4),
            Candidate(step=1, agent="Fetcher", score=0.35),
            Candidate(step=0, agent="Planner", score=0.25),
        ],
    )


def _evidence(failing: int, passing: int, fetcher_passing: int) -> CrossRunEvidence:
    """Planner and Solver in every run; Fetcher (and its tool) in every failing run but only
    ``fetcher_passing`` of the passing ones."""
    every = EntityCounts(failing=failing, passing=passing)
    fetcher = EntityCounts(failing=failing, passing=fetcher_passing)
    entities = {entity: every for entity in run_entities(_run())}
    for entity in entities:
        if "Fetcher" in entity:
            entities[entity] = fetcher
    return CrossRunEvidence(workflow="w", failing_runs=failing, passing_runs=passing, entities=entities)


def test_ochiai() -> None:
    assert ochiai(0, 5, 10) == 0.0
    assert ochiai(10, 0, 10) == 1.0
    assert math.isclose(ochiai(4, 4, 8), 4 / math.sqrt(8 * 8))
    assert ochiai(3, 0, 0) == 0.0


def test_the_components_of_a_run() -> None:
    assert run_entities(_run()) == {
        "agent:Planner",
        "kind:Planner/message",
        "agent:Fetcher",
        "kind:Fetcher/message",
        "kind:Fetcher/tool",
        "tool:Fetcher/rates",
        "agent:Solver",
        "kind:Solver/message",
    }


def test_a_component_seen_only_in_failing_runs_changes_the_verdict_and_says_so() -> None:
    evidence = _evidence(failing=100, passing=100, fetcher_passing=0)
    assert step_suspiciousness(evidence, _run().steps[1]) == 1.0
    combined = combine(_run(), _attribution(), evidence)
    assert (combined.agent, combined.step) == ("Fetcher", 1)  # still a step of this trace
    assert combined.cross_run_suspiciousness == 1.0
    assert "cross-run evidence changed the verdict" in combined.reason
    assert "The trace alone said: Step 3 by Solver" in combined.reason
    assert combined.candidates[0].step == 1
    assert combined.category is None  # the caller describes the new step


def test_flat_evidence_changes_nothing_but_is_reported() -> None:
    evidence = _evidence(failing=100, passing=100, fetcher_passing=100)
    combined = combine(_run(), _attribution(), evidence)
    assert (combined.agent, combined.step, combined.reason) == ("Solver", 3, _attribution().reason)
    assert math.isclose(combined.cross_run_suspiciousness or 0, math.sqrt(0.5), rel_tol=1e-5)


def test_few_runs_move_little_and_too_few_not_at_all() -> None:
    assert combine(_run(), _attribution(), _evidence(4, 4, 0)) == _attribution()  # below min_failing_runs
    # 5 failing runs: the evidence counts 5/15 of its weight, not enough against the trace's own margin
    few = combine(_run(), _attribution(), _evidence(5, 50, 0), weight=0.2)
    assert few.step == 3 and few.cross_run_suspiciousness is not None
    assert combine(_run(), _attribution(), None) == _attribution()
    assert combine(_run(), _attribution(), _evidence(100, 100, 0), weight=0.0).step == 3
