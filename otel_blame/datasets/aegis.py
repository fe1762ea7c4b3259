"""AEGIS: failed runs of real multi-agent systems, each labelled with its faulty agents and the MAST
failure mode each was steered into (no step labels).

Layout: a JSON-lines file, gzipped or not (``dev.jsonl.gz``; a directory holding one is read too),
one run a line: ``{"question", "trajectory": [{"step" (1-based), "agent_name", "content"}],
"faulty_agents": [{"agent_name", "error_type": "FM-x.y"}]}``, and ``taxonomy.json`` beside it naming
the modes. A run's labels stay apart from the Trajectory a method sees.

Labels name agents the way the injector did, not always the way the run's speakers are named: in
another case (``assistant1`` for ``Assistant1``), with the system's slot number appended
(``economist3`` for ``Economist``), or an agent that never spoke (``ranker5`` in a run cut before
the ranker's turn). :func:`label_speaker` maps each to the speaker it names, or to none.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from otel_blame.loaders import TrajectoryFormatError
from otel_blame.trajectory import Outcome, Step, Task, Trajectory, name_from_input

DEFAULT_FILE = "dev.jsonl.gz"
TAXONOMY_FILE = "taxonomy.json"
_SLOT = re.compile(r"[-\d]+$")


class AegisRun(BaseModel):
    """One labelled run: what a method sees (``trajectory``) and what it is scored against."""

    model_config = ConfigDict(extra="forbid")

    line: int  # 1-based line in the file: names the run in a report, never read by a method
    question: str
    shape: str  # the system's shape, told apart by its speakers (:func:`system_shape`)
    trajectory: Trajectory
    faulty: dict[str, list[str]]  # each faulty speaker -> its failure modes ("FM-1.1", ...)
    unspoken: list[str] = []  # faulty agents the labels name that never spoke in the run

    @property
    def speakers(self) -> list[str]:
        return self.trajectory.agents

    def is_faulty(self, agent: str | None) -> bool:
        return agent is not None and agent in self.faulty


def is_aegis_dataset(path: Path) -> bool:
    """A JSON-lines file of runs with ``faulty_agents``, or a directory holding ``dev.jsonl.gz``."""
    file = _data_file(path)
    if file is None:
        return False
    try:
        with _open(file) as lines:
            first = next((line for line in lines if line.strip()), "")
        return "faulty_agents" in json.loads(first)
    except (OSError, ValueError, EOFError):
        return False


def _data_file(path: Path) -> Path | None:
    if path.is_dir():
        found = [path / DEFAULT_FILE] if (path / DEFAULT_FILE).is_file() else sorted(path.glob("*.jsonl*"))
        return found[0] if found else None
    return path if path.is_file() and ".jsonl" in path.name else None


def _open(file: Path):  # noqa: ANN202 - a text stream
    if file.name.endswith(".gz"):
        return gzip.open(file, "rt", encoding="utf-8")
    return file.open(encoding="utf-8")


def label_speaker(label: str, speakers: Sequence[str]) -> str | None:
    """The speaker an injector's agent label names: the same name in any case, else the same name
    once the label's slot number is dropped (``economist3`` -> ``Economist``) when the speaker's own
    name carries none; None when it names no speaker of the run."""
    lowered = {speaker.lower(): speaker for speaker in speakers}
    if label.lower() in lowered:
        return lowered[label.lower()]
    base = _SLOT.sub("", label).lower()
    found = [speaker for speaker in speakers if speaker.lower() == base and not _SLOT.search(speaker)]
    return found[0] if len(found) == 1 else None


# Each system shape by the speakers that tell it apart, checked in order (the first that matches).
_SHAPES: tuple[tuple[str, frozenset[str]], ...] = (
    ("magentic-one", frozenset({"MagenticOneOrchestrator"})),
    ("manager-searcher", frozenset({"Manager", "Searcher"})),
    ("role-assignment", frozenset({"RoleAssigner", "Solver", "Critic", "Evaluator"})),
    ("graph-nodes", frozenset({"Node"})),
    (
        "expert-team",
        frozenset({"AlgorithmDeveloper", "ComputerScientist", "Debugger", "Programmer", "PythonAssistant"})
        | frozenset({"QualityManager", "Reflector", "Tester"}),
    ),
    ("ranked-assistants", frozenset({"Ranker", "SelectedAssistant", "Economist", "Mathematician"})),
    ("debate", frozenset({"User"})),
)


def system_shape(speakers: Sequence[str]) -> str:
    """Which system a run comes from, told apart by its speakers (slot numbers dropped): Magentic-One,
    a manager with a searcher, role assignment, graph nodes, a team of experts, ranked assistants,
    a debate whose user relays the task; assistants alone are ranked assistants cut short."""
    families = {_SLOT.sub("", speaker) for speaker in speakers}
    for shape, marks in _SHAPES:
        if families & marks:
            return shape
    if families <= {"Assistant"}:
        return "ranked-assistants"
    return "+".join(sorted(families))


def run_from_record(record: Mapping[str, object], line: int) -> AegisRun:
    """One line of the file as a labelled run."""
    raw = record.get("trajectory")
    if not isinstance(raw, list) or not raw:
        raise TrajectoryFormatError(f"line {line}: 'trajectory' must be a non-empty list of steps")
    question = str(record.get("question") or "")
    steps = []
    for position, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise TrajectoryFormatError(f"line {line}: step {position} is not an object")
        speaker = str(item.get("agent_name") or "unknown")
        content = str(item.get("content") or "")
        steps.append(Step(index=position, agent=speaker, role=speaker, content=content))
    task = Task(name=name_from_input(question) or "task", input=question or None)
    trajectory = Trajectory(task=task, steps=steps, outcome=Outcome.FAILURE, source=f"aegis:{line}")
    faulty: dict[str, list[str]] = {}
    unspoken: list[str] = []
    for label in record.get("faulty_agents") or []:  # type: ignore[union-attr]
        if not isinstance(label, Mapping):
            continue
        name, mode = str(label.get("agent_name") or ""), str(label.get("error_type") or "")
        speaker = label_speaker(name, trajectory.agents)
        if speaker is None:
            unspoken.append(name)
        else:
            faulty.setdefault(speaker, []).append(mode)
    return AegisRun(
        line=line,
        question=question,
        shape=system_shape(trajectory.agents),
        trajectory=trajectory,
        faulty=faulty,
        unspoken=unspoken,
    )


def iter_runs(path: Path, limit: int | None = None) -> Iterator[AegisRun]:
    """The runs of an AEGIS file (or of the ``dev.jsonl.gz`` in a directory), in file order."""
    file = _data_file(path)
    if file is None:
        raise FileNotFoundError(f"no AEGIS runs (*.jsonl[.gz]) at {path}")
    with _open(file) as lines:
        count = 0
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except ValueError as error:
                raise TrajectoryFormatError(f"{file.name} line {number}: not JSON ({error})") from None
            if not isinstance(record, Mapping):
                raise TrajectoryFormatError(f"{file.name} line {number}: not a JSON object")
            yield run_from_record(record, number)
            count += 1
            if limit is not None and count >= limit:
                return


def load_runs(path: Path, limit: int | None = None) -> list[AegisRun]:
    return list(iter_runs(path, limit))


def load_taxonomy(path: Path) -> dict[str, str]:
    """Mode and group ids -> names, from ``taxonomy.json`` beside the runs (empty when absent)."""
    folder = path if path.is_dir() else path.parent
    file = folder / TAXONOMY_FILE
    if not file.is_file():
        return {}
    data = json.loads(file.read_text(encoding="utf-8"))
    names: dict[str, str] = {}
    for group in data.get("error_types") or []:
        names[str(group.get("id"))] = str(group.get("name"))
        for mode in group.get("subtypes") or []:
            names[str(mode.get("id"))] = str(mode.get("name"))
    return names
