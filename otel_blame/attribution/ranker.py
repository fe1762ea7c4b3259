"""The offline default: a small trained ranker over every step's evidence, then over every agent.

1. **Steps.** Every candidate step's evidence (:mod:`otel_blame.attribution.step_rows`: structure,
   failure signals, the causal reading) gets a linear score; one softmax over the run's steps ranks
   failing dependencies and agent steps together. When the failure's path starts at a dependency the
   run never got past, the verdict is ``category=dependency`` naming it, at the step whose call failed.
2. **Agents.** Each candidate agent (task-givers are not, unless shown wrong) gets a linear score
   over its share of that ranking and its part in the run (:mod:`otel_blame.attribution.agents`);
   the most probable agent's best step is the decisive step (never the task as given).
3. **Odds.** A logistic model of how often verdicts like this one were right on systems the model
   never saw says whether the verdict is decided (``blame.decided``) and is its ``confidence``.
   A step that states what checks false (:mod:`otel_blame.attribution.claims`: a wrong unit
   conversion, a rate the task gives set otherwise) needs no odds: the earliest is the verdict, decided.
4. **Failure mode.** The MAST mode the blamed agent's words and part support, where one stands out
   (:mod:`otel_blame.attribution.modes`).

Weights are fitted offline (``bench/train_ranker.py``, :mod:`otel_blame.training.ranker_fit`) and
shipped as small JSON files read with the standard library only. Deterministic.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path

from otel_blame.attribution.agents import AgentRows, agent_rows
from otel_blame.attribution.base import AttributionError
from otel_blame.attribution.claims import FalseClaim, false_claims
from otel_blame.attribution.modes import ModeModel
from otel_blame.attribution.result import Attribution, Candidate, Cost
from otel_blame.attribution.signals import SIGNALS
from otel_blame.attribution.step_rows import (
    EARLIEST_OF,
    STRUCTURE_FEATURES,
    StepRows,
    step_rows,
)
from otel_blame.attribution.systemic import FAILURE_MODES, failure_mode, specification_evidence
from otel_blame.trajectory import StepKind, Trajectory

METHOD_NAME = "ranker"
MODEL_FILE = "ranker_model.json"
MAX_CANDIDATES = 5
# the confidence of a verdict a false claim decides, where its odds are lower: the first step stating
# a claim that checks false named a labelled-faulty agent in 28 of 28 AEGIS runs (held out, 2026-12-02);
# 0.88 is that share's 95 % Wilson lower bound (docs/methods.md, "Claims that check false")
PROVEN_CONFIDENCE = 0.88

_STRUCTURE = frozenset(STRUCTURE_FEATURES)
MODE_BY_NUMBER: dict[str, str] = {number: name for name, (number, _, _) in FAILURE_MODES.items()}

# what a person reads for the features that point at a step (the strongest contributions first)
REASONS: dict[str, str] = {
    "novel": "a value first appears here",
    "novel_value": "a value nothing before it gave first appears here",
    "novel_identifier": "it states an identifier nothing before it gave",
    "novel_call_value": "it called a tool with an argument nothing before it gave",
    "answer_origin": "the final answer's value first appears here",
    "answer_unsupported": "it states the answer with values that follow from nothing at hand",
    "input_found_lacking": "the agent it handed over to said what it got was lacking",
    "stop_in_result": "a stop word inside a tool's output ended the run",
    "first_unsupported": "it is the earliest step on the final answer's path whose content its inputs do "
    "not support",
    "dropped_task": "it stopped carrying a requirement of the task",
    "dropped_input": "it did not use a value it was given",
    "override": "it overrode what it was given",
    "unanswered_stop": "it stopped the run before any answer, with work still to do",
    "stop_mid_run": "it stopped the run in the middle of its work",
    "dependency": "the call failed in the tool or service, not in the agent",
    "result_error": "its result failed",
    "caused_failing_result": "its code or call produced an error",
    "result_contradicts_call": "the result does not follow from the call that produced it",
    "novel_result": "a result that brought in new values",
    "task_statement": "the task as given",
    "testified_wrong": "a later step says it went wrong",
    "first_candidate": "the first step of the run",
    "last_message": "the run's last message",
    **{f"signal_{signal.name}": signal.reason for signal in SIGNALS},
}
# the first step of a run to show a kind of evidence reads as that evidence (said once)
REASONS.update({f"earliest_{name}": REASONS[name] for name in EARLIEST_OF if name in REASONS})


@dataclass(frozen=True)
class LinearScorer:
    """A fitted linear score over named features (standardised by ``mean`` and ``scale``): the agent
    stage's score of an agent, or the log-odds that a verdict is right."""

    features: tuple[str, ...]
    weights: tuple[float, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    bias: float = 0.0

    def score(self, row: dict[str, float]) -> float:
        total = self.bias
        for name, weight, mean, scale in zip(self.features, self.weights, self.mean, self.scale, strict=True):
            total += weight * (row.get(name, 0.0) - mean) / scale
        return total

    def probability(self, row: dict[str, float]) -> float:
        """The logistic of the score (for a model of the odds)."""
        score = self.score(row)
        return 1.0 / (1.0 + math.exp(-score)) if score > -500 else 0.0

    def contributions(self, row: dict[str, float]) -> list[tuple[float, str]]:
        parts = zip(self.features, self.weights, self.mean, self.scale, strict=True)
        return [(weight * (row.get(name, 0.0) - mean) / scale, name) for name, weight, mean, scale in parts]

    @classmethod
    def from_dict(cls, data: dict) -> LinearScorer:
        return cls(
            features=tuple(data["features"]),
            weights=tuple(float(v) for v in data["weights"]),
            mean=tuple(float(v) for v in data["mean"]),
            scale=tuple(float(v) for v in data["scale"]),
            bias=float(data.get("bias", 0.0)),
        )

    def to_dict(self) -> dict:
        return {
            "features": list(self.features),
            "weights": [round(v, 6) for v in self.weights],
            "mean": [round(v, 6) for v in self.mean],
            "scale": [round(v, 6) for v in self.scale],
            "bias": round(self.bias, 6),
        }


@dataclass(frozen=True)
class RankerModel:
    """The fitted weights of the step ranking (on standardised features), with their centring and
    scale; the agent stage's (``agent``) and the model of a verdict's odds of being right
    (``correctness``), where fitted."""

    features: tuple[str, ...]
    weights: tuple[float, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    agent_rule: str = "step"  # "step": the best step's agent; "sum": the agent with the most probability
    trained_on: str = ""
    # a verdict is decided when its odds of being right (``correctness``; without one, its agent's
    # support) reach this (chosen out of sample)
    decided_threshold: float = 0.5
    agent: LinearScorer | None = None
    correctness: LinearScorer | None = None
    modes: ModeModel | None = None  # the failure-mode model (shipped in a file of its own)

    @classmethod
    def from_dict(cls, data: dict) -> RankerModel:
        return cls(
            features=tuple(data["features"]),
            weights=tuple(float(v) for v in data["weights"]),
            mean=tuple(float(v) for v in data["mean"]),
            scale=tuple(float(v) for v in data["scale"]),
            agent_rule=str(data.get("agent_rule", "step")),
            trained_on=str(data.get("trained_on", "")),
            decided_threshold=float(data.get("decided_threshold", 0.5)),
            agent=LinearScorer.from_dict(data["agent"]) if data.get("agent") else None,
            correctness=LinearScorer.from_dict(data["correctness"]) if data.get("correctness") else None,
        )

    def to_dict(self) -> dict:
        stages = {
            name: stage.to_dict()
            for name, stage in (("agent", self.agent), ("correctness", self.correctness))
            if stage is not None
        }
        return {
            "features": list(self.features),
            "weights": [round(v, 6) for v in self.weights],
            "mean": [round(v, 6) for v in self.mean],
            "scale": [round(v, 6) for v in self.scale],
            "agent_rule": self.agent_rule,
            "trained_on": self.trained_on,
            "decided_threshold": self.decided_threshold,
            **stages,
        }

    @classmethod
    def load(cls, path: Path | None = None) -> RankerModel:
        """The packaged model (with the packaged failure-mode model), or the one at ``path``."""
        if path is None:
            return _packaged_model()
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    @cached_property
    def _absent(self) -> tuple[dict[str, tuple[int, ...]], list[float]]:
        """Where each feature is in the model, and every feature's share when the row lacks it (its
        value 0.0: the same float as the share computed for 0.0)."""
        positions: dict[str, tuple[int, ...]] = {}
        for position, name in enumerate(self.features):
            positions[name] = (*positions.get(name, ()), position)
        absent = [
            weight * (0.0 - mean) / scale
            for weight, mean, scale in zip(self.weights, self.mean, self.scale, strict=True)
        ]
        if len(absent) != len(self.features):
            raise ValueError("the model's features and weights differ in number")
        return positions, absent

    def _parts(self, row: dict[str, float]) -> list[float]:
        """Each feature's share of the score, in the model's order: the shares of the features the row
        lacks are constants, only its own few are computed (a row holds a handful of the features)."""
        positions, absent = self._absent
        parts = absent.copy()
        weights, means, scales = self.weights, self.mean, self.scale
        for name, value in row.items():
            for position in positions.get(name, ()):
                parts[position] = weights[position] * (value - means[position]) / scales[position]
        return parts

    def contributions(self, row: dict[str, float]) -> list[tuple[float, str]]:
        """Each present feature's share of the score (standardised value times weight)."""
        return list(zip(self._parts(row), self.features, strict=True))

    def score(self, row: dict[str, float]) -> float:
        # (the shares summed in the model's order, as sum() adds them: the same float as before)
        return sum(self._parts(row))


@lru_cache(maxsize=1)
def _packaged_model() -> RankerModel:
    text = resources.files("otel_blame.attribution").joinpath(MODEL_FILE).read_text(encoding="utf-8")
    return replace(RankerModel.from_dict(json.loads(text)), modes=ModeModel.load())


def rank(rows: StepRows, model: RankerModel) -> list[tuple[float, int]]:
    """(probability, step index) for every candidate, best first (ties: the earlier step)."""
    scores = [model.score(row) for row in rows.rows]
    top = max(scores)
    exps = [math.exp(score - top) for score in scores]
    total = sum(exps)
    ranked = [(value / total, index) for value, index in zip(exps, rows.candidates, strict=True)]
    return sorted(ranked, key=lambda item: (-item[0], item[1]))


def _choosable(rows: StepRows, index: int) -> bool:
    """Whether a verdict may name this step: not the task as given (the user's question is never the
    decisive step of an agent's failure)."""
    return index != rows.reading.graph.task_step


def choose(rows: StepRows, ranked: list[tuple[float, int]], agent_rule: str) -> int:
    """The decisive step: the best step, or (``agent_rule`` "sum") the best step of the agent with the
    most probability over all its steps (never the task as given, unless nothing else is a candidate)."""
    usable = [item for item in ranked if _choosable(rows, item[1])] or ranked
    if agent_rule != "sum":
        return usable[0][1]
    steps = rows.trajectory.steps
    mass: dict[str, float] = {}
    for probability, index in usable:
        mass[steps[index].agent] = mass.get(steps[index].agent, 0.0) + probability
    agent = max(mass, key=lambda name: (mass[name], -next(i for _, i in usable if steps[i].agent == name)))
    return next(index for _, index in usable if steps[index].agent == agent)


def confidence_of(ranked: list[tuple[float, int]], chosen: int) -> float:
    """How far the chosen step stands out: its probability, and its lead over the next best."""
    probability = next(p for p, index in ranked if index == chosen)
    runner_up = next((p for p, index in ranked if index != chosen), 0.0)
    return round(min(0.95, max(0.05, probability * 0.7 + (probability - runner_up) * 0.3)), 3)


@dataclass
class Judgement:
    """What the ranker concluded: the decisive step, every candidate agent's probability (best first;
    empty without an agent stage), and the odds that the named agent is the right one."""

    step: int
    agents: list[tuple[float, str]]
    right: float
    support: dict[str, float]  # what the odds were read from (the correctness model's features)
    table: AgentRows | None = None  # the agent stage's reading of every candidate agent
    proof: FalseClaim | None = None  # the claim that checks false at the chosen step, if one decided it

    def decided(self, threshold: float) -> bool:
        """Whether the verdict is decided: its odds reach ``threshold``, or its step is shown wrong."""
        return self.proof is not None or self.right >= threshold

    def role_of(self, agent: str) -> dict[str, float]:
        """The agent stage's features of ``agent`` (empty without an agent stage)."""
        if self.table is None or agent not in self.table.agents:
            return {}
        return self.table.rows[self.table.agents.index(agent)]


def agent_probabilities(table: AgentRows, scorer: LinearScorer) -> list[tuple[float, str]]:
    """(probability, agent) for every candidate agent, best first (ties: the earlier agent)."""
    scores = [scorer.score(row) for row in table.rows]
    top = max(scores)
    exps = [math.exp(score - top) for score in scores]
    total = sum(exps)
    ranked = [(value / total, agent) for value, agent in zip(exps, table.agents, strict=True)]
    order = {agent: position for position, agent in enumerate(table.agents)}
    return sorted(ranked, key=lambda item: (-item[0], order[item[1]]))


def proven_wrong(rows: StepRows) -> FalseClaim | None:
    """The earliest claim in the run that checks false, where an agent made it: a candidate step's own
    words, not a tool's output (a page that says it is a dependency's claim) nor the task as given."""
    claims = false_claims(rows.trajectory, rows.reading.graph.task_step)
    if not claims:
        return None
    first = claims[min(claims)]
    step = rows.trajectory.steps[first.step]
    if first.step not in rows.candidates or step.kind == StepKind.TOOL or not _choosable(rows, first.step):
        return None
    return first


def judge(rows: StepRows, ranked: list[tuple[float, int]], model: RankerModel) -> Judgement:
    """The decisive step and the odds it names the right agent. A dependency the run never got past
    starts the failure's path: it is the verdict, whatever the ranking of the agent steps it made
    victims of. Else the earliest step that states a claim checking false (:func:`proven_wrong`).
    Else, with an agent stage, the most probable agent's best step; without one, the step ranking
    decides (``agent_rule``)."""
    steps = rows.trajectory.steps
    root = rows.reading.root_dependency()
    if root is not None and root not in rows.candidates:
        root = None
    proof = proven_wrong(rows) if root is None else None  # (a failing dependency comes first)
    agents: list[tuple[float, str]] = []
    table = None
    if model.agent is not None:
        table = agent_rows(rows, ranked)
        agents = agent_probabilities(table, model.agent)
    if root is not None:
        step = root
    elif proof is not None:
        step = proof.step
    elif table is not None:
        best = agents[0][1]
        step = next((index for index in table.steps[best] if _choosable(rows, index)), table.steps[best][0])
    else:
        step = choose(rows, ranked, model.agent_rule)
    support = support_features(rows, ranked, agents, step, dependency=step == root, model=model)
    if model.correctness is not None:
        right = model.correctness.probability(support)
    else:
        right = support_of(rows, ranked, steps[step].agent)
    return Judgement(step=step, agents=agents, right=right, support=support, table=table, proof=proof)


def decide(rows: StepRows, ranked: list[tuple[float, int]], model: RankerModel) -> int:
    """The decisive step (see :func:`judge`)."""
    return judge(rows, ranked, model).step


# the kinds of evidence whose presence at the chosen step the correctness model reads, one indicator
# each: how often a verdict resting on a failing dependency, a result that contradicts its call, a
# premature stop or a value first appearing is right differs by kind, more than by its weight in the
# ranking (fitted on every real data set and the zoo, docs/methods.md)
EVIDENCE_KINDS: tuple[str, ...] = (
    "dependency",
    "result_contradicts_call",
    "caused_failing_result",
    "unanswered_stop",
    "stop_in_result",
    "override",
    "answer_origin",
    "answer_unsupported",
    "novel_value",
    "first_unsupported",
    "testified_wrong",
    "dropped_task",
    "dropped_input",
    "input_found_lacking",
    "novel_identifier",
    "novel_call_value",
)
SUPPORT_FEATURES: tuple[str, ...] = (
    "evidence",
    "structure",
    "agent_p",
    "agent_margin",
    "agents",
    "step_p",
    "step_margin",
    "mass",
    "agree",
    "dependency",
    "error",
    "testified",
    "steps",
    "givers",
    *(f"shows_{kind}" for kind in EVIDENCE_KINDS),
)


def support_features(
    rows: StepRows,
    ranked: list[tuple[float, int]],
    agents: list[tuple[float, str]],
    step: int,
    *,
    dependency: bool,
    model: RankerModel | None = None,
) -> dict[str, float]:
    """What a verdict's odds of being right are read from: how far its agent and step stand out in
    the two rankings, how many agents it was chosen among, and what kind of evidence it rests on."""
    steps = rows.trajectory.steps
    agent = steps[step].agent
    probability = {index: p for p, index in ranked}
    step_p = probability.get(step, 0.0)
    runner_up = next((p for p, index in ranked if index != step), 0.0)
    mass = support_of(rows, ranked, agent)
    row = rows.rows[rows.candidates.index(step)] if step in rows.candidates else {}
    evidence = structure = 0.0
    if row and model is not None:
        for part, name in model.contributions(row):
            if name in _STRUCTURE:
                structure += part
            else:
                evidence += part
    features: dict[str, float] = {
        "evidence": evidence,
        "structure": structure,
        "step_p": step_p,
        "step_margin": step_p - runner_up,
        "mass": mass,
        "agree": float(steps[ranked[0][1]].agent == agent) if ranked else 0.0,
        "dependency": float(dependency),
        "error": float(any(row.get(name) for name in ("is_error", "caused_failing_result", "dependency"))),
        "testified": float(bool(row.get("testified_wrong"))),
        "steps": math.log1p(len(steps)),
        "givers": float(bool(rows.roles.task_givers)),
    }
    features |= {f"shows_{kind}": float(bool(row.get(kind))) for kind in EVIDENCE_KINDS}
    if agents:
        first = next((p for p, name in agents if name == agent), 0.0)
        second = next((p for p, name in agents if name != agent), 0.0)
        features |= {"agent_p": first, "agent_margin": first - second, "agents": 1.0 / len(agents)}
    else:
        speakers = {steps[index].agent for index in rows.candidates}
        features |= {"agent_p": mass, "agent_margin": 0.0, "agents": 1.0 / max(1, len(speakers))}
    return features


def support_of(rows: StepRows, ranked: list[tuple[float, int]], agent: str) -> float:
    """How much of the evidence says this agent, whichever of its steps it was: the share of the
    ranking's probability on its steps."""
    steps = rows.trajectory.steps
    return sum(probability for probability, index in ranked if steps[index].agent == agent)


class RankerAttribution:
    """Offline, deterministic attribution by the trained ranker (see the module docstring)."""

    name = METHOD_NAME

    def __init__(
        self, *, model: RankerModel | None = None, with_ground_truth: bool = False, name: str = METHOD_NAME
    ) -> None:
        self.name = name  # "heuristic" when built under the offline default's older name
        self.model = model or RankerModel.load()
        self.with_ground_truth = with_ground_truth  # the ranker never reads the expected answer

    def attribute(self, trajectory: Trajectory) -> Attribution:
        started = time.perf_counter()
        if not trajectory.steps:
            raise AttributionError("the trajectory has no steps")
        rows = step_rows(trajectory)
        ranked = rank(rows, self.model)
        judgement = judge(rows, ranked, self.model)
        return verdict(rows, ranked, judgement, self.model, started=started, method=self.name)


def verdict(
    rows: StepRows,
    ranked: list[tuple[float, int]],
    judgement: Judgement,
    model: RankerModel,
    *,
    started: float,
    method: str,
) -> Attribution:
    """One coherent statement for the chosen step: who, where, why, and what kind of failure."""
    trajectory = rows.trajectory
    chosen = judgement.step
    step = trajectory.steps[chosen]
    row = rows.rows[rows.candidates.index(chosen)]
    ordered = [item for item in ranked if item[1] == chosen] + [item for item in ranked if item[1] != chosen]
    candidates = [
        Candidate(step=index, agent=trajectory.steps[index].agent, score=round(min(1.0, p), 4))
        for p, index in ordered[:MAX_CANDIDATES]
    ]
    if model.correctness is not None:
        confidence = round(min(0.99, max(0.01, judgement.right)), 3)
    else:
        confidence = confidence_of(ranked, chosen)
    if judgement.proof is not None:
        confidence = max(confidence, PROVEN_CONFIDENCE)
    dependency = rows.reading.dependency_at.get(chosen)
    name: str | None = None
    detail = ""
    if dependency is not None:
        name, detail = dependency.name, dependency.detail
    elif step.kind != StepKind.MESSAGE and row.get("dependency"):
        name, detail = step.tool_name or step.agent, "arithmetic code that cannot fail failed"
    elif step.kind != StepKind.MESSAGE and row.get("result_contradicts_call"):
        name, detail = step.tool_name or step.agent, "its output does not follow from the call"
    update: dict[str, object] = {}
    if name is not None:
        said = f" ({detail})" if detail else ""
        reason = (
            f"Step {chosen}: {name} failed{said} on the call {step.agent} relied on: a dependency, "
            "not the agent's own output."
        )
        update = {"category": "dependency", "dependency": name}
    else:
        parts = list(
            dict.fromkeys(
                REASONS[feature]
                for part, feature in sorted(model.contributions(row), key=lambda item: -item[0])
                if part > 0.05 and row.get(feature) and feature in REASONS
            )
        )[:3]
        if judgement.proof is not None:
            claim = judgement.proof
            parts = [f'it states "{claim.stated}", which checks false ({claim.why})', *parts[:2]]
        parts = parts or ["its evidence outweighs the other steps'"]
        reason = f"Step {chosen} by {step.agent}: " + "; ".join(parts) + "."
        flagged = specification_evidence(trajectory, rows.whole_lowers)
        if flagged is not None:
            update["category"] = "specification"
            reason += (
                f" Step {flagged} says the task or its instructions were wrong: a specification problem."
            )
        else:
            update["category"] = "agent"
    attribution = Attribution(
        agent=step.agent,
        step=chosen,
        confidence=confidence,
        decided=judgement.decided(model.decided_threshold),
        reason=reason,
        method=method,
        candidates=candidates,
        cost=Cost(seconds=round(time.perf_counter() - started, 6)),
        **update,  # type: ignore[arg-type]
    )
    if attribution.category != "dependency":
        mode = failure_mode(trajectory, attribution)
        if mode is None and judgement.proof is not None and judgement.proof.kind == "task_value":
            mode = "disobey_task_specification"  # it set a value the task gives otherwise
        mode = mode or _modelled_mode(model.modes, trajectory, step.agent, judgement.role_of(step.agent))
        if mode is not None:
            attribution = attribution.model_copy(update={"failure_mode": mode})
    return attribution


def _modelled_mode(
    modes: ModeModel | None, trajectory: Trajectory, agent: str, role: dict[str, float]
) -> str | None:
    """The failure mode the mode model reads in the blamed agent's words and part, as
    ``blame.failure_mode`` names it (None without a model, or where no mode stands out)."""
    if modes is None:
        return None
    number = modes.predict(trajectory, agent, role)
    return MODE_BY_NUMBER.get(number) if number else None
