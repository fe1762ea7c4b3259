"""Labelled runs: every data set the ranker learns from, read once into one shape.

A run's labels say which agents a verdict may name to be right (``faulty``: one agent in Who&When,
TRAIL and the zoo, one to four in AEGIS), and, where people labelled steps, which steps it may name
(``accepted``: the decisive step, or every annotated span in TRAIL). AEGIS names agents only: its
runs teach the step ranker as "a step of one of these agents is decisive" (multiple-instance: the
probability of any of their steps), never as "this step".

Reading a run (its evidence, :func:`otel_blame.attribution.step_rows.step_rows`) is the costly part:
:func:`load_cached` keeps each data set's runs on disk, keyed by the source of the code that reads
them, so a change to the reading reads them again and anything else does not.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import otel_blame
from otel_blame.attribution.step_rows import StepRows, step_rows
from otel_blame.datasets import aegis
from otel_blame.datasets.trail import load_trail_case, trail_files
from otel_blame.datasets.who_and_when import SUBSETS, case_files, load_case
from otel_blame.trajectory import Trajectory

ZOO = "zoo"
AEGIS = "aegis"
# what reading a run depends on (a change in any reads every data set again): the step rows, the
# evidence they hold, and the readers of each layout
READING_SOURCES = (
    "attribution/step_rows.py",
    "attribution/signals.py",
    "attribution/systemic.py",
    "attribution/roles.py",
    "attribution/causal",
    "conventions",
    "datasets",
    "loaders.py",
    "trajectory.py",
    "training/runs.py",
)


@dataclass
class LabelledRun:
    """One annotated run, read once (see the module docstring)."""

    file: str
    group: str  # a Who&When subset, trail-<subset>, aegis-<shape>, or an app's name
    kind: str  # the planted fault kind (injected runs), else ""
    rows: StepRows
    faulty: frozenset[str]  # the agents a verdict may name to be right
    mistake_step: int | None = None  # the decisive step, where people labelled one
    accepted: tuple[int, ...] = ()  # the steps a verdict may name to be right, where labelled
    question: str = ""  # runs that share one are split together
    modes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # each faulty agent's failure modes

    def __post_init__(self) -> None:
        if not self.accepted and self.mistake_step is not None:
            self.accepted = (self.mistake_step,)

    @property
    def trajectory(self) -> Trajectory:
        return self.rows.trajectory

    @property
    def step_labelled(self) -> bool:
        return bool(self.accepted)

    @property
    def mistake_agent(self) -> str:
        """The one agent a single-agent label names (the first of several, in name order)."""
        return min(self.faulty) if self.faulty else ""

    @property
    def dataset(self) -> str:
        return dataset_name(self.group)

    @property
    def task_giver_labelled(self) -> bool:
        """Its labels name only task-givers (a fault planted in the task's own message): a verdict on
        an agent's failure does not blame them (:mod:`otel_blame.attribution.roles`), so the run
        teaches nothing and is scored apart."""
        givers = self.rows.roles.task_givers
        return bool(self.faulty) and self.faulty <= givers

    @property
    def targets(self) -> list[int]:
        """The candidate positions a verdict may name: the accepted steps where steps are labelled,
        else every candidate step of a faulty agent."""
        candidates = self.rows.candidates
        steps = self.rows.trajectory.steps
        if self.accepted:
            position = {index: at for at, index in enumerate(candidates)}
            return [position[step] for step in self.accepted if step in position]
        return [at for at, index in enumerate(candidates) if steps[index].agent in self.faulty]


def dataset_name(group: str) -> str:
    """The data set a run of ``group`` belongs to: a TRAIL subset is its own (``trail-gaia``), a
    Who&When subset is ``ww-<subset>``, every AEGIS shape is ``aegis``, any other group (an app's
    name) is the zoo."""
    if group.startswith("trail"):
        return group
    if group.startswith(f"{AEGIS}-"):
        return AEGIS
    return f"ww-{group}" if group in SUBSETS else ZOO


def who_and_when_runs(dataset: Path, group: str | None = None) -> list[LabelledRun]:
    """The labelled runs of a Who&When-layout directory (``group`` overrides the subset name: an
    injected campaign's app, whose planted fault kind is read too)."""
    paths = case_files(dataset, [s for s in SUBSETS if (Path(dataset) / s).is_dir()])
    return [run for run in _map(_who_and_when_run, [(path, Path(dataset), group) for path in paths]) if run]


def _who_and_when_run(item: tuple[Path, Path, str | None]) -> LabelledRun | None:
    path, dataset, group = item
    case = load_case(path, dataset)
    if not case.trajectory.steps:
        return None
    kind = ""
    if group is not None:
        kind = str(json.loads(path.read_text(encoding="utf-8")).get("fault_kind") or "")
    return LabelledRun(
        file=case.file,
        group=group or case.subset,
        kind=kind,
        rows=step_rows(case.trajectory),
        faulty=frozenset({case.mistake_agent}),
        mistake_step=case.mistake_step,
        question=case.trajectory.task.input or case.file,
    )


def trail_runs(dataset: Path) -> list[LabelledRun]:
    """TRAIL-layout traces (group ``trail-<subset>``): the decisive step is the earliest HIGH-impact
    error's (else the earliest error's), every annotated step is accepted."""
    return [run for run in _map(_trail_run, [(path, Path(dataset)) for path in trail_files(dataset)]) if run]


def _trail_run(item: tuple[Path, Path]) -> LabelledRun | None:
    path, dataset = item
    case = load_trail_case(path, dataset)
    spans = case.step_spans()
    labelled = sorted({spans[location] for location in case.labelled_spans if location in spans})
    if not labelled or not case.trajectory.steps:
        return None
    decisive = case.decisive_step()
    decisive = labelled[0] if decisive is None else decisive
    return LabelledRun(
        file=case.file,
        group=f"trail-{case.subset}",
        kind="",
        rows=step_rows(case.trajectory),
        faulty=frozenset({case.trajectory.steps[decisive].agent}),
        mistake_step=decisive,
        accepted=tuple(labelled),
        question=case.trajectory.task.input or case.file,
    )


def aegis_runs(path: Path, limit: int | None = None) -> list[LabelledRun]:
    """AEGIS runs (group ``aegis-<shape>``) whose faulty agents spoke: labels name agents only."""
    runs = [run for run in aegis.iter_runs(path, limit) if run.faulty]
    return _map(_aegis_run, runs)


def _aegis_run(run: aegis.AegisRun) -> LabelledRun:
    return LabelledRun(
        file=f"aegis:{run.line}",
        group=f"{AEGIS}-{run.shape}",
        kind="",
        rows=step_rows(run.trajectory),
        faulty=frozenset(run.faulty),
        question=run.question,
        modes={agent: tuple(modes) for agent, modes in run.faulty.items()},
    )


def zoo_runs(folders: Iterable[Path]) -> list[LabelledRun]:
    """Injected campaigns: every directory below each folder that holds labelled runs is one app."""
    runs: list[LabelledRun] = []
    for folder in folders:
        for app in sorted(p for p in Path(folder).iterdir() if p.is_dir()):
            runs += who_and_when_runs(app, group=app.name)
    return runs


def _map(function: Callable, items: Sequence) -> list:  # noqa: ANN001 - a picklable function
    """``function`` over ``items``, on every core for a long list (reading runs is CPU-bound)."""
    workers = min(os.cpu_count() or 1, 4)
    if len(items) < 64 or workers < 2:
        return [function(item) for item in items]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(function, items, chunksize=16))


def reading_version() -> str:
    """A digest of the package source that reading a run depends on: a change there reads again."""
    root = Path(otel_blame.__file__).parent
    digest = hashlib.sha256()
    for part in READING_SOURCES:
        path = root / part
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
        for file in files:
            digest.update(file.relative_to(root).as_posix().encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def load_cached(name: str, read: Callable[[], list[LabelledRun]], cache: Path | None) -> list[LabelledRun]:
    """``read()``, or its result kept under ``cache`` for the same reading code and ``name``."""
    if cache is None:
        return read()
    file = Path(cache) / f"{name}-{reading_version()}.pickle"
    if file.is_file():
        with file.open("rb") as stream:
            return pickle.load(stream)  # noqa: S301 - our own cache, written just below
    runs = read()
    file.parent.mkdir(parents=True, exist_ok=True)
    temporary = file.with_suffix(".tmp")
    with temporary.open("wb") as stream:
        pickle.dump(runs, stream, protocol=pickle.HIGHEST_PROTOCOL)
    temporary.replace(file)
    return runs
