"""Agent names carry no verdict: renaming every agent of a real run (its speaker labels and every
mention of them in the text, as a system with other names would say it) changes nothing the offline
default concludes but the names themselves."""

from __future__ import annotations

import codecs
import itertools
import re
from pathlib import Path

import pytest

from otel_blame.attribution.registry import create_method
from otel_blame.datasets.aegis import iter_runs
from otel_blame.datasets.who_and_when import case_files, load_case
from otel_blame.trajectory import Trajectory

SHARED = Path(__file__).resolve().parents[3] / "shared"
if not SHARED.is_dir():  # a worktree beside main: ../shared from the repository's parent
    SHARED = Path(__file__).resolve().parents[4] / "shared"


def new_name(name: str) -> str:
    """Another name with the same shape: every letter rotated by 13 (case kept), digits, underscores
    and hyphens in place, so a run's text keeps its length and its tokens their kind."""
    return codecs.encode(name, "rot13")


def renamed(trajectory: Trajectory) -> tuple[Trajectory, dict[str, str]]:
    """The run with every agent called otherwise, in its labels and in its text (each mention keeping
    its case: all lower, all upper, or as the name is spelled)."""
    names = {agent: new_name(agent) for agent in trajectory.agents}
    # longest first, so that "Assistant1" is not renamed inside "SelectedAssistant1"
    alternatives = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w-])({alternatives})(?![\w-])", re.IGNORECASE)
    lowered = {name.lower(): new for name, new in names.items()}

    def replacement(match: re.Match[str]) -> str:
        found, new = match.group(0), lowered[match.group(0).lower()]
        if found.islower():
            return new.lower()
        return new.upper() if found.isupper() and len(found) > 1 else new

    def rename(text: str | None) -> str | None:
        return None if text is None else pattern.sub(replacement, text)

    steps = [
        step.model_copy(
            update={"agent": names[step.agent], "role": names[step.agent], "content": rename(step.content)}
        )
        for step in trajectory.steps
    ]
    task = trajectory.task.model_copy(
        update={"input": rename(trajectory.task.input), "final_output": rename(trajectory.task.final_output)}
    )
    return trajectory.model_copy(update={"steps": steps, "task": task}), names


def runs() -> list[tuple[str, Trajectory]]:
    if not SHARED.is_dir():
        pytest.skip(f"the real data sets are kept beside the repository ({SHARED}), not in it")
    who = SHARED / "who_and_when" / "dev"
    found = []
    for subset in ("Algorithm-Generated", "Hand-Crafted"):
        for path in case_files(who, [subset])[:8]:
            found.append((path.name, load_case(path, who).trajectory))
    by_shape: dict[str, int] = {}
    for run in iter_runs(SHARED / "aegis"):
        if by_shape.get(run.shape, 0) < 3:
            by_shape[run.shape] = by_shape.get(run.shape, 0) + 1
            found.append((f"aegis:{run.line}", run.trajectory))
        if len(by_shape) >= 7 and all(count >= 3 for count in by_shape.values()):
            break
    return found


@pytest.mark.slow
def test_renaming_every_agent_changes_no_verdict() -> None:
    method = create_method("ranker")
    differences = []
    for name, trajectory in itertools.islice(runs(), 40):
        original = method.attribute(trajectory)
        other, names = renamed(trajectory)
        again = method.attribute(other)
        said = (
            names[original.agent],
            original.step,
            original.decided,
            original.confidence,
            original.failure_mode,
        )
        said_again = (again.agent, again.step, again.decided, again.confidence, again.failure_mode)
        if said != said_again:
            differences.append(f"{name}: {said} -> {said_again}")
    assert not differences, "\n".join(differences)
