"""Reading a run into what the ranker scores: every candidate step's features.

Per step it reads three kinds of evidence, all relative to the run itself (no agent names, role
strings or absolute step numbers):

- structure: where the step sits among the suspects (as a share of the run), what kind of step it is
  (message, tool result, code output), whether it is its agent's first turn, how much of the run its
  agent wrote, whether it is the coordinator's, whether it is an error, how much of it is copied,
  whether its agent only gives the task (:mod:`otel_blame.attribution.roles`);
- the failure signals of :mod:`otel_blame.attribution.signals` (unweighted evidence);
- the causal reading of :mod:`otel_blame.attribution.causal`: what first appears at the step, whether
  it is on the failure's path, what it dropped or overrode, whether a result follows from its call,
  whether a dependency failed there.

Reading is the costly part of a verdict and knows nothing of the fitted weights
(:mod:`otel_blame.attribution.ranker` scores the rows), so a run read once can be scored by any model.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_blame.attribution.causal import read_causally
from otel_blame.attribution.causal.reading import CAUSAL_FEATURES, CausalReading
from otel_blame.attribution.roles import Roles, read_roles
from otel_blame.attribution.signals import SIGNALS, ScoringContext, Signal
from otel_blame.trajectory import StepKind, Trajectory

STRUCTURE_FEATURES: tuple[str, ...] = (
    "relative_position",
    "first_candidate",
    "last_candidate",
    "last_message",
    "kind_tool",
    "kind_code",
    "task_statement",
    "agent_first_turn",
    "agent_share",
    "coordinator",
    "is_error",
    "speaker_changed",
    "actor",
    "agent_turn",
    "agent_arrival",
    "copied",
    "task_giver",
    "delivers_task",
)
# the failure signals the ranker reads: the ones that carried weight when all were fitted, and cheap
# enough to keep a verdict within milliseconds (hedging, approval, contradicted claims, off-task
# reports, premature acceptance and the error signals cost more than they added; the causal reading
# covers errors). Not the early-decision prior: it is position alone, and a fitted position prior is
# what made the verdict a guess on runs whose failures sit elsewhere than the training data's
RANKER_SIGNALS: tuple[Signal, ...] = tuple(
    signal
    for signal in SIGNALS
    if signal.name in ("fabrication", "final_answer", "lacking_report", "stuck", "plan_gap")
)
SIGNAL_FEATURES: tuple[str, ...] = tuple(f"signal_{signal.name}" for signal in RANKER_SIGNALS)
# The decisive step is the *earliest* step whose content its inputs do not support: for each kind of
# such evidence, whether a step is the first in its run to show it (later ones may only inherit it)
EARLIEST_OF: tuple[str, ...] = (
    "novel_value",
    "novel_call_value",
    "dropped_input",
    "dropped_task",
    "override",
    "caused_failing_result",
    "result_contradicts_call",
    "input_found_lacking",
    "signal_fabrication",
    "answer_origin",
    "testified_wrong",
)
EARLIEST_FEATURES: tuple[str, ...] = tuple(f"earliest_{name}" for name in EARLIEST_OF)
FEATURES: tuple[str, ...] = (*STRUCTURE_FEATURES, *SIGNAL_FEATURES, *CAUSAL_FEATURES, *EARLIEST_FEATURES)


@dataclass
class StepRows:
    """One run's candidate steps and their feature values (what the model scores)."""

    trajectory: Trajectory
    candidates: list[int]
    rows: list[dict[str, float]]
    reading: CausalReading
    roles: Roles
    coordinator: str | None = None  # the agent that directs the others, if any
    whole_lowers: list[str | None] | None = None  # each step's whole text lower-cased, where at hand


def step_rows(trajectory: Trajectory, *, cross_run: dict[int, float] | None = None) -> StepRows:
    """Read a run once: every candidate step's features (see the module docstring)."""
    context = ScoringContext.build(trajectory)
    whole_lowers = context.whole_lowers()  # (lower-cased once, for the reading and the verdict)
    reading = read_causally(trajectory, whole_lowers=whole_lowers)
    graph = reading.graph
    roles = read_roles(trajectory, graph.texts)
    by_signal = {signal.name: signal.evidence(context) for signal in RANKER_SIGNALS}
    steps = trajectory.steps
    candidates = graph.candidates
    count = len(candidates)
    last_message = max((i for i in candidates if steps[i].kind == StepKind.MESSAGE), default=None)
    authored: dict[str, int] = {}
    for index in candidates:
        if steps[index].kind == StepKind.MESSAGE:
            authored[steps[index].agent] = authored.get(steps[index].agent, 0) + 1
    messages = sum(authored.values()) or 1
    # each step's signal and causal evidence, in the order the features are listed (read from each
    # feature's few steps, not by asking every feature about every step)
    evidence: dict[int, list[tuple[str, float]]] = {}
    for name, found in by_signal.items():
        for index, value in found.items():
            if value:
                evidence.setdefault(index, []).append((f"signal_{name}", min(2.0, value)))
    for name, found in reading.features.items():
        for index, value in found.items():
            evidence.setdefault(index, []).append((name, value))
    seen: set[str] = set()
    turns: dict[str, int] = {}
    arrival: dict[str, int] = {}
    rows = []
    for position, index in enumerate(candidates):
        step = steps[index]
        row: dict[str, float] = {
            "relative_position": position / (count - 1) if count > 1 else 0.0,
            "first_candidate": float(position == 0),
            "last_candidate": float(position == count - 1),
            "last_message": float(index == last_message),
            "kind_tool": float(step.kind == StepKind.TOOL),
            "kind_code": float(step.kind == StepKind.CODE_EXECUTION),
            "task_statement": float(index == graph.task_step),
            "agent_first_turn": float(step.kind == StepKind.MESSAGE and step.agent not in seen),
            "agent_share": authored.get(step.agent, 0) / messages,
            "coordinator": float(context.coordinator is not None and step.agent == context.coordinator),
            "is_error": float(step.is_error),
            "speaker_changed": float(index > 0 and steps[index - 1].agent != step.agent),
            "actor": float(index in context.actor_set),
            "copied": roles.copied[index],
            "task_giver": float(step.agent in roles.task_givers),
            "delivers_task": float(index in roles.delivers_task),
        }
        if step.kind == StepKind.MESSAGE:
            seen.add(step.agent)
            arrival.setdefault(step.agent, len(arrival))
            turns[step.agent] = turns.get(step.agent, 0) + 1
            # the how-many-th turn of its agent, and the how-many-th agent to speak (as 1, 1/2, 1/3 ...)
            row["agent_turn"] = 1.0 / turns[step.agent]
            row["agent_arrival"] = 1.0 / (1 + arrival[step.agent])
        row.update(evidence.get(index, ()))
        if cross_run and index in cross_run:
            row["cross_run"] = cross_run[index]
        rows.append(row)
    for name in EARLIEST_OF:
        first = next((row for row in rows if row.get(name)), None)
        if first is not None:
            first[f"earliest_{name}"] = 1.0
    return StepRows(trajectory, candidates, rows, reading, roles, context.coordinator, whole_lowers)
