"""TRAIL's layout: real agent traces with human labels on the spans where things went wrong.

A dataset is ``traces/<name>.json[.gz]`` (a span tree or an OTLP JSON export of one trace) beside
``annotations/<name>.json`` (``{"errors": [{"location": span id, "impact": LOW|MEDIUM|HIGH,
"category": ...}]}``); the name's prefix is its subset (``gaia``, ``swe_bench``). A trace is read
through the same conventions as a live one; its labels stay apart from the Trajectory a method sees.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from otel_blame.loaders import load_trajectory
from otel_blame.trajectory import Trajectory

IMPACTS = ("LOW", "MEDIUM", "HIGH")


class TrailError(BaseModel):
    """One annotated error: the span it sits on, how much it mattered, what kind it is."""

    model_config = ConfigDict(extra="ignore")

    location: str
    impact: str = "MEDIUM"
    category: str = ""


class TrailCase(BaseModel):
    """One trace with its errors; ``subset`` is the file name's prefix (``gaia``, ``swe_bench``)."""

    file: str
    subset: str
    trajectory: Trajectory
    errors: list[TrailError]

    def step_spans(self) -> dict[str, int]:
        return {step.span_id: step.index for step in self.trajectory.steps if step.span_id}

    @property
    def labelled_spans(self) -> set[str]:
        return {error.location for error in self.errors}

    @property
    def high_spans(self) -> set[str]:
        return {error.location for error in self.errors if error.impact.upper() == "HIGH"}

    def decisive_step(self) -> int | None:
        """The step of the earliest HIGH-impact error (the closest thing TRAIL has to a decisive step)."""
        spans = self.step_spans()
        steps = [spans[location] for location in self.high_spans if location in spans]
        return min(steps) if steps else None


def is_trail_dataset(dataset_dir: Path) -> bool:
    return (dataset_dir / "traces").is_dir() and (dataset_dir / "annotations").is_dir()


def trail_files(dataset_dir: Path, limit: int | None = None) -> list[Path]:
    """The traces that have an annotation file, in name order (at most ``limit`` per subset)."""
    traces = sorted(p for p in (dataset_dir / "traces").iterdir() if p.name.endswith((".json", ".json.gz")))
    found = [p for p in traces if _annotation_path(dataset_dir, p).is_file()]
    if not found:
        raise FileNotFoundError(f"no traces with annotations under {dataset_dir}/traces")
    if limit is None:
        return found
    counts: dict[str, int] = {}
    kept = []
    for path in found:
        subset = _subset(path)
        counts[subset] = counts.get(subset, 0) + 1
        if counts[subset] <= limit:
            kept.append(path)
    return kept


def _stem(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".json")


def _subset(path: Path) -> str:
    return _stem(path).split("-", 1)[0]


def _annotation_path(dataset_dir: Path, trace: Path) -> Path:
    return dataset_dir / "annotations" / f"{_stem(trace)}.json"


def load_trail_case(path: Path, dataset_dir: Path) -> TrailCase:
    """A trace read through the same conventions as a live one, with its annotated errors."""
    trajectory = load_trajectory(path)
    annotation = json.loads(_annotation_path(dataset_dir, path).read_text(encoding="utf-8"))
    errors = [TrailError.model_validate(error) for error in annotation.get("errors") or []]
    return TrailCase(file=path.name, subset=_subset(path), trajectory=trajectory, errors=errors)
