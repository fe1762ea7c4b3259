"""Confidence calibration: a map from a method's raw confidence to how often it was right.

``otel-blame inject --calibration-out FILE`` fits one on a fault-injection campaign (the planted
fault is the ground truth); the processor applies it when ``attribution.calibration: FILE`` is
set, so ``blame.confidence`` 0.7 means the blamed agent was right about 70 % of the time on that
app. The fit is isotonic regression (pool adjacent violators: the calibrated value never goes down
as the raw confidence goes up) with each pooled block's accuracy shrunk toward 1/2 by one success
and one failure, so a block of three runs cannot claim 0 % or 100 %. Inside a block's range of raw
values the map is that block's value (a step function, as isotonic regression is), linear in the gaps
between blocks, flat outside them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

if TYPE_CHECKING:
    from otel_blame.inject.report import CampaignReport

FORMAT = "otel-blame-calibration/1"


class CalibrationError(ValueError):
    """The calibration file cannot be used; the message names the file and what is wrong."""


class CalibrationPoint(BaseModel):
    """One pooled block of the fit: raw confidences ``low``..``high`` (mean ``raw``) -> ``calibrated``."""

    model_config = ConfigDict(extra="forbid")

    raw: float = Field(ge=0.0, le=1.0)
    calibrated: float = Field(ge=0.0, le=1.0)
    runs: int = Field(ge=1)
    low: float | None = Field(default=None, ge=0.0, le=1.0, description="lowest raw value in the block")
    high: float | None = Field(default=None, ge=0.0, le=1.0, description="highest raw value in the block")

    @property
    def lower(self) -> float:
        return self.raw if self.low is None else self.low

    @property
    def upper(self) -> float:
        return self.raw if self.high is None else self.high


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["otel-blame-calibration/1"] = FORMAT
    method: str = Field(description="the attribution method whose confidence this maps")
    target: Literal["agent", "step"] = Field(
        description="what 'right' meant: the blamed agent, or agent and step"
    )
    runs: int = Field(ge=1)
    points: list[CalibrationPoint] = Field(min_length=1)
    created_at: str = ""
    source: str = Field(default="", description="e.g. the campaign that produced it")

    @model_validator(mode="after")
    def _monotone(self) -> Calibration:
        for before, after in zip(self.points, self.points[1:], strict=False):
            if after.lower < before.upper or after.calibrated < before.calibrated:
                raise ValueError("points must be sorted by raw and calibrated must not decrease")
        return self

    def apply(self, confidence: float) -> float:
        """The calibrated confidence for a raw one: a block's value inside its raw range, linear
        between blocks, flat outside them."""
        points = self.points
        if confidence <= points[0].upper:
            return points[0].calibrated
        for left, right in zip(points, points[1:], strict=False):
            if confidence < right.lower:
                share = (confidence - left.upper) / (right.lower - left.upper)
                return round(left.calibrated + share * (right.calibrated - left.calibrated), 4)
            if confidence <= right.upper:
                return right.calibrated
        return points[-1].calibrated

    def save(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Calibration:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as error:
            raise CalibrationError(
                f"{path}: cannot read the calibration file: {error.strerror or error}"
            ) from None
        except json.JSONDecodeError as error:
            raise CalibrationError(f"{path}: not JSON (line {error.lineno}, column {error.colno})") from None
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the file"
            raise CalibrationError(
                f"{path}: not an otel-blame calibration file ({where}: {first['msg']})"
            ) from None


def fit(
    pairs: Iterable[tuple[float, bool]], *, method: str, target: Literal["agent", "step"], source: str = ""
) -> Calibration:
    """Isotonic fit of correctness on confidence; raises ValueError with no pairs."""
    ordered = sorted((float(c), bool(ok)) for c, ok in pairs)
    if not ordered:
        raise ValueError("no attributed runs to fit a calibration on")
    # runs with the same raw confidence start as one block: one raw value, one calibrated value
    same: dict[float, list[float]] = {}
    for confidence, correct in ordered:
        block = same.setdefault(confidence, [0.0, 0.0, 0.0])
        block[0] += confidence
        block[1] += float(correct)
        block[2] += 1.0
    # [sum_confidence, correct, runs, low, high], pooled while accuracy would fall
    blocks: list[list[float]] = []
    for confidence, block in same.items():
        blocks.append([*block, confidence, confidence])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
            last = blocks.pop()
            pooled = [a + b for a, b in zip(blocks[-1][:3], last[:3], strict=True)]
            blocks[-1] = [*pooled, blocks[-1][3], last[4]]
    points: list[CalibrationPoint] = []
    floor = 0.0
    for total_confidence, correct, runs, low, high in blocks:
        calibrated = max(floor, (correct + 1) / (runs + 2))
        floor = calibrated
        points.append(
            CalibrationPoint(
                raw=round(total_confidence / runs, 4),
                calibrated=round(calibrated, 4),
                runs=int(runs),
                low=round(low, 4),
                high=round(high, 4),
            )
        )
    return Calibration(
        method=method,
        target=target,
        runs=len(ordered),
        points=points,
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        source=source,
    )


def fit_calibration(report: CampaignReport, target: Literal["agent", "step"] = "agent") -> Calibration:
    """A calibration from a campaign's attributed runs (their confidence vs whether blame was right)."""
    pairs: list[tuple[float, bool]] = []
    methods: Sequence[str] = []
    for record in report.results:
        if record.prediction is None or record.agent_correct is None:
            continue
        correct = (
            record.agent_correct if target == "agent" else bool(record.agent_correct and record.step_correct)
        )
        pairs.append((record.prediction.confidence, correct))
        methods = [*methods, record.prediction.method]
    method = max(set(methods), key=methods.count) if methods else report.method
    return fit(
        pairs,
        method=method,
        target=target,
        source=f"otel-blame inject --app {report.app} --seed {report.seed}",
    )
