"""What the templates show: agent lanes and colours, step kinds, heat colours, the culprits plot."""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass, field
from functools import cached_property

from markupsafe import Markup, escape

from otel_blame.attribution.decision import BlameDecision
from otel_blame.loaders import Annotation
from otel_blame.store.records import CulpritReport, StoredRun
from otel_blame.trajectory import Step, StepKind, Trajectory

# Distinct on white and for the common colour-vision deficiencies (Okabe-Ito, then Tableau and
# more); ui.css has one class per entry (.c0 ... .c15) with the same colours.
PALETTE = (
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#7a5195", "#8c6d31",
    "#2f4b7c", "#5f9e6e", "#b07aa1", "#9c755f", "#4e79a7", "#e15759", "#76b7b2", "#bcbd22",
)  # fmt: skip
OTHERS_COLOUR = "#9aa0a6"
PREVIEW_CHARS = 1500
QUIET_PREVIEW_CHARS = 300  # steps inside a collapsed run of unremarkable steps show less until opened
GENERIC_ROLES = frozenset({"assistant", "user", "system", "tool", "function", "human", "ai", "model"})
QUIET_SHARE = 0.2  # a step under this share of the run's top score is unremarkable ...
QUIET_RUN = 4  # ... and this many of them in a row collapse into one line


def agent_class(agent: str) -> int:
    """The agent's colour class, from its name alone: the same agent has the same colour on every
    page and in every run (two agents may share one; their names and lanes tell them apart)."""
    return zlib.crc32(agent.encode("utf-8")) % len(PALETTE)


def agent_colour(agent: str) -> str:
    return PALETTE[agent_class(agent)]


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


def display_role(step: Step) -> str | None:
    """The step's role when it says something its agent name does not (``Orchestrator (thought)``);
    chat-API roles (``assistant``, ``user`` …) say how a log was recorded, not who spoke."""
    role = (step.role or "").strip()
    if not role or role == step.agent or role.lower() in GENERIC_ROLES:
        return None
    return role


def shorten(text: str, length: int) -> str:
    """At most ``length`` characters, cut at a word, without a dangling ``;`` or ``,`` before the ``…``."""
    if len(text) <= length:
        return text
    cut = text[: length - 1]
    if " " in cut and not text[length - 1].isspace():
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ;,:.-–") + "…"


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
    colour_class: int
    colour: str
    kind: str
    role: str | None
    score: float
    share: float  # score / the run's top score, 0..1: what the heat bar and colour show
    heat: str
    culprit: bool
    candidate: int | None  # rank among the candidates, 1 = first
    annotated: bool
    preview: str
    truncated: bool
    inline: bool = True  # the whole text is on the page (else: on the step's own page)

    @property
    def remarkable(self) -> bool:
        return (
            self.culprit
            or self.candidate is not None
            or self.annotated
            or self.step.is_error
            or self.share >= QUIET_SHARE
        )


@dataclass
class StepGroup:
    """Steps shown one by one, or a run of unremarkable steps collapsed into one line."""

    steps: list[StepView]
    collapsed: bool = False

    @property
    def summary(self) -> str:
        counts: dict[str, int] = {}
        for view in self.steps:
            counts[view.step.agent] = counts.get(view.step.agent, 0) + 1
        who = ", ".join(f"{agent} {n}" for agent, n in sorted(counts.items(), key=lambda item: -item[1])[:4])
        more = "" if len(counts) <= 4 else f", {len(counts) - 4} more"
        first, last = self.steps[0].step.index, self.steps[-1].step.index
        return f"steps {first}–{last}: {len(self.steps)} unremarkable steps ({who}{more})"


@dataclass
class StripMark:
    """One step in the overview strip (SVG units: one per step)."""

    x: int
    index: int
    agent: str
    colour: str
    heat: str
    share: float
    title: str
    culprit: bool
    candidate: bool
    annotated: bool


@dataclass
class Annotated:
    """The file's known answer (Who&When mistake_agent / mistake_step) and how the verdict compares."""

    agent: str | None
    step: int | None
    said: str
    quality: str  # good, partial, bad, none


def strip_svg(marks: list[StripMark]) -> Markup:
    """The overview strip's marks as SVG, built here rather than in the template: a 1,000-step run
    has 1,000 of them, and one f-string each is several times faster than a template loop."""
    parts = []
    for m in marks:
        classes = "mark" + (" is-culprit" if m.culprit else "") + (" is-candidate" if m.candidate else "")
        heat = m.heat if m.share > 0 else "#eceff3"
        if m.culprit:
            under = f'<rect class="culprit-mark" x="{m.x}" y="24" width="1" height="6" fill="#d7301f"/>'
        elif m.candidate:
            under = f'<rect class="candidate-mark" x="{m.x}" y="25" width="1" height="5" fill="#1c2433"/>'
        elif m.annotated:
            under = f'<rect class="annotated-mark" x="{m.x}" y="25" width="1" height="5" fill="#1f4fd1"/>'
        else:
            under = ""
        parts.append(
            f'<a href="#step-{m.index}" class="{classes}" data-step="{m.index}">'
            f"<title>{escape(m.title)}</title>"
            f'<rect x="{m.x}" y="0" width="1" height="10" fill="{m.colour}"/>'
            f'<rect x="{m.x}" y="11" width="1" height="13" fill="{heat}"/>{under}</a>'
        )
    return Markup("".join(parts))


def rails(agents: list[tuple[str, int]]) -> list[Markup]:
    """Each lane's rail (one column per agent, this lane's dot on): one per lane, shared by its steps."""
    return [
        Markup(
            "".join(
                f'<span class="lane c{cls}{" on" if position == lane else ""}"></span>'
                for position, (_agent, cls) in enumerate(agents)
            )
        )
        for lane in range(len(agents))
    ]


@dataclass
class RunView:
    trajectory: Trajectory
    decision: BlameDecision
    run: StoredRun | None  # the blame; None when the run was not blamed
    agents: list[tuple[str, int]]  # (agent, colour class) in lane order
    steps: list[StepView]
    groups: list[StepGroup]
    strip: list[StripMark]
    top_score: float
    ranked: list[tuple[int, str, float]] = field(default_factory=list)  # (step, agent, score)
    annotation: Annotated | None = None

    @cached_property
    def strip_marks(self) -> Markup:
        return strip_svg(self.strip)

    @cached_property
    def rails(self) -> list[Markup]:
        return rails(self.agents)

    @property
    def culprit_class(self) -> int:
        return agent_class(self.run.agent) if self.run is not None else 0


def _groups(steps: list[StepView]) -> list[StepGroup]:
    """Consecutive unremarkable steps (QUIET_RUN or more) collapse; the first and last step never do."""
    groups: list[StepGroup] = []
    quiet: list[StepView] = []

    def flush() -> None:
        if len(quiet) >= QUIET_RUN:
            groups.append(StepGroup(list(quiet), collapsed=True))
        else:
            groups.extend(StepGroup([view]) for view in quiet)
        quiet.clear()

    last = len(steps) - 1
    for position, view in enumerate(steps):
        if view.remarkable or position in (0, last):
            flush()
            groups.append(StepGroup([view]))
        else:
            quiet.append(view)
    flush()
    return groups


def run_view(
    trajectory: Trajectory,
    decision: BlameDecision,
    run: StoredRun | None = None,
    annotation: Annotation | None = None,
) -> RunView:
    """What the run page shows: every step with its lane, colour and heat (relative to the run's top
    score, so a run whose best suspect scores 0.08 still shows where blame sits), the overview strip,
    the collapsed runs of unremarkable steps, and the known answer when the file carries one."""
    lanes = {agent: position for position, agent in enumerate(trajectory.agents)}
    scores = run.scores if run is not None else []
    top = max(scores, default=0.0)
    ranks = {c.step: rank for rank, c in enumerate(run.candidates, start=1)} if run is not None else {}
    known_step = annotation.step if annotation is not None else None
    steps = []
    for step in trajectory.steps:
        score = scores[step.index] if step.index < len(scores) else 0.0
        share = score / top if top > 0 else 0.0
        steps.append(
            StepView(
                step=step,
                lane=lanes[step.agent],
                colour_class=agent_class(step.agent),
                colour=agent_colour(step.agent),
                kind=kind_label(step),
                role=display_role(step),
                score=score,
                share=share,
                heat=heat_colour(share),
                culprit=run is not None and step.index == run.step,
                candidate=ranks.get(step.index),
                annotated=known_step == step.index,
                preview=step.content[:PREVIEW_CHARS],
                truncated=len(step.content) > PREVIEW_CHARS,
            )
        )
    groups = _groups(steps)
    for (
        group
    ) in groups:  # collapsed steps show a shorter preview; a stored run's, their text on their own page
        if group.collapsed:
            for view in group.steps:
                view.preview = view.step.content[:QUIET_PREVIEW_CHARS]
                view.truncated = len(view.step.content) > QUIET_PREVIEW_CHARS
                view.inline = run is None
    strip = [
        StripMark(
            x=view.step.index,
            index=view.step.index,
            agent=view.step.agent,
            colour=view.colour,
            heat=view.heat,
            share=view.share,
            title=f"step {view.step.index} · {view.step.agent} · score {view.score:.2f}"
            + (" · culprit" if view.culprit else "")
            + (f" · candidate {view.candidate}" if view.candidate and not view.culprit else "")
            + (" · the known answer" if view.annotated else ""),
            culprit=view.culprit,
            candidate=view.candidate is not None,
            annotated=view.annotated,
        )
        for view in steps
    ]
    ranked = [(c.step, c.agent, c.score) for c in run.candidates] if run is not None else []
    if run is not None and not ranked:
        ranked = sorted(
            ((s.step.index, s.step.agent, s.score) for s in steps if s.score > 0), key=lambda item: -item[2]
        )[:5]
    annotated = None
    if annotation is not None and (annotation.agent is not None or annotation.step is not None):
        said, quality = compare_with_annotation(annotation, run)
        annotated = Annotated(annotation.agent, annotation.step, said, quality)
    return RunView(
        trajectory=trajectory,
        decision=decision,
        run=run,
        agents=[(agent, agent_class(agent)) for agent in lanes],
        steps=steps,
        groups=groups,
        strip=strip,
        top_score=top,
        ranked=ranked,
        annotation=annotated,
    )


def compare_with_annotation(annotation: Annotation, run: StoredRun | None) -> tuple[str, str]:
    """How the verdict compares with the known answer, in the CLI's words."""
    if run is None:
        return "", "none"
    agent_ok = annotation.agent is not None and annotation.agent == run.agent
    step_ok = annotation.step is not None and annotation.step == run.step
    if agent_ok and step_ok:
        return "agent and step match", "good"
    if agent_ok:
        return "agent matches, step does not", "partial"
    if step_ok:
        return "step matches, agent does not", "partial"
    return "does not match", "bad"


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
        (f"{s.agent}" + (f" ({s.service})" if s.service else ""), agent_colour(s.agent), s.counts)
        for s in named
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
