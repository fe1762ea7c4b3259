"""The Who&When benchmark (Zhang et al., ICML 2025): annotated failure logs as Trajectories.

Layout: ``DIR/Algorithm-Generated/*.json`` and ``DIR/Hand-Crafted/*.json``; each file has
``history``, ``question``, ``ground_truth``, ``mistake_agent``, ``mistake_step`` (0-based index
into ``history``) and ``mistake_reason``. The annotation is kept apart from the Trajectory so no
method can see it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from otel_blame.loaders import TrajectoryFormatError, normalise_agent, trajectory_from_conversation
from otel_blame.trajectory import Trajectory

SUBSETS: tuple[str, ...] = ("Algorithm-Generated", "Hand-Crafted")


class WhoAndWhenCase(BaseModel):
    """One annotated log: the trajectory a method sees and the answer it is scored against."""

    model_config = ConfigDict(extra="forbid")

    file: str  # relative to the dataset dir, e.g. "Algorithm-Generated/12.json"
    subset: str
    trajectory: Trajectory
    mistake_agent: str
    mistake_step: int
    mistake_reason: str = ""


def _sort_key(path: Path) -> tuple[int, str]:
    match = re.fullmatch(r"(\d+)", path.stem)
    return (int(match.group(1)) if match else 1 << 30, path.name)


def _recorded_trajectory(data: dict, relative: str) -> Trajectory | None:
    """The run as the processor assembled it, when the log carries it (``otel-blame inject
    --dataset-out`` writes it beside ``history``): the failing dependencies its spans recorded and the
    final output come with it, so a method is measured on what it sees in production."""
    recorded = data.get("trajectory")
    if not isinstance(recorded, dict):
        return None
    try:
        trajectory = Trajectory.model_validate(recorded)
    except ValueError:
        return None
    history = data.get("history")
    if isinstance(history, list) and len(history) != len(trajectory.steps):
        return None  # the annotation's step indices are the history's
    return trajectory.model_copy(update={"source": relative})


def load_case(path: Path, dataset_dir: Path) -> WhoAndWhenCase:
    """Read one annotated log; raise TrajectoryFormatError naming the file when it is malformed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise TrajectoryFormatError(f"{path}: {error}") from None
    relative = path.relative_to(dataset_dir).as_posix()
    if not isinstance(data, dict) or "mistake_agent" not in data or "mistake_step" not in data:
        raise TrajectoryFormatError(f"{relative}: not a Who&When log (no mistake_agent / mistake_step)")
    trajectory = _recorded_trajectory(data, relative) or trajectory_from_conversation(data, source=relative)
    try:
        mistake_step = int(str(data["mistake_step"]).strip())
    except ValueError:
        raise TrajectoryFormatError(
            f"{relative}: mistake_step {data['mistake_step']!r} is not an integer"
        ) from None
    return WhoAndWhenCase(
        file=relative,
        subset=path.parent.name,
        trajectory=trajectory,
        mistake_agent=_agent_as_in_trajectory(normalise_agent(str(data["mistake_agent"])), trajectory),
        mistake_step=mistake_step,
        mistake_reason=str(data.get("mistake_reason") or ""),
    )


def _agent_as_in_trajectory(agent: str, trajectory: Trajectory) -> str:
    """Annotations sometimes differ in case ("Websurfer"); use the trajectory's spelling then."""
    if agent in trajectory.agents:
        return agent
    matches = [name for name in trajectory.agents if name.lower() == agent.lower()]
    return matches[0] if len(matches) == 1 else agent


def case_files(dataset_dir: Path, subsets: Sequence[str] = SUBSETS) -> list[Path]:
    """The dataset's JSON files in a stable order (subset, then numeric file name)."""
    dataset_dir = Path(dataset_dir)
    if not dataset_dir.is_dir():
        raise FileNotFoundError(f"dataset directory {dataset_dir} does not exist")
    files: list[Path] = []
    for subset in subsets:
        if subset not in SUBSETS:
            raise ValueError(f"unknown subset {subset!r}; expected one of {', '.join(SUBSETS)}")
        folder = dataset_dir / subset
        if folder.is_dir():
            files.extend(sorted(folder.glob("*.json"), key=_sort_key))
    if not files:
        raise FileNotFoundError(f"no {'/'.join(subsets)}/*.json files under {dataset_dir}")
    return files


def iter_cases(dataset_dir: Path, subsets: Sequence[str] = SUBSETS) -> Iterator[WhoAndWhenCase]:
    for path in case_files(dataset_dir, subsets):
        yield load_case(path, Path(dataset_dir))
