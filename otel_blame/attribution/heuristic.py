"""The offline default: blame from content and structure alone, with no LLM and no network.

The failure signals are named objects in :mod:`otel_blame.attribution.signals`, each with a
docstring saying what it looks for and why. A :class:`~otel_blame.attribution.signals.ScoringContext`
is built once per run; every signal returns its evidence per suspect step; a step's score is the
weighted sum (weights in :class:`Weights`). The agent is the one whose best step plus a small share
of its other suspect steps scores highest; the step is that agent's best step.

Nothing here knows agent names, role strings or positions from any benchmark; agents are only
told apart by who wrote which step. Deterministic; milliseconds for a 100-step run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields

from otel_blame.attribution.base import AttributionError
from otel_blame.attribution.result import Attribution, Candidate, Cost
from otel_blame.attribution.signals import SIGNALS, Evidence, ScoringContext, Signal
from otel_blame.attribution.systemic import describe_failure
from otel_blame.trajectory import Step, Trajectory

METHOD_NAME = "heuristic"
MAX_CANDIDATES = 5


@dataclass(frozen=True)
class Weights:
    """How much each signal counts (one field per signal name), one set for every framework.

    The defaults are what ``otel_blame.training.crossval.fit_weights`` (coordinate search over a fixed
    grid, one sweep, from a neutral start: every signal at 0.3) chose on the whole Who&When dev split
    plus the labelled runs of a fault-injection campaign on the demo app (a third group in the
    objective, so the weights also fit runs unlike Who&When's). The accuracy reported for them is the
    5-fold cross-validated accuracy of that same procedure (weights refit on the training folds only),
    never the in-sample figure. ``early_decision`` is fixed at 1
    (the scale) and ``final_answer`` at 0.3 (the project's planted-fault demo depends on it; a fit on
    Who&When alone sets it to 0); ``agent_support`` is the share of an agent's other suspect steps
    added to its case.
    """

    early_decision: float = 1.0
    hard_error: float = 0.9
    soft_error: float = 0.3
    fabrication: float = 1.6
    hedging: float = 0.3
    final_answer: float = 0.3
    lacking_report: float = 0.0
    approval: float = 0.3
    stuck: float = 0.3
    contradicted_claim: float = 0.3
    plan_gap: float = 0.0
    off_task_report: float = 0.45
    premature_acceptance: float = 0.3
    agent_support: float = 0.1

    def of(self, signal: str) -> float:
        return float(getattr(self, signal))

    def as_dict(self) -> dict[str, float]:
        return {item.name: float(getattr(self, item.name)) for item in fields(self)}


@dataclass
class ScoredStep:
    """One suspect step with its score and the signals behind it (strongest contribution first)."""

    step: Step
    score: float = 0.0
    reasons: list[str] = field(default_factory=list)


@dataclass
class RunEvidence:
    """Every signal's evidence on one run: what weights are applied to (kept so a weight search or an
    ablation re-scores a run without re-reading it)."""

    context: ScoringContext
    by_signal: dict[str, Evidence]


def gather_evidence(
    trajectory: Trajectory, *, with_ground_truth: bool = False, signals: tuple[Signal, ...] = SIGNALS
) -> RunEvidence:
    """Build the scoring context once and let every signal read it."""
    context = ScoringContext.build(trajectory, with_ground_truth=with_ground_truth)
    return RunEvidence(context, {signal.name: signal.evidence(context) for signal in signals})


_REASONS = {signal.name: signal.reason for signal in SIGNALS}
AGENT_SCOPE = frozenset(signal.name for signal in SIGNALS if signal.scope == "agent")


def agent_evidence(evidence: RunEvidence, weights: Weights) -> dict[str, float]:
    """The weighted agent-scope evidence per agent (added to an agent's case, not to a step)."""
    steps = evidence.context.steps
    found: dict[str, float] = {}
    for name in AGENT_SCOPE:
        weight = weights.of(name)
        for index, strength in evidence.by_signal.get(name, {}).items():
            found[steps[index].agent] = found.get(steps[index].agent, 0.0) + weight * strength
    return found


def score_evidence(evidence: RunEvidence, weights: Weights) -> list[ScoredStep]:
    """Suspect steps with their weighted scores, best first (ties: the earlier step)."""
    context = evidence.context
    scored = {index: ScoredStep(context.steps[index]) for index in context.actors}
    contributions: dict[int, list[tuple[float, str]]] = {index: [] for index in context.actors}
    for name, found in evidence.by_signal.items():
        weight = weights.of(name)
        if weight == 0.0 or name in AGENT_SCOPE:
            continue
        for index, strength in found.items():
            if index in scored and strength:
                scored[index].score += weight * strength
                contributions[index].append((weight * strength, name))
    for index, item in scored.items():
        item.reasons = [_REASONS[name] for _, name in sorted(contributions[index], key=lambda c: -c[0])]
    return sorted(scored.values(), key=lambda item: (-item.score, item.step.index))


def choose(
    ranked: list[ScoredStep], weights: Weights, agent_level: dict[str, float] | None = None
) -> ScoredStep:
    """The answer: the agent with the best step plus a share of its other suspect steps' scores (an
    agent that slipped several times is the likelier culprit) plus its agent-scope evidence, then
    that agent's best step."""
    support: dict[str, float] = {}
    best_of: dict[str, ScoredStep] = {}
    for item in ranked:
        agent = item.step.agent
        share = item.score if agent not in best_of else weights.agent_support * item.score
        support[agent] = support.get(agent, 0.0) + share
        best_of.setdefault(agent, item)
    for agent, amount in (agent_level or {}).items():
        if agent in support:
            support[agent] += amount
    chosen = max(support, key=lambda agent: (support[agent], -best_of[agent].step.index))
    return best_of[chosen]


class HeuristicAttribution:
    """Offline, deterministic attribution from general failure signals (see the module docstring)."""

    name = METHOD_NAME

    def __init__(
        self, *, with_ground_truth: bool = False, weights: Weights | None = None, name: str = METHOD_NAME
    ) -> None:
        # the registry builds it as "signals": "heuristic" now names the ranker, and verdicts of both
        # saying "heuristic" showed one file twice in the failures list, with different culprits
        self.name = name
        self.with_ground_truth = with_ground_truth
        self.weights = weights or Weights()

    def attribute(self, trajectory: Trajectory) -> Attribution:
        started = time.perf_counter()
        if not trajectory.steps:
            raise AttributionError("the trajectory has no steps")
        evidence = gather_evidence(trajectory, with_ground_truth=self.with_ground_truth)
        ranked = score_evidence(evidence, self.weights)
        agent_level = agent_evidence(evidence, self.weights)
        best = choose(ranked, self.weights, agent_level)
        ranked = [best] + [item for item in ranked if item is not best]
        total = sum(item.score for item in ranked) or 1.0
        candidates = [
            Candidate(
                step=item.step.index, agent=item.step.agent, score=round(min(1.0, item.score / total), 4)
            )
            for item in ranked[:MAX_CANDIDATES]
        ]
        runner_up = ranked[1].score if len(ranked) > 1 else 0.0
        margin = (best.score - runner_up) / (best.score + 1e-9)
        confidence = min(0.95, max(0.05, margin * 0.8 + 0.1))
        if len(best.reasons) <= 1:  # only the earliness prior: no failure signal points here
            confidence = min(confidence, 0.3)
        confidence = round(confidence, 3)
        reasons = best.reasons[:3] or ["no failure signal singles out a step"]
        if agent_level.get(best.step.agent):
            reasons = [*reasons, *(_REASONS[n] for n in AGENT_SCOPE if evidence.by_signal.get(n))]
        reason = f"Step {best.step.index} by {best.step.agent}: " + "; ".join(reasons) + "."
        attribution = Attribution(
            agent=best.step.agent,
            step=best.step.index,
            confidence=confidence,
            reason=reason,
            method=self.name,
            candidates=candidates,
            cost=Cost(seconds=round(time.perf_counter() - started, 6)),
        )
        # additive: what kind of failure it was (never moves the agent or step)
        return describe_failure(trajectory, attribution, evidence.by_signal, self.weights.as_dict())

    def score_steps(self, trajectory: Trajectory) -> list[ScoredStep]:
        """Every suspect step with its score and the signals behind it, best first."""
        return score_evidence(
            gather_evidence(trajectory, with_ground_truth=self.with_ground_truth), self.weights
        )
