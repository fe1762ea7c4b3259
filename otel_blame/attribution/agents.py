"""The agent over the whole run: which agent the evidence says, read across all of its steps.

The step ranking says where the failure most likely entered; an agent's part in the conversation
says whether it is the kind of speaker that makes failures or passes them on. Both transfer across
systems where names do not, so every feature here is read from the run (who wrote what, when,
copied from whom, checked by whom), never from what an agent is called:

- its share of the step ranking's probability (``mass``), its best step's (``peak``), whether it owns
  the best step, and how much more than its share of the steps the ranking gives it (``lift``);
- its role: how much of the conversation it writes, when it arrives, whether it opens, answers or
  closes the run, whether it coordinates the others, how much it copies, whether it checks others'
  work (testimony, talk of verifying) or is checked (testified wrong), whether its calls or code
  failed;
- how its words relate to the task, against the other agents' (an agent that drifts off the task).

Task-givers (:mod:`otel_blame.attribution.roles`) are not candidates unless a later step says one
of their own messages was wrong, nor is an agent whose only step is the task as given. A fitted
linear score per agent, one softmax over the run's candidate agents, gives each agent's probability.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from otel_blame.attribution.causal.testimony import TESTIMONY_CHARS
from otel_blame.attribution.signals import content_words, words_in
from otel_blame.trajectory import StepKind

if TYPE_CHECKING:
    from otel_blame.attribution.step_rows import StepRows

AGENT_FEATURES: tuple[str, ...] = (
    "mass",
    "peak",
    "top",
    "lift",
    "share",
    "arrival",
    "opens",
    "answers",
    "closes",
    "coordinator",
    "copied",
    "testifies",
    "verifies",
    "testified",
    "failed_calls",
    "on_task",
    "length",
    "agents",
    "only_agent",
)
TASK_WORDS_CHARS = 4000  # what is read of the task for its words
# a message that checks others' work (read in its head, lower-cased): verifying, validating, reviewing
_CHECKS = re.compile(r"\b(?:verif|validat|double-check|cross-check|review|confirm)\w*")
# every match of _CHECKS holds one of these: plain tests rule out most messages before the regex
_CHECK_WORDS = ("verif", "confirm", "review", "validat", "-check")
AGENT_WORDS_CHARS = 800  # of each message, for the agent's words
RELAYED_SHARE = 0.5  # a message whose lines are this much copied relays what others said


@dataclass
class AgentRows:
    """The run's candidate agents (in order of first appearance) and their feature values."""

    agents: list[str]
    rows: list[dict[str, float]]
    steps: dict[str, list[int]]  # each agent's candidate steps, best first by the step ranking


def agent_rows(rows: StepRows, ranked: list[tuple[float, int]]) -> AgentRows:
    """Every candidate agent's features, from the run and its step ranking (see the module docstring)."""
    trajectory = rows.trajectory
    steps = trajectory.steps
    reading = rows.reading
    features = reading.features
    givers = rows.roles.task_givers
    testified_wrong = features.get("testified_wrong", {})
    probability = {index: p for p, index in ranked}
    by_agent: dict[str, list[int]] = {}
    for _, index in ranked:
        by_agent.setdefault(steps[index].agent, []).append(index)
    # who may be blamed: not a task-giver (its messages give the task, relay others' answers or
    # direct), unless a later testimony names it as it is written ("User", not "the user's question":
    # a role word in lower case names no speaker) and points at a message of its own words, neither
    # the task it gives nor what it relays (an objection to those is about the task or the answers)
    roles = rows.roles
    testimony = features.get("testimony", {})
    testifying = [index for index, said in testimony.items() if said]

    def shown_wrong(agent: str) -> bool:
        own = [
            index
            for index in by_agent[agent]
            if index in reading.named_wrong
            and index not in roles.delivers_task
            and roles.copied[index] < RELAYED_SHARE
        ]
        if not own:
            return False
        written = re.compile(rf"(?<![\w-]){re.escape(agent)}(?![\w-])")
        return any(
            index > own[0] and written.search(steps[index].content[:TESTIMONY_CHARS]) for index in testifying
        )

    # nor an agent whose only step is the task as given: the question is never an agent's failure
    task_step = reading.graph.task_step
    agents = [
        agent
        for agent in trajectory.agents
        if agent in by_agent
        and by_agent[agent] != [task_step]
        and (agent not in givers or shown_wrong(agent))
    ] or [agent for agent in trajectory.agents if agent in by_agent]
    candidates = set(rows.candidates)
    messages: dict[str, list[int]] = {}
    for step in steps:
        if step.kind == StepKind.MESSAGE and step.index in candidates:
            messages.setdefault(step.agent, []).append(step.index)
    authored = sum(len(found) for found in messages.values()) or 1
    arrival = {agent: order for order, agent in enumerate(messages)}
    last_message = max((index for found in messages.values() for index in found), default=None)
    answer_step = reading.graph.answer_step
    top = ranked[0][1] if ranked else None
    coordinator = rows.coordinator
    failed = set(features.get("caused_failing_result", {})) | set(features.get("calls_failed_dependency", {}))
    failed |= {step.index for step in steps if step.is_error}
    task_words = content_words((trajectory.task.input or "")[:TASK_WORDS_CHARS])
    overlap = {agent: _overlap(task_words, rows, messages.get(agent, [])) for agent in agents}
    mean_overlap = sum(overlap.values()) / len(overlap) if overlap else 0.0
    lengths = {agent: _mean_length(rows, messages.get(agent, [])) for agent in agents}
    mean_length = sum(lengths.values()) / len(lengths) if lengths else 0.0
    count = len(rows.candidates) or 1
    table = []
    for agent in agents:
        own = by_agent[agent]
        mass = sum(probability[index] for index in own)
        written = messages.get(agent, [])
        per_message = 1.0 / len(written) if written else 0.0
        row = {
            "mass": mass,
            "peak": max(probability[index] for index in own),
            "top": float(top in own),
            "lift": math.log((mass + 1e-3) / (len(own) / count + 1e-3)),
            "share": len(written) / authored,
            "arrival": 1.0 / (1 + arrival.get(agent, len(arrival))),
            "opens": float(arrival.get(agent) == 0),
            "answers": float(answer_step in own),
            "closes": float(last_message in written),
            "coordinator": float(agent == coordinator),
            "copied": per_message * sum(roles.copied[index] for index in written),
            "testifies": per_message * sum(1 for index in written if testimony.get(index)),
            "verifies": per_message * sum(1 for index in written if _checks(rows, index)),
            "testified": max((testified_wrong.get(index, 0.0) for index in own), default=0.0),
            "failed_calls": float(any(index in failed for index in own)),
            "on_task": overlap[agent] - mean_overlap if task_words else 0.0,
            "length": math.log((lengths[agent] + 50) / (mean_length + 50)),
            "agents": 1.0 / len(agents),
            "only_agent": float(len(agents) == 1),
        }
        table.append(row)
    # (``ranked`` is best first, so each agent's steps already are)
    return AgentRows(agents=agents, rows=table, steps={agent: by_agent[agent] for agent in agents})


def _checks(rows: StepRows, index: int) -> bool:
    """Whether a message checks others' work (it speaks of verifying, validating, reviewing)."""
    head = rows.reading.graph.texts[index][:AGENT_WORDS_CHARS].lower()
    return any(map(head.__contains__, _CHECK_WORDS)) and _CHECKS.search(head) is not None


def _overlap(task_words: set[str], rows: StepRows, written: list[int]) -> float:
    """The share of the task's words (its ``content_words``) the agent's messages use. (Each
    message's words are looked up among the task's, not filtered of stopwords: the task's words hold
    none, so the share is the same.)"""
    if not task_words or not written:
        return 0.0
    texts = rows.reading.graph.texts
    used: set[str] = set()
    for index in written:
        used |= task_words.intersection(words_in(texts[index][:AGENT_WORDS_CHARS]))
    return len(used) / len(task_words)


def _mean_length(rows: StepRows, written: list[int]) -> float:
    if not written:
        return 0.0
    steps = rows.trajectory.steps
    return sum(len(steps[index].content) for index in written) / len(written)
