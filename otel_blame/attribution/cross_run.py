"""Cross-run (spectrum) evidence: how suspicious a step is, given passing and failing runs of its workflow.

Pure: the processor keeps the counts (:mod:`otel_blame.processor.cross_run`) and passes them in as a
:class:`CrossRunEvidence`; nothing here reads a database.

Spectrum-based fault localisation, with runs as tests and these as the program's components:

- ``agent:A`` -- agent A spoke in the run;
- ``tool:A/T`` -- A's step called tool T;
- ``kind:A/K`` -- A produced a step of kind K (``message``, ``tool``, ``code_execution``; ``:error``
  appended when the step failed).

A component's suspiciousness is the Ochiai coefficient ``ef / sqrt(F * (ef + ep))`` (``ef``/``ep``:
failing/passing runs the component appeared in, ``F``: all failing runs), and a step's is the highest
of its components'. Why Ochiai: see ``docs/methods.md#cross-run-evidence``.

:func:`combine` re-ranks the method's own candidate steps of the trace at hand: each candidate's
score relative to the best, plus ``weight * F / (F + prior_runs)`` times how much its suspiciousness
is above the candidates' mean. So the blamed agent and step are always of this trace; evidence from
few runs moves little; a spectrum that tells the candidates apart in no way (every agent in every
run) changes nothing.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from otel_blame.attribution.result import Attribution, Candidate
from otel_blame.trajectory import Step, Trajectory


class EntityCounts(BaseModel):
    """Of the runs observed: in how many failing and passing ones a component appeared, and how many
    times it was at the blamed step (agent: was the blamed agent)."""

    model_config = ConfigDict(extra="forbid")

    failing: int = Field(default=0, ge=0)
    passing: int = Field(default=0, ge=0)
    blamed: int = Field(default=0, ge=0)


class CrossRunEvidence(BaseModel):
    """The counts of one workflow, for the components of the trace at hand."""

    model_config = ConfigDict(extra="forbid")

    workflow: str
    failing_runs: int = Field(default=0, ge=0)
    passing_runs: int = Field(default=0, ge=0)
    entities: dict[str, EntityCounts] = Field(default_factory=dict, description="component -> counts")


def agent_entity(agent: str) -> str:
    return f"agent:{agent}"


def step_entities(step: Step) -> list[str]:
    """The components a step exercises (see the module docstring)."""
    kind = step.kind.value + (":error" if step.is_error else "")
    out = [agent_entity(step.agent), f"kind:{step.agent}/{kind}"]
    if step.tool_name:
        out.append(f"tool:{step.agent}/{step.tool_name}")
    return out


def run_entities(trajectory: Trajectory) -> set[str]:
    """Every component the run exercised (its spectrum)."""
    return {entity for step in trajectory.steps for entity in step_entities(step)}


def ochiai(failed_with: int, passed_with: int, failing_runs: int) -> float:
    """Ochiai: ef / sqrt(F * (ef + ep)); 0 when it never appeared in a failing run."""
    if failed_with <= 0 or failing_runs <= 0:
        return 0.0
    return min(1.0, failed_with / math.sqrt(failing_runs * (failed_with + passed_with)))


def step_suspiciousness(evidence: CrossRunEvidence, step: Step) -> float:
    """The highest Ochiai of the step's components."""
    best = 0.0
    for entity in step_entities(step):
        counts = evidence.entities.get(entity)
        if counts is not None:
            best = max(best, ochiai(counts.failing, counts.passing, evidence.failing_runs))
    return best


def combine(
    trajectory: Trajectory,
    attribution: Attribution,
    evidence: CrossRunEvidence | None,
    *,
    weight: float = 0.5,
    prior_runs: int = 10,
    min_failing_runs: int = 5,
) -> Attribution:
    """The attribution with ``cross_run_suspiciousness`` set and, where the evidence outweighs the
    trace's own margin, another of the trace's candidate steps chosen (the reason says so).

    Fewer than ``min_failing_runs`` failing runs observed: returned unchanged."""
    if evidence is None or evidence.failing_runs < min_failing_runs or not trajectory.steps:
        return attribution
    steps = trajectory.steps
    candidates = [c for c in attribution.candidates if 0 <= c.step < len(steps)]
    if not any(c.step == attribution.step for c in candidates) and 0 <= attribution.step < len(steps):
        candidates.insert(
            0, Candidate(step=attribution.step, agent=attribution.agent, score=attribution.confidence)
        )
    if not candidates:
        return attribution
    suspicion = {c.step: step_suspiciousness(evidence, steps[c.step]) for c in candidates}
    top = max(c.score for c in candidates) or 1.0
    mean = sum(suspicion.values()) / len(suspicion)
    strength = weight * evidence.failing_runs / (evidence.failing_runs + prior_runs)
    combined = {c.step: c.score / top + strength * (suspicion[c.step] - mean) for c in candidates}
    original = attribution.step
    # ties keep the method's choice, then the earlier step
    chosen = max(combined, key=lambda step: (combined[step], step == original, -step))
    ranked = sorted(candidates, key=lambda c: (-combined[c.step], c.step))
    total = sum(max(0.0, combined[c.step]) for c in ranked) or 1.0
    new_candidates = [
        Candidate(step=c.step, agent=c.agent, score=round(min(1.0, max(0.0, combined[c.step]) / total), 4))
        for c in ranked
    ]
    value = round(suspicion.get(chosen, 0.0), 6)
    if chosen == original:
        return attribution.model_copy(update={"cross_run_suspiciousness": value})
    step = steps[chosen]
    runs = f"{evidence.failing_runs} failing and {evidence.passing_runs} passing runs of this workflow"
    reason = (
        f"Step {chosen} by {step.agent}: cross-run evidence changed the verdict (suspiciousness "
        f"{suspicion[chosen]:.2f} against {suspicion.get(original, 0.0):.2f} for step {original} by "
        f"{attribution.agent}, over {runs}). The trace alone said: {attribution.reason}"
    )
    return attribution.model_copy(
        update={
            "agent": step.agent,
            "step": chosen,
            "reason": reason,
            "confidence": round(min(attribution.confidence, 0.5), 3),
            "candidates": new_candidates,
            "cross_run_suspiciousness": value,
            "category": None,  # of the old step: the caller describes the new one
            "dependency": None,
            "failure_mode": None,
        }
    )
