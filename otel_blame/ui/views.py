"""What the templates show: agent lanes and colours, step kinds, heat colours, the culprits plot."""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass, field
from functools import cached_property

from markupsafe import Markup, escape

from otel_blame.attribution.decision import BlameDecision, undecided_parts
from otel_blame.attribution.known_answer import compare
from otel_blame.loaders import Annotation
from otel_blame.store.records import CulpritReport, StoredRun
from otel_blame.trajectory import Step, StepKind, Trajectory

# Twelve hues chosen to be told apart: every pair at least 15 apart in CIEDE2000, none near the
# culprit red or the "other agents" grey, each dark enough for the white text of an agent chip
# (contrast >= 3); tests/ui/test_layout.py checks all three. ui.css has one class per entry (.c0 ...
# .c11) with the same colours.
PALETTE = (
    "#0072b2", "#689310", "#e84b89", "#6f3f1b", "#75268e", "#16562e",
    "#009690", "#bf7509", "#a06edd", "#901c40", "#666023", "#3c487f",
)  # fmt: skip
OTHERS_COLOUR = "#9aa0a6"
PREVIEW_CHARS = 1500
QUIET_PREVIEW_CHARS = 300  # steps inside a collapsed run of unremarkable steps show less until opened
GENERIC_ROLES = frozenset({"assistant", "user", "system", "tool", "function", "human", "ai", "model"})
QUIET_SHARE = 0.2  # a step under this share of the run's top score is unremarkable ...
QUIET_RUN = 4  # ... and this many of them in a row collapse into one line


def agent_class(agent: str) -> int:
    """The agent's preferred colour class, from its name alone, so an agent keeps its colour from
    page to page and run to run unless another agent of the same run got that colour first."""
    return zlib.crc32(agent.encode("utf-8")) % len(PALETTE)


def colour_classes(agents: list[str]) -> dict[str, int]:
    """A colour class per agent, in the order given (a run's lane order), no two the same while the
    palette lasts: each agent gets its preferred class (:func:`agent_class`), or the next free one."""
    taken: set[int] = set()
    classes: dict[str, int] = {}
    for agent in agents:
        if agent in classes:
            continue
        preferred = agent_class(agent)
        free = [(preferred + shift) % len(PALETTE) for shift in range(len(PALETTE))]
        chosen = next((cls for cls in free if cls not in taken), preferred)
        classes[agent] = chosen
        taken.add(chosen)
        if len(taken) == len(PALETTE):
            taken.clear()  # more agents than colours: repeat the palette
    return classes


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


def strip_svg(marks: list[StripMark], heat: bool = True) -> Markup:
    """The overview strip's marks as SVG, built here rather than in the template: a 1,000-step run
    has 1,000 of them, and one f-string each is several times faster than a template loop. Without
    ``heat`` (a run nothing was blamed in) the strip is the agents' colours alone."""
    parts = []
    for m in marks:
        classes = "mark" + (" is-culprit" if m.culprit else "") + (" is-candidate" if m.candidate else "")
        shade = m.heat if m.share > 0 else "#eceff3"
        if m.culprit:
            under = f'<rect class="culprit-mark" x="{m.x}" y="24" width="1" height="6" fill="#d7301f"/>'
        elif m.candidate:
            under = f'<rect class="candidate-mark" x="{m.x}" y="25" width="1" height="5" fill="#1c2433"/>'
        elif m.annotated:
            under = f'<rect class="annotated-mark" x="{m.x}" y="25" width="1" height="5" fill="#1f4fd1"/>'
        else:
            under = ""
        lower = f'<rect x="{m.x}" y="11" width="1" height="13" fill="{shade}"/>' if heat else ""
        parts.append(
            f'<a href="#step-{m.index}" class="{classes}" data-step="{m.index}">'
            f"<title>{escape(m.title)}</title>"
            f'<rect x="{m.x}" y="0" width="1" height="{10 if heat else 24}" fill="{m.colour}"/>'
            f"{lower}{under}</a>"
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
        return strip_svg(self.strip, heat=self.run is not None)

    @cached_property
    def rails(self) -> list[Markup]:
        return rails(self.agents)

    @cached_property
    def colours(self) -> dict[str, int]:
        """agent -> colour class, none shared (the lanes' colours)."""
        return dict(self.agents)

    @property
    def decided(self) -> bool:
        """A culprit is named: blamed, and the evidence decided it."""
        return self.run is not None and self.run.decided

    @property
    def culprit_class(self) -> int:
        return self.colour_of(self.run.agent) if self.run is not None else 0

    def colour_of(self, agent: str) -> int:
        return self.colours.get(agent, agent_class(agent))

    @property
    def undecided(self) -> list[tuple[str | None, int, int]]:
        """The undecided sentence in parts: (agent, or None when the same as the part before, step,
        colour class), as :func:`~otel_blame.attribution.decision.undecided_sentence` words it."""
        if self.run is None or self.run.decided:
            return []
        return [
            (agent, step, self.colour_of(agent if agent is not None else self.run.agent))
            for agent, step in undecided_parts(self.run.candidates, self.run.agent, self.run.step)
        ]


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
    the collapsed runs of unremarkable steps, and the known answer when the file carries one.

    Only a decided verdict marks a culprit; an undecided one marks its candidates. A run nothing was
    blamed in (it succeeded, or its outcome is unknown) shows no heat and no mark on any step: its
    known answer is plain text on the page."""
    lanes = {agent: position for position, agent in enumerate(trajectory.agents)}
    colours = colour_classes(list(lanes))
    scores = run.scores if run is not None else []
    top = max(scores, default=0.0)
    ranks = {c.step: rank for rank, c in enumerate(run.candidates, start=1)} if run is not None else {}
    decided = run is not None and run.decided
    known_step = annotation.step if annotation is not None and run is not None else None
    steps = []
    for step in trajectory.steps:
        score = scores[step.index] if step.index < len(scores) else 0.0
        share = score / top if top > 0 else 0.0
        steps.append(
            StepView(
                step=step,
                lane=lanes[step.agent],
                colour_class=colours[step.agent],
                colour=PALETTE[colours[step.agent]],
                kind=kind_label(step),
                role=display_role(step),
                score=score,
                share=share,
                heat=heat_colour(share),
                culprit=decided and run is not None and step.index == run.step,
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
            title=f"step {view.step.index} · {view.step.agent}"
            + (f" · score {view.score:.2f}" if run is not None else "")
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
        said, quality = compare(annotation, run)
        annotated = Annotated(annotation.agent, annotation.step, said, quality)
    return RunView(
        trajectory=trajectory,
        decision=decision,
        run=run,
        agents=[(agent, colours[agent]) for agent in lanes],
        steps=steps,
        groups=groups,
        strip=strip,
        top_score=top,
        ranked=ranked,
        annotation=annotated,
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
    classes: dict[str, int]  # colour class of each agent drawn in its own colour (none shared)
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


def culprits_plot(report: CulpritReport, top: int = 6, width: int = 500, height: int = 220) -> Plot:
    """Stacked bars of blames per time bucket, one colour per agent (the top ``top``, then others).
    Drawn at its own size in CSS pixels (never scaled down), so its labels stay 12 px."""
    left, right, top_margin, bottom = 40, 10, 10, 26
    buckets = len(report.bucket_starts)
    named = report.series[:top]
    rest = report.series[top:]
    classes = colour_classes([s.agent for s in named])
    layers: list[tuple[str, str, list[int]]] = [
        (f"{s.agent}" + (f" ({s.service})" if s.service else ""), PALETTE[classes[s.agent]], s.counts)
        for s in named
    ]
    if rest:
        summed = [sum(s.counts[i] for s in rest) for i in range(buckets)]
        layers.append((f"{len(rest)} other agent{'' if len(rest) == 1 else 's'}", OTHERS_COLOUR, summed))
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
        classes=classes,
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


@dataclass(frozen=True)
class SparkBar:
    x: float
    y: float
    width: float
    height: float
    count: int


def sparkline_points(counts: list[int], width: float = 120, height: float = 24) -> list[SparkBar]:
    """A sparkline's bars for runs per bucket: oldest at the left, the busiest bucket full height, an
    empty bucket a hairline (so the time axis shows)."""
    if not counts:
        return []
    peak = max(counts) or 1
    slot = width / len(counts)
    bars = []
    for i, n in enumerate(counts):
        tall = max(1.0, (height - 2) * n / peak) if n else 0.6
        bars.append(
            SparkBar(round(i * slot + 0.5, 2), round(height - tall, 2), round(slot - 1, 2), round(tall, 2), n)
        )
    return bars
