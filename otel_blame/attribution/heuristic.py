"""The offline default: blame from content and structure alone, with no LLM and no network.

Every step gets a score from general failure signals, then the best-scoring step wins:

- **error signals**: a tool or code result that failed blames the step that wrote the code
  (hard failures such as tracebacks and non-zero exit codes more than soft ones such as "not
  found"), even when a later step fixed it;
- **fabricated or assumed data**: "let's assume", placeholder / hypothetical / mock values,
  answering from memory instead of looking something up (hedging such as "probably" counts less);
- **where the final answer entered**: the wrong final answer is traced back to the first step
  whose content carries it (through a code result, to the code's author);
- **a verifier approving a wrong result**: approval without new evidence is a weaker suspect;
- **no progress afterwards**: a step after which the run reports being stuck or looping;
- **coordinated runs**: when one agent directs the others (found from who names whom, never from
  names), facts enter through the workers' reports, so those are the main suspects, more so when
  the coordinator's next message says the report did not deliver;
- **earliest substantive decision**: errors propagate, so among similar suspects the earlier
  one is preferred (a decay by order of substantive steps, not by benchmark positions).

Nothing here knows agent names, role strings or positions from any benchmark; agents are only
told apart by who wrote which step. Deterministic; milliseconds for a 100-step run.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from otel_blame.attribution.base import AttributionError
from otel_blame.attribution.result import Attribution, Candidate, Cost
from otel_blame.trajectory import Step, StepKind, Trajectory

METHOD_NAME = "heuristic"
MAX_CANDIDATES = 5


class _Signal:
    """A case-insensitive regex behind a cheap literal prefilter: the regex (slow on long text, many
    alternatives) only runs when the lower-cased text holds one of ``keys``."""

    def __init__(self, pattern: str, keys: tuple[str, ...]) -> None:
        self.regex = re.compile(pattern, re.IGNORECASE)
        self.keys = keys

    def _may_match(self, lower: str) -> bool:
        return any(key in lower for key in self.keys)

    def count(self, text: str, lower: str) -> int:
        return len(self.regex.findall(text)) if self._may_match(lower) else 0

    def search(self, text: str, lower: str) -> bool:
        return self._may_match(lower) and self.regex.search(text) is not None


_ERROR = re.compile(
    r"traceback \(most recent call last\)|\b\w*error\b:|\bexception\b|execution failed|exit ?code:? ?[1-9]"
    r"|\bfailed to\b|\bnot found\b|\b40[134]\b|\b50[023]\b|\bunable to\b|\bcould not\b|\bcannot\b"
    r"|\bno results?\b|\bnone\b|\bnan\b|\bempty\b",
    re.IGNORECASE,
)
_HARD_ERROR = re.compile(
    r"traceback \(most recent call last\)|execution failed|exit ?code:? ?[1-9]|\w+error:|\w+exception:",
    re.IGNORECASE,
)
_FABRICATION = _Signal(
    r"\blet'?s assume\b|\bassum(?:e|ing|ption)\b|\bhypothetical\w*\b|\bplaceholder\b|\bdummy\b|\bmock\w*\b"
    r"|\bsimulat\w+\b|\bfor (?:the sake of|illustration|demonstration)\b|\bexample (?:data|values?)\b"
    r"|\bsample data\b|\bfictional\b|\bmade[- ]up\b|\bI (?:don't|do not|cannot|can't) (?:have )?access\b"
    r"|\bbased on (?:my|general|common|prior) knowledge\b|\bfrom memory\b"
    r"|\breplace (?:this|with) (?:the )?actual\b|\byour[_ ](?:api[_ ]key|file|path)\b|\bpath/to/\b",
    keys=(
        "assum",
        "hypothetical",
        "placeholder",
        "dummy",
        "mock",
        "simulat",
        "for the sake of",
        "for illustration",
        "for demonstration",
        "example data",
        "example value",
        "sample data",
        "fictional",
        "made up",
        "made-up",
        "access",
        "knowledge",
        "from memory",
        "actual",
        "your_",
        "your ",
        "path/to/",
    ),
)
_HEDGING = _Signal(
    r"\btypically\b|\bapproximately\b|\bestimat\w+\b|\bplausible\b|\blikely\b|\bprobably\b"
    r"|\bI (?:believe|think)\b|\bshould be\b",
    keys=(
        "typically",
        "approximately",
        "estimat",
        "plausible",
        "likely",
        "probably",
        "i believe",
        "i think",
        "should be",
    ),
)
_CODE_FENCE = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_APPROVAL = _Signal(
    r"\b(?:verified|confirm(?:ed|s)?|validated|is correct|are correct|looks correct|accurate(?:ly)?|"
    r"everything (?:is|looks) (?:correct|fine|good)|I agree|agreed)\b",
    keys=("verified", "confirm", "validated", "correct", "accurate", "everything", "i agree", "agreed"),
)
_STUCK = _Signal(
    r"\"is_progress_being_made\":\s*\{[^}]*\"answer\":\s*false|\"is_in_loop\":\s*\{[^}]*\"answer\":\s*true"
    r"|\bnot making progress\b|\bno progress\b|\bstalled\b|\bin a loop\b",
    keys=("is_progress_being_made", "is_in_loop", "progress", "stalled", "in a loop"),
)
_TERMINATE_ONLY = re.compile(r"^\W*(?:terminate|exit|done|ok(?:ay)?|thanks?(?: you)?)\W*$", re.IGNORECASE)
_CODE_BLOCK = re.compile(r"```")
_ANSWER_MARKER = re.compile(
    r"(?:final answer|the answer is|answer:|result is|therefore,? the|thus,? the|so,? the|is:)\s*(.{1,160})",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])")
_BOLD = re.compile(r"\*\*([^*\n]{1,80})\*\*")
_UNSATISFIED = re.compile(
    r"\bnot (?:yet )?(?:been )?(?:fully )?"
    r"(?:satisfied|found|identified|obtained|provided|confirmed|retrieved)\b"
    r"|\bstill need\b|\bdid not (?:provide|find|return|show|include)\b|\bdoes not (?:provide|show|include)\b"
    r"|\bno (?:relevant|specific|useful) (?:information|results?|data)\b|\bunable to\b|\bfailed to\b",
    re.IGNORECASE,
)
_ROUTING = re.compile(r"^\s*next speaker\b", re.IGNORECASE)


@dataclass
class _Scored:
    step: Step
    score: float = 0.0
    reasons: list[str] = field(default_factory=list)

    def add(self, amount: float, reason: str) -> None:
        self.score += amount
        if reason not in self.reasons:
            self.reasons.append(reason)


SCAN_HEAD_CHARS = 3000
SCAN_TAIL_CHARS = 1000


def _window(text: str) -> str:
    """What the signals read of a step: all of it, or head and tail of a very long one (web pages,
    file dumps), so the cost per step is bounded."""
    if len(text) <= SCAN_HEAD_CHARS + SCAN_TAIL_CHARS:
        return text
    return text[:SCAN_HEAD_CHARS] + "\n" + text[-SCAN_TAIL_CHARS:]


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _is_task_statement(step: Step, trajectory: Trajectory) -> bool:
    """The request that started the run is not a suspect: a first step that opens with the task text."""
    if step.index != 0:
        return False
    task = _normalise(trajectory.task.input or "")
    if not task:
        return False
    return _normalise(step.content[: len(task) + 400]).startswith(task[:60])


def _is_actor(step: Step, trajectory: Trajectory) -> bool:
    """Steps an agent authored with something in them: suspects. Tool/code results are not."""
    if step.kind != StepKind.MESSAGE:
        return False
    content = step.content.strip()
    if not content or _TERMINATE_ONLY.match(content) or _ROUTING.match(content):
        return False
    return not _is_task_statement(step, trajectory)


def _author_of(steps: list[Step], result: Step, actors: set[int]) -> int | None:
    """The step that produced a tool/code result: the closest earlier authored step, preferring code."""
    fallback = None
    for index in range(result.index - 1, -1, -1):
        if index not in actors:
            continue
        if _CODE_BLOCK.search(steps[index].content):
            return index
        if fallback is None:
            fallback = index
        if result.index - index > 3:
            break
    return fallback


def _answer_tokens(text: str) -> set[str]:
    """The distinctive bits of a final answer: numbers and bolded phrases."""
    tokens = {match.replace(",", "") for match in _NUMBER.findall(text)}
    tokens |= {_normalise(match) for match in _BOLD.findall(text)}
    return {token for token in tokens if len(token) >= 2 and token not in {"10", "20", "00"}}


def _final_answer(trajectory: Trajectory, actors: list[int]) -> str:
    if trajectory.task.final_output:
        return trajectory.task.final_output
    for index in reversed(actors[-3:]):
        content = _window(trajectory.steps[index].content)
        marked = _ANSWER_MARKER.findall(content)
        if marked:
            return marked[-1]
    return trajectory.steps[actors[-1]].content[-400:] if actors else ""


def _coordinator(trajectory: Trajectory, actors: list[int]) -> str | None:
    """The agent that directs the others, if any: it writes many steps and names other agents in them.

    Found from the run itself (who mentions whom), so it works whatever the agents are called.
    """
    agents = trajectory.agents
    if len(agents) < 2 or not actors:
        return None
    by_agent: dict[str, list[Step]] = {}
    for index in actors:
        by_agent.setdefault(trajectory.steps[index].agent, []).append(trajectory.steps[index])
    best, best_share = None, 0.0
    for agent, authored in by_agent.items():
        others = [other for other in agents if other != agent and len(other) >= 3]
        if not others or len(authored) < 5:
            continue
        mentioning = sum(1 for step in authored if any(other in step.content for other in others))
        share = mentioning / len(authored)
        if share > best_share:
            best, best_share = agent, share
    if best is None or best_share < 0.35 or len(by_agent[best]) < 0.6 * len(actors) or len(by_agent) < 2:
        return None
    return best


@dataclass(frozen=True)
class Weights:
    """How much each signal counts; one set for every framework. Set with a coarse sweep on the
    Who&When dev split, keeping only changes that helped both halves of both subsets."""

    early: float = 1.0  # the first suspect's prior; later ones decay
    decay: float = 0.35
    coordinator_share: float = 0.35  # a coordinator's own steps, relative to its workers'
    hard_error: float = 0.6
    soft_error: float = 0.3
    fabrication: float = 0.45
    hedging: float = 0.1
    fabrication_cap: float = 0.9
    final_answer: float = 0.6
    lacking: float = 0.3
    approval: float = 0.15
    stuck: float = 0.4
    agent_support: float = 0.1  # share of an agent's other suspect steps added to its case


class HeuristicAttribution:
    """Offline, deterministic attribution from general failure signals (see the module docstring)."""

    name = METHOD_NAME

    def __init__(self, *, with_ground_truth: bool = False, weights: Weights | None = None) -> None:
        self.with_ground_truth = with_ground_truth
        self.weights = weights or Weights()

    def attribute(self, trajectory: Trajectory) -> Attribution:
        started = time.perf_counter()
        if not trajectory.steps:
            raise AttributionError("the trajectory has no steps")
        ranked = self.score_steps(trajectory)
        # the agent: its best step's score plus a small share of its other suspect steps (an agent that
        # slipped several times is the likelier culprit); the step: that agent's best step
        support: dict[str, float] = {}
        best_of: dict[str, _Scored] = {}
        for item in ranked:
            agent = item.step.agent
            support[agent] = support.get(agent, 0.0) + (
                item.score if agent not in best_of else self.weights.agent_support * item.score
            )
            best_of.setdefault(agent, item)
        chosen = max(support, key=lambda agent: (support[agent], -best_of[agent].step.index))
        best = best_of[chosen]
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
        if len(best.reasons) == 1:  # only the earliness prior: no failure signal points here
            confidence = min(confidence, 0.3)
        confidence = round(confidence, 3)
        reason = f"Step {best.step.index} by {best.step.agent}: " + "; ".join(best.reasons[:3]) + "."
        return Attribution(
            agent=best.step.agent,
            step=best.step.index,
            confidence=confidence,
            reason=reason,
            method=METHOD_NAME,
            candidates=candidates,
            cost=Cost(seconds=round(time.perf_counter() - started, 6)),
        )

    def score_steps(self, trajectory: Trajectory) -> list[_Scored]:
        """Every suspect step with its score and the signals behind it, best first."""
        w = self.weights
        steps = trajectory.steps
        texts = [_window(step.content) for step in steps]
        lowers = [text.lower() for text in texts]
        actor_list = [step.index for step in steps if _is_actor(step, trajectory)]
        if not actor_list:
            actor_list = [step.index for step in steps if step.kind == StepKind.MESSAGE] or [steps[0].index]
        actors = set(actor_list)
        scored = {index: _Scored(steps[index]) for index in actor_list}
        order = {index: rank for rank, index in enumerate(actor_list)}

        # earliest substantive decision: errors propagate forward. When one agent directs the others,
        # facts enter through the workers' reports, so the coordinator's own steps weigh less.
        coordinator = _coordinator(trajectory, actor_list)
        workers = [index for index in actor_list if steps[index].agent != coordinator]
        worker_rank = {index: rank for rank, index in enumerate(workers)}
        for index in actor_list:
            if coordinator is not None and steps[index].agent == coordinator:
                weight = w.coordinator_share / (1.0 + w.decay * order[index])
            else:
                weight = 1.0 / (1.0 + w.decay * worker_rank[index])
            scored[index].add(w.early * weight, "an early decision the rest of the run built on")

        # error signals in tool / code results blame the step that wrote the code
        results = [step for step in steps if step.kind != StepKind.MESSAGE or step.is_error]
        for result in results:
            hard = result.is_error or bool(_HARD_ERROR.search(texts[result.index]))
            soft = not hard and bool(_ERROR.search(texts[result.index][:2000]))
            if not (hard or soft):
                continue
            author = _author_of(steps, result, actors)
            if author is None:
                continue
            # an error fixed later still marks the step that made it: fixing costs turns and often
            # leaves a workaround behind, so it is not discounted
            weight = w.hard_error if hard else w.soft_error
            scored[author].add(weight, "its code or tool call produced an error")

        # fabricated or assumed data
        for index in actor_list:
            prose = _CODE_FENCE.sub(" ", texts[index]) if "```" in texts[index] else texts[index]
            lower = prose.lower()
            strong = _FABRICATION.count(prose, lower)
            weak = _HEDGING.count(prose, lower)
            if strong or weak:
                amount = min(w.fabrication_cap, w.fabrication * min(strong, 3) + w.hedging * min(weak, 3))
                scored[index].add(amount, "it relied on assumed or made-up data")

        # where the final (wrong) answer first entered
        answer = _final_answer(trajectory, actor_list)
        tokens = _answer_tokens(answer)
        if self.with_ground_truth and trajectory.task.expected_output:
            tokens -= _answer_tokens(trajectory.task.expected_output)
        if tokens:
            for step in steps:
                flat = texts[step.index].replace(",", "")
                normalised = _normalise(texts[step.index])
                present = {token for token in tokens if token in flat or token in normalised}
                if len(present) * 2 >= len(tokens):
                    target = step.index
                    if step.index not in actors:
                        target = _author_of(steps, step, actors) or -1
                    if target in scored:
                        scored[target].add(w.final_answer, "the wrong final answer first appeared here")
                    break

        # delegated work the coordinator then found lacking: blame the worker's report
        if coordinator is not None:
            for index in workers:
                following = next((step for step in steps[index + 1 :] if step.agent == coordinator), None)
                if following is not None and _UNSATISFIED.search(following.content[:1500]):
                    scored[index].add(
                        w.lacking / (1.0 + 0.5 * worker_rank[index]),
                        "the coordinator found its report lacking",
                    )

        # a verifier approving without new evidence
        for index in actor_list:
            step = steps[index]
            if (
                order[index] > 0
                and _APPROVAL.search(texts[index], lowers[index])
                and not _CODE_BLOCK.search(step.content)
            ):
                scored[index].add(w.approval, "it approved a result without new evidence")

        # the run never recovered after a step: the first step followed by a stuck / no-progress report
        for position, index in enumerate(actor_list[:-1]):
            following = range(index + 1, actor_list[position + 1] + 1)
            if any(_STUCK.search(texts[later], lowers[later]) for later in following):
                scored[index].add(w.stuck, "the run reported no progress right after it")
                break

        return sorted(scored.values(), key=lambda item: (-item.score, item.step.index))
