"""The Who&When paper's LLM methods, and a counterfactual method of our own.

- ``all_at_once``: the whole log in one request; agent and step in one answer (1 call, or one per
  chunk when the log exceeds the context budget).
- ``step_by_step``: walks the log, asking of each step "is this the decisive error?", and stops
  at the first yes (at most N calls).
- ``binary_search``: halves the candidate range each call (at most ceil(log2 N) + 1 calls).
- ``hybrid``: all-at-once for the agent, then step-by-step over that agent's steps only.
- ``counterfactual`` (ours): the log restructured by agent turn with explicit step indices; the
  LLM ranks up to three suspects, the offline ranker adds its top two, and each suspect, earliest
  first, gets a counterfactual check ("had this step been right, would the run have succeeded, and
  was the failure already inevitable before it?"). The earliest suspect that passes wins.
- ``guided_check`` (ours): the offline ranker (:mod:`otel_blame.attribution.ranker`, the causal
  reading) proposes its best candidate steps; the LLM checks them, most likely first, each against
  the task, the message it answered and the steps that depend on it, in a view bounded so the whole
  check costs no more input than all-at-once. The first candidate the LLM confirms wins; if none is
  confirmed, the ranker's answer stands (low confidence).
- ``self_consistency`` (ours): all-at-once sampled five times at temperature 0.7; the majority
  agent, then that agent's most voted step, wins; the vote share is the confidence (5 calls).

All take ``with_ground_truth``: the expected answer is then shown to the LLM. Cost (calls, tokens,
seconds) is measured per trace and returned in ``Attribution.cost``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from otel_blame.attribution.base import AttributionError
from otel_blame.attribution.llm_client import LLMClient, LLMSession, Message, estimate_tokens
from otel_blame.attribution.prompts import (
    PROMPT_OVERHEAD_TOKENS,
    SYSTEM_PROMPT,
    latest_that_fit,
    log_nonce,
    render_step,
    render_steps,
    render_task,
    split_to_fit,
    step_tokens,
)
from otel_blame.attribution.ranker import RankerAttribution
from otel_blame.attribution.result import Attribution, Candidate
from otel_blame.trajectory import Trajectory

# --- answers the LLM must give -------------------------------------------------------------------


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")


class BlameAnswer(_Answer):
    agent: str
    step: int
    reason: str = ""
    confidence: float = Field(default=0.5, ge=0.0, le=1.0)
    found: bool = True


class StepVerdict(_Answer):
    error: bool
    reason: str = ""


class HalfAnswer(_Answer):
    half: Literal["first", "second"]
    reason: str = ""


class Suspect(_Answer):
    step: int
    agent: str
    reason: str = ""


class SuspectList(_Answer):
    suspects: list[Suspect] = Field(min_length=1, max_length=5)


class CandidateVerdict(_Answer):
    decisive: bool
    confidence: float = Field(default=0.5, ge=0.0, le=1.0)
    reason: str = ""


class CounterfactualVerdict(_Answer):
    fixes_failure: bool
    already_doomed_before: bool = False
    confidence: float = Field(default=0.5, ge=0.0, le=1.0)
    reason: str = ""


# --- shared machinery -----------------------------------------------------------------------------


class _Context:
    """One trajectory being attributed: its rendering parameters and the session's spend."""

    def __init__(self, method: LLMMethod, trajectory: Trajectory) -> None:
        if not trajectory.steps:
            raise AttributionError("the trajectory has no steps")
        self.trajectory = trajectory
        self.settings = method.client.settings
        self.nonce = log_nonce(trajectory)
        self.max_chars = self.settings.max_step_chars
        self.costs = step_tokens(trajectory, self.nonce, self.max_chars)
        self.task_text = render_task(trajectory, self.nonce, self.max_chars, method.with_ground_truth)
        self.client = method.client
        self.session: LLMSession = method.client.session()
        self.agents_lower = {agent.lower(): agent for agent in trajectory.agents}

    @property
    def step_budget(self) -> int:
        reserved = PROMPT_OVERHEAD_TOKENS + estimate_tokens(self.task_text) + self.settings.max_output_tokens
        return max(200, self.settings.context_tokens - reserved)

    def messages(
        self, steps: list[int], question: str, *, grouped: bool = False, note: str = ""
    ) -> list[Message]:
        log_text = render_steps(self.trajectory, steps, self.nonce, self.max_chars, grouped=grouped)
        user = f"{self.task_text}\n\n{note}{log_text}\n\n{question}"
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def canonical_agent(self, name: str) -> str | None:
        return self.agents_lower.get(name.strip().lower())

    def check_step(self, step: int, allowed: list[int] | None = None) -> str | None:
        last = len(self.trajectory.steps) - 1
        if not 0 <= step <= last:
            return f"step {step} is out of range; steps are numbered 0 to {last}"
        if allowed is not None and step not in allowed:
            return f"step {step} is not one of the steps shown ({allowed[0]} to {allowed[-1]})"
        return None

    def check_agent(self, agent: str) -> str | None:
        if self.canonical_agent(agent) is None:
            return f"agent {agent!r} is not in this run; choose one of: {', '.join(self.trajectory.agents)}"
        return None


@contextmanager
def _billed(context: _Context) -> Iterator[None]:
    """An AttributionError raised inside carries what the session spent before it (tokens are billed)."""
    try:
        yield
    except AttributionError as error:
        error.cost = context.session.cost()
        raise


class LLMMethod:
    """Base of the LLM methods: holds the client and the ground-truth switch."""

    name = "llm"

    def __init__(self, client: LLMClient, *, with_ground_truth: bool = False) -> None:
        self.client = client
        self.with_ground_truth = with_ground_truth

    def attribute(self, trajectory: Trajectory) -> Attribution:
        context = _Context(self, trajectory)
        with _billed(context):
            agent, step, reason, confidence, candidates = self._attribute(context)
        # the model judged the run and named a step in it
        return self._verdict(context, agent, step, reason, confidence, candidates, decided=True)

    def _verdict(
        self,
        context: _Context,
        agent: str,
        step: int,
        reason: str,
        confidence: float,
        candidates: list[Candidate],
        *,
        decided: bool,
    ) -> Attribution:
        return Attribution(
            agent=agent,
            step=step,
            confidence=round(min(1.0, max(0.0, confidence)), 3),
            decided=decided,
            reason=reason.strip() or f"Step {step} by {agent} was judged the decisive error.",
            method=self.name,
            model=self.client.model,
            candidates=candidates or [Candidate(step=step, agent=agent, score=1.0)],
            cost=context.session.cost(),
        )

    def _attribute(self, context: _Context) -> tuple[str, int, str, float, list[Candidate]]:
        raise NotImplementedError


_BLAME_QUESTION = (
    "Which agent made the decisive error, and at which step? Reply with JSON: "
    '{"agent": "<one of the agents listed>", "step": <step index>, "reason": "<one or two sentences>", '
    '"confidence": <0..1>}'
)
_CHUNK_QUESTION = (
    "This is part {part} of {parts} of the log (steps {first} to {last}). Does the decisive error lie in "
    "these steps? Reply with JSON: "
    '{{"found": true|false, "agent": "<agent of that step>", "step": <step index shown above>, '
    '"reason": "<one or two sentences>", "confidence": <0..1>}}'
)


def _ask_blame(
    context: _Context, *, grouped: bool = False, temperature: float | None = None, sample: int = 0
) -> BlameAnswer:
    """All-at-once over the whole log, split into chunks when it exceeds the context budget."""
    indices = list(range(len(context.trajectory.steps)))
    chunks = split_to_fit(indices, context.costs, context.step_budget)
    answers: list[BlameAnswer] = []
    for part, chunk in enumerate(chunks, start=1):
        if len(chunks) == 1:
            question = _BLAME_QUESTION
        else:
            question = _CHUNK_QUESTION.format(part=part, parts=len(chunks), first=chunk[0], last=chunk[-1])
        allowed = chunk if len(chunks) > 1 else None

        def check(answer: BlameAnswer, allowed: list[int] | None = allowed) -> str | None:
            return context.check_agent(answer.agent) or context.check_step(answer.step, allowed)

        messages = context.messages(chunk, question, grouped=grouped)
        answer = context.client.ask_json(
            context.session, messages, BlameAnswer, check, temperature=temperature, sample=sample
        )
        answer.agent = context.canonical_agent(answer.agent) or answer.agent
        if answer.found:
            return answer  # the earliest chunk holding the error: errors propagate forward
        answers.append(answer)
    return max(answers, key=lambda answer: answer.confidence)


def _is_error_step(context: _Context, step: int, history: list[int]) -> StepVerdict:
    """Step-by-step's question about one step, seeing the log up to it (latest steps if too long)."""
    shown = latest_that_fit(history, context.costs, context.step_budget)
    note = "" if shown[0] == history[0] else f"[steps {history[0]} to {shown[0] - 1} omitted for length]\n"
    agent = context.trajectory.steps[step].agent
    question = (
        f"Look only at step {step} (by {agent}), given what came before it. Is step {step} the decisive "
        "error that causes the run to fail? Reply with JSON: "
        '{"error": true|false, "reason": "<one or two sentences>"}'
    )
    return context.client.ask_json(context.session, context.messages(shown, question, note=note), StepVerdict)


# --- the methods ------------------------------------------------------------------------------------


class AllAtOnce(LLMMethod):
    name = "all_at_once"

    def _attribute(self, context: _Context) -> tuple[str, int, str, float, list[Candidate]]:
        answer = _ask_blame(context)
        return answer.agent, answer.step, answer.reason, answer.confidence, []


class StepByStep(LLMMethod):
    name = "step_by_step"

    def _attribute(self, context: _Context) -> tuple[str, int, str, float, list[Candidate]]:
        steps = context.trajectory.steps
        for step in steps:
            verdict = _is_error_step(context, step.index, list(range(step.index + 1)))
            if verdict.error:
                return step.agent, step.index, verdict.reason, 0.6, []
        last = steps[-1]
        return last.agent, last.index, "No step was judged an error; blaming the final step.", 0.1, []


class BinarySearch(LLMMethod):
    name = "binary_search"

    def _attribute(self, context: _Context) -> tuple[str, int, str, float, list[Candidate]]:
        low, high = 0, len(context.trajectory.steps) - 1
        reason = ""
        while low < high:
            middle = (low + high) // 2
            segment = list(range(low, high + 1))
            shown = segment
            if sum(context.costs[i] for i in segment) > context.step_budget:
                shown = _fit_around(segment, middle, context)
            question = (
                f"The decisive error lies somewhere in steps {low} to {high}. Is it in the first half "
                f"(steps {low} to {middle}) or in the second half (steps {middle + 1} to {high})? "
                'Reply with JSON: {"half": "first"|"second", "reason": "<one or two sentences>"}'
            )
            answer = context.client.ask_json(context.session, context.messages(shown, question), HalfAnswer)
            reason = answer.reason
            if answer.half == "first":
                high = middle
            else:
                low = middle + 1
        step = context.trajectory.steps[low]
        return step.agent, step.index, reason, 0.5, []


def _fit_around(segment: list[int], middle: int, context: _Context) -> list[int]:
    """When a segment is too long, keep the steps nearest the split point on both sides."""
    kept = {middle}
    used = context.costs[middle]
    for distance in range(1, len(segment)):
        for index in (middle - distance, middle + distance):
            if index in kept or index < segment[0] or index > segment[-1]:
                continue
            if used + context.costs[index] > context.step_budget:
                return sorted(kept)
            kept.add(index)
            used += context.costs[index]
    return sorted(kept)


class Hybrid(LLMMethod):
    name = "hybrid"

    def _attribute(self, context: _Context) -> tuple[str, int, str, float, list[Candidate]]:
        blame = _ask_blame(context)
        own_steps = [step.index for step in context.trajectory.steps if step.agent == blame.agent]
        for index in own_steps:
            verdict = _is_error_step(context, index, list(range(index + 1)))
            if verdict.error:
                return blame.agent, index, verdict.reason, max(blame.confidence, 0.5), []
        step = blame.step if blame.step in own_steps else own_steps[0]
        return blame.agent, step, blame.reason, blame.confidence * 0.8, []


class Counterfactual(LLMMethod):
    name = "counterfactual"
    max_suspects = 4

    def _attribute(self, context: _Context) -> tuple[str, int, str, float, list[Candidate]]:
        trajectory = context.trajectory
        indices = list(range(len(trajectory.steps)))
        suspects: dict[int, str] = {}
        for chunk in split_to_fit(indices, context.costs, context.step_budget):
            question = (
                "Rank up to three suspects for the decisive error, most likely first. Reply with JSON: "
                '{"suspects": [{"step": <step index>, "agent": "<agent of that step>", '
                '"reason": "<one sentence>"}]}'
            )

            def check(answer: SuspectList, chunk: list[int] = chunk) -> str | None:
                for suspect in answer.suspects:
                    problem = context.check_step(suspect.step, chunk if len(chunk) < len(indices) else None)
                    if problem:
                        return problem
                return None

            ranked = context.client.ask_json(
                context.session, context.messages(chunk, question, grouped=True), SuspectList, check
            )
            for suspect in ranked.suspects:
                suspects.setdefault(suspect.step, suspect.reason)
        llm_first = next(iter(suspects))
        offline = RankerAttribution(with_ground_truth=self.with_ground_truth).attribute(trajectory)
        for candidate in offline.candidates[:2]:
            suspects.setdefault(candidate.step, "flagged by the offline causal ranker")
        ordered = sorted(suspects)[: self.max_suspects]
        scores: list[Candidate] = []
        for index in ordered:
            verdict = self._check(context, index)
            passes = verdict.fixes_failure and not verdict.already_doomed_before
            score = verdict.confidence if passes else verdict.confidence * 0.3
            scores.append(Candidate(step=index, agent=trajectory.steps[index].agent, score=round(score, 4)))
            if passes:
                scores.sort(key=lambda candidate: -candidate.score)
                return trajectory.steps[index].agent, index, verdict.reason, verdict.confidence, scores
        scores.sort(key=lambda candidate: -candidate.score)
        step = trajectory.steps[llm_first]
        return step.agent, step.index, suspects[llm_first], 0.3, scores

    def _check(self, context: _Context, index: int) -> CounterfactualVerdict:
        history = list(range(len(context.trajectory.steps)))
        shown = _fit_around(history, index, context)
        agent = context.trajectory.steps[index].agent
        question = (
            f"Counterfactual check of step {index} (by {agent}). Suppose step {index} had been done "
            "correctly and the later steps had followed sensibly from it. Would the task most likely "
            "have succeeded? "
            "And had the run already made a mistake before this step that doomed it anyway? Reply with JSON: "
            '{"fixes_failure": true|false, "already_doomed_before": true|false, "confidence": <0..1>, '
            '"reason": "<one or two sentences>"}'
        )
        return context.client.ask_json(
            context.session, context.messages(shown, question, grouped=True), CounterfactualVerdict
        )


@dataclass(frozen=True)
class _Confirmed:
    """The candidate the LLM confirmed as the decisive error."""

    step: int
    reason: str
    confidence: float


class GuidedCheck(LLMMethod):
    """Offline evidence proposes, the LLM disposes: a few candidate steps checked best first.

    The offline verdict's top ``max_candidates`` steps are checked best first, one call each,
    stopping at the first the LLM confirms as the decisive error (so the step the causal reading
    finds most likely is the one checked first, and often the only one). Each call shows the task,
    the candidate step, the message it answered and the steps that depend on it (the next few and
    the final step), shortened so that all the checks together show no more of the log than
    all-at-once shows once: the per-check allowance is the rendered log's size divided by the number
    of checks (never below ``min_check_chars``). Cost: at most ``max_candidates`` calls, about
    all-at-once's input tokens when every candidate is checked, less when an early one is confirmed.

    :meth:`attribute` runs the offline ranker for its candidates; :meth:`check` takes a verdict
    already made (the escalation, :mod:`otel_blame.attribution.escalation`, so it is not made twice).
    A confirmed candidate is a decided verdict; when none is confirmed the offline answer stands,
    undecided, with the offline ranking as its candidates.
    """

    name = "guided_check"
    max_candidates = 3
    dependents = 2
    min_check_chars = 1500

    def attribute(self, trajectory: Trajectory) -> Attribution:
        offline = RankerAttribution(with_ground_truth=self.with_ground_truth).attribute(trajectory)
        return self.check(trajectory, offline)

    def check(self, trajectory: Trajectory, offline: Attribution) -> Attribution:
        """The LLM's judgement of the best candidates of ``offline``, a verdict on ``trajectory``."""
        context = _Context(self, trajectory)
        with _billed(context):
            confirmed, checked = self._confirm(context, offline)
        # what the offline reading said of a step holds while the verdict is that step
        described = {key: getattr(offline, key) for key in ("category", "dependency", "failure_mode")}
        if confirmed is None:
            attribution = self._verdict(
                context,
                offline.agent,
                offline.step,
                "No candidate was confirmed by the LLM; the offline answer stands. " + offline.reason,
                min(offline.confidence, 0.2),
                list(offline.candidates),
                decided=False,
            )
            return attribution.model_copy(update=described)
        attribution = self._verdict(
            context,
            trajectory.steps[confirmed.step].agent,
            confirmed.step,
            confirmed.reason,
            confirmed.confidence,
            checked,
            decided=True,
        )
        return attribution.model_copy(update=described) if confirmed.step == offline.step else attribution

    def _confirm(self, context: _Context, offline: Attribution) -> tuple[_Confirmed | None, list[Candidate]]:
        """The first of the best candidates the LLM confirms (None: none), and every checked one, scored."""
        trajectory = context.trajectory
        proposed: list[int] = []
        for candidate in [Candidate(step=offline.step, agent=offline.agent, score=1.0), *offline.candidates]:
            if candidate.step not in proposed and candidate.step < len(trajectory.steps):
                proposed.append(candidate.step)
        proposed = proposed[: self.max_candidates]
        log_chars = sum(len(render_step(step, context.nonce, context.max_chars)) for step in trajectory.steps)
        allowance = max(self.min_check_chars, log_chars // len(proposed))
        checked: list[Candidate] = []
        for position, index in enumerate(proposed):
            verdict = self._check(context, index, allowance, first=position == 0)
            agent = trajectory.steps[index].agent
            score = verdict.confidence if verdict.decisive else verdict.confidence * 0.3
            checked.append(Candidate(step=index, agent=agent, score=round(score, 4)))
            if verdict.decisive:
                checked.sort(key=lambda candidate: -candidate.score)
                return _Confirmed(index, verdict.reason, verdict.confidence), checked
        checked.sort(key=lambda candidate: -candidate.score)
        return None, checked

    def _view(self, context: _Context, index: int, allowance: int) -> str:
        """The candidate (half the allowance), the message it answered and its dependents (the rest)."""
        steps = context.trajectory.steps
        before = [i for i in range(index - 1, -1, -1) if steps[i].agent != steps[index].agent][:1]
        after = list(range(index + 1, min(len(steps), index + 1 + self.dependents)))
        if steps[-1].index > index and steps[-1].index not in after:
            after.append(steps[-1].index)
        around = sorted(before + after)
        candidate_chars = min(context.max_chars, max(300, allowance // 2))
        other_chars = min(context.max_chars, max(200, (allowance - candidate_chars) // max(1, len(around))))
        shown = sorted([index, *around])
        blocks = []
        previous = None
        for i in shown:
            if previous is not None and i > previous + 1:
                blocks.append(f"[steps {previous + 1} to {i - 1} not shown]")
            blocks.append(
                render_step(steps[i], context.nonce, candidate_chars if i == index else other_chars)
            )
            previous = i
        return "\n".join(blocks)

    def _check(self, context: _Context, index: int, allowance: int, *, first: bool) -> CandidateVerdict:
        agent = context.trajectory.steps[index].agent
        question = (
            f"Check of candidate step {index} (by {agent}), proposed by an offline causal reading"
            + ("" if first else "; earlier candidates were judged not decisive")
            + ". Judge it against the task, the message it answered and the steps "
            f"that depend on it. Is step {index} the decisive error: a mistake (wrong, made-up or "
            "unsupported content, a plan or action that misses what the task needs) whose correction "
            "would have made the run succeed? Reply with JSON: "
            '{"decisive": true|false, "confidence": <0..1>, "reason": "<one or two sentences>"}'
        )
        user = f"{context.task_text}\n\n{self._view(context, index, allowance)}\n\n{question}"
        messages: list[Message] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user},
        ]
        return context.client.ask_json(context.session, messages, CandidateVerdict)


class SelfConsistency(LLMMethod):
    """All-at-once sampled several times at a higher temperature; the majority answer wins."""

    name = "self_consistency"
    samples = 5
    temperature = 0.7

    def _attribute(self, context: _Context) -> tuple[str, int, str, float, list[Candidate]]:
        answers = [
            _ask_blame(context, temperature=self.temperature, sample=sample) for sample in range(self.samples)
        ]
        agent_votes = Counter(answer.agent for answer in answers)
        agent = max(
            agent_votes,
            key=lambda name: (agent_votes[name], -min(a.step for a in answers if a.agent == name)),
        )
        own = [answer for answer in answers if answer.agent == agent]
        step_votes = Counter(answer.step for answer in own)
        step = max(step_votes, key=lambda index: (step_votes[index], -index))
        reason = next(answer.reason for answer in own if answer.step == step)
        all_steps = Counter((answer.step, answer.agent) for answer in answers)
        candidates = [
            Candidate(step=index, agent=name, score=round(count / len(answers), 4))
            for (index, name), count in sorted(all_steps.items(), key=lambda item: (-item[1], item[0][0]))
        ]
        candidates.sort(key=lambda candidate: candidate.step != step)
        return agent, step, reason, step_votes[step] / len(answers), candidates


LLM_METHODS: dict[str, type[LLMMethod]] = {
    method.name: method
    for method in (AllAtOnce, StepByStep, BinarySearch, Hybrid, Counterfactual, GuidedCheck, SelfConsistency)
}


def max_calls(method_name: str, steps: int) -> int:
    """Upper bound on LLM calls for a log of ``steps`` steps with valid answers (no re-asks, one chunk)."""
    if method_name == "all_at_once":
        return 1
    if method_name == "step_by_step":
        return steps
    if method_name == "binary_search":
        return math.ceil(math.log2(max(steps, 1))) + 1
    if method_name == "hybrid":
        return 1 + steps
    if method_name == "counterfactual":
        return 1 + Counterfactual.max_suspects
    if method_name == "guided_check":
        return GuidedCheck.max_candidates
    if method_name == "self_consistency":
        return SelfConsistency.samples
    raise KeyError(method_name)
