"""What the templates show: agent lanes and colours, step kinds, heat colours, the culprits plot."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from otel_blame.store.records import CulpritReport, StoredRun
from otel_blame.trajectory import Step, StepKind

# Distinct on white and for the common colour-vision deficiencies (Okabe-Ito, then Tableau).
PALETTE = (
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9",
    "#d55e00", "#7a5195", "#8c6d31", "#2f4b7c", "#5f9e6e",
)  # fmt: skip
OTHERS_COLOUR = "#9aa0a6"
PREVIEW_CHARS = 1500


def agent_colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def heat_colour(score: float) -> str:
    """0 -> pale yellow, 1 -> deep red."""
    score = min(max(score, 0.0), 1.0)
    low, high = (254, 224, 139), (189, 0, 38)
    r, g, b = (round(a + (z - a) * score) for a, z in zip(low, high, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def kind_label(step: Step) -> str:
    if step.kind == StepKind.TOOL:
        return f"tool result · {step.tool_name}" if step.tool_name else "tool result"
    if step.kind == StepKind.CODE_EXECUTION:
        return "code run"
    return "message"


def format_time(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


def format_ago(unix: float, now: float | None = None) -> str:
    seconds = max(0, int((now or time.time()) - unix))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


@dataclass
class StepView:
    step: Step
    lane: int
    colour: str
    kind: str
    score: float
    heat: str
    culprit: bool
    preview: str
    truncated: bool


@dataclass
class RunView:
    run: StoredRun
    agents: list[tuple[str, str]]  # (agent, colour) in lane order
    steps: list[StepView]
    ranked: list[tuple[int, str, float]] = field(default_factory=list)  # (step, agent, score)
    culprit_lane: int = 0


def run_view(run: StoredRun) -> RunView:
    trajectory = run.trajectory
    lanes = {agent: position for position, agent in enumerate(trajectory.agents)}
    steps = []
    for step in trajectory.steps:
        score = run.scores[step.index] if step.index < len(run.scores) else 0.0
        preview = step.content[:PREVIEW_CHARS]
        steps.append(
            StepView(
                step=step,
                lane=lanes[step.agent],
                colour=agent_colour(lanes[step.agent]),
                kind=kind_label(step),
                score=score,
                heat=heat_colour(score),
                culprit=step.index == run.step,
                preview=preview,
                truncated=len(step.content) > PREVIEW_CHARS,
            )
        )
    ranked = [(c.step, c.agent, c.score) for c in run.candidates]
    if not ranked:
        ranked = sorted(
            ((s.step.index, s.step.agent, s.score) for s in steps if s.score > 0), key=lambda item: -item[2]
        )[:5]
    return RunView(
        run=run,
        agents=[(agent, agent_colour(position)) for agent, position in lanes.items()],
        steps=steps,
        ranked=ranked,
        culprit_lane=lanes.get(run.agent, 0),
    )


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    colour: str
    title: str


@dataclass
class Plot:
    width: int
    height: int
    bars: list[Bar]
    y_ticks: list[tuple[float, int]]  # (y, value)
    x_ticks: list[tuple[float, str]]  # (x, label)
    legend: list[tuple[str, str, int]]  # (label, colour, count)
    left: int
    bottom: int
    right: int
    top: int
    empty: bool


def _nice_max(value: int) -> int:
    if value <= 5:
        return max(value, 1)
    magnitude = 10 ** int(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * magnitude:
            return step * magnitude
    return value


def culprits_plot(report: CulpritReport, top: int = 6, width: int = 760, height: int = 240) -> Plot:
    """Stacked bars of blames per time bucket, one colour per agent (the top ``top``, then others)."""
    left, right, top_margin, bottom = 40, 10, 10, 26
    buckets = len(report.bucket_starts)
    named = report.series[:top]
    rest = report.series[top:]
    layers: list[tuple[str, str, list[int]]] = [
        (f"{s.agent}" + (f" ({s.service})" if s.service else ""), agent_colour(i), s.counts)
        for i, s in enumerate(named)
    ]
    if rest:
        summed = [sum(s.counts[i] for s in rest) for i in range(buckets)]
        layers.append((f"{len(rest)} other agents", OTHERS_COLOUR, summed))
    totals = [sum(layer[2][i] for layer in layers) for i in range(buckets)]
    y_max = _nice_max(max(totals, default=0))
    inner_w = width - left - right
    inner_h = height - top_margin - bottom
    slot = inner_w / max(buckets, 1)
    bars = []
    for i in range(buckets):
        base = 0
        for label, colour, counts in layers:
            n = counts[i]
            if not n:
                continue
            y0 = top_margin + inner_h - (base + n) / y_max * inner_h
            bars.append(
                Bar(
                    x=round(left + i * slot + slot * 0.12, 2),
                    y=round(y0, 2),
                    width=round(slot * 0.76, 2),
                    height=round(n / y_max * inner_h, 2),
                    colour=colour,
                    title=f"{label}: {n} at {time.strftime('%H:%M', time.gmtime(report.bucket_starts[i]))}",
                )
            )
            base += n
    tick_values = sorted({0, y_max // 2, y_max}) if y_max > 1 else [0, 1]
    y_ticks = [(round(top_margin + inner_h - v / y_max * inner_h, 2), v) for v in tick_values]
    fmt = "%H:%M" if report.window_seconds <= 2 * 86400 else "%m-%d"
    every = max(1, buckets // 6)
    x_ticks = [
        (round(left + i * slot + slot / 2, 2), time.strftime(fmt, time.gmtime(report.bucket_starts[i])))
        for i in range(0, buckets, every)
    ]
    legend = [(label, colour, sum(counts)) for label, colour, counts in layers]
    return Plot(
        width=width,
        height=height,
        bars=bars,
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        legend=legend,
        left=left,
        bottom=height - bottom,
        right=width - right,
        top=top_margin,
        empty=not bars,
    )


WINDOWS = {"15m": 900, "1h": 3600, "6h": 6 * 3600, "24h": 86400, "7d": 7 * 86400}


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``1h``, ``7d`` or plain seconds -> seconds; ValueError when unreadable."""
    text = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    value = float(number) * units[unit]
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    return value
