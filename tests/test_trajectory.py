import pytest
from pydantic import ValidationError

from otel_blame.trajectory import Step, StepKind, Trajectory


def test_from_steps_renumbers_and_lists_agents_in_order():
    traj = Trajectory.from_steps(
        [
            {"index": 7, "agent": "Planner", "content": "plan"},
            {"index": 3, "agent": "Coder", "content": "code"},
            {"index": 0, "agent": "Planner", "content": "again", "kind": StepKind.CODE_EXECUTION},
        ]
    )
    assert [s.index for s in traj.steps] == [0, 1, 2]
    assert traj.agents == ["Planner", "Coder"]
    assert [s.content for s in traj.steps_of("Planner")] == ["plan", "again"]


def test_indices_must_match_positions():
    with pytest.raises(ValidationError, match="index 5"):
        Trajectory(steps=[Step(index=5, agent="a")])


def test_unknown_fields_are_rejected():
    with pytest.raises(ValidationError):
        Step(index=0, agent="a", speaker="b")
