"""What part each agent plays in a run, read from what it says, never from its name.

- **Copied text.** Each message's share of lines that the task or an earlier step already said: a
  relay (a user forwarding the other agents' answers, a manager restating the task) copies, an agent
  at work writes something new.
- **Task-givers.** The speaker who first gives the task (a message holding the task's text and a few
  words with no value or code of their own: the run's user; or the run's opening message, after a
  system prompt, holding most of the task's words and no value of its own: a user who rephrases the
  question inside instructions of its own), and any speaker whose every message
  gives the task, gives a short directive with no value of its own ("Now proceed with the plan."),
  or precedes the task's delivery (a preamble: instructions before there is a task). Such a speaker
  passes the failure on; it does not make it: never blamed unless a later step shows its own message
  was wrong. A run where every speaker looks like one has none (someone did the work). Copying is
  not relaying: an agent that repeats another's work (a failure mode of its own) is not a
  task-giver; how much each step copies is evidence for the rankers.

Everything is read from a bounded window of each step (its head and tail), so the cost per step is
bounded whatever the run relays.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from otel_blame.trajectory import Step, StepKind, Trajectory

MIN_LINE_CHARS = 12  # shorter lines ("```", "Answer:", a list marker) repeat by chance
DIRECTIVE_CHARS = 160  # a message this short, with no value of its own, directs
DELIVERY_EXTRA_CHARS = 1000  # what a message giving the task says besides it, at most
TASK_PREFIX_CHARS = 200  # a message holding this much of the task's opening delivers the task
_VALUE = re.compile(r"\d")
# code of one's own (on squeezed, lower-cased text): a definition, a return, an import, an assignment, a call
_CODE = re.compile(r"\b(?:def|class|return|import|lambda)\b|[^=!<>]=[^=]|\w\(")
_WORD = re.compile(r"[a-z][a-z-]{3,}")
_NUMBER = re.compile(r"\d+")
REPHRASED_SHARE = 0.8  # of the task's words a message in other words holds
# words a rephrasing changes freely ("What writer is quoted" / "Which writer was quoted"): not the task's
_FUNCTION_WORDS = frozenset(
    "what which when where whom whose that this these those there their then than from with into onto "
    "about does have will would should could were been being your they them also only just each".split()
)
MIN_TASK_WORDS = 5  # a task of fewer words is not told apart from a message that mentions it


def _lines(text: str) -> list[str]:
    return [line for line in map(str.strip, text.splitlines()) if len(line) >= MIN_LINE_CHARS]


def _squeezed(text: str) -> str:
    """Lower-cased, each run of blanks one space (also a newline escaped in a serialised message, whose
    escaped quotes are read as quotes). (Split and joined: ``str.split`` splits on exactly what ``\\s``
    matches, and is several times faster than a regex substitution.)"""
    unescaped = text.replace("\\n", " ").replace("\\'", "'").replace('\\"', '"')
    return " ".join(unescaped.split()).lower()


@dataclass(frozen=True)
class Roles:
    """Per step, the share of its text copied from the task or earlier steps; the run's task-givers."""

    copied: tuple[float, ...]
    task_givers: frozenset[str]
    delivers_task: frozenset[int]  # message steps that carry the task's text


def read_roles(trajectory: Trajectory, texts: Sequence[str]) -> Roles:
    """``texts``: each step's window (what the other readings read of it)."""
    steps = trajectory.steps
    task = _Task.of(trajectory.task.input or "")
    seen: set[str] = set(_lines(task.text))
    delivering = [
        step.index
        for step, text in zip(steps, texts, strict=True)
        if step.kind == StepKind.MESSAGE and _delivers(text, task)
    ]
    # the run's opening message (after a system prompt, if any) may also give the task in its own words
    # (a user's "New task:" that rephrases the question inside instructions of its own)
    opening = [step.index for step in steps if step.kind == StepKind.MESSAGE][:2]
    first_delivery = delivering[0] if delivering else -1
    for index in opening:
        if first_delivery >= 0 and index >= first_delivery:
            break
        if _rephrases(texts[index], task):
            first_delivery = index
            break
    if first_delivery < 0:
        first_delivery = _opening_by_a_giver(steps, texts, opening, task)
    if first_delivery >= 0 and first_delivery not in delivering:
        delivering.insert(0, first_delivery)
    copied: list[float] = []
    own_work: dict[str, bool] = {}
    for step, text in zip(steps, texts, strict=True):
        lines = _lines(text)
        total = sum(map(len, lines))
        repeated = sum(len(line) for line in lines if line in seen)
        share = repeated / total if total else 0.0
        copied.append(share)
        seen.update(lines)
        if step.kind != StepKind.MESSAGE:
            continue
        relays = (
            step.index <= first_delivery  # a preamble (instructions before the task is given), or the task
            or step.index in delivering
            or _directs(text)
        )
        own_work[step.agent] = own_work.get(step.agent, False) or not relays
    givers = {agent for agent, worked in own_work.items() if not worked}
    deliverer = steps[first_delivery].agent if first_delivery >= 0 else None
    if deliverer is not None:
        givers.add(deliverer)  # who gave the task: the run's user
    if len(givers) >= len(own_work):
        # every speaker looks like one: someone was to do the work (workers who answered nothing, a
        # bare "None", failed at it), so only who gave the task is one, and with no other speaker none is
        givers = {deliverer} if deliverer is not None and len(own_work) > 1 else set()
    return Roles(copied=tuple(copied), task_givers=frozenset(givers), delivers_task=frozenset(delivering))


def _opening_by_a_giver(
    steps: Sequence[Step], texts: Sequence[str], opening: Sequence[int], task: _Task
) -> int:
    """The run's opening message (after a preamble: a speaker who never speaks again) when its speaker
    only directs afterwards ("Now proceed and carry out this plan."): that speaker gives the task,
    whatever the task's text, so a task rewritten before it reached the agents is still given, not
    worked on. It holds no code of its own (code the task holds is the task's). -1 when there is none."""
    for index in opening:
        agent = steps[index].agent
        later = [step.index for step in steps[index + 1 :] if step.agent == agent]
        if not later:
            continue  # a preamble, or a speaker who opens and is never heard again
        if _own_code(texts[index], task):
            return -1
        later_messages = [i for i in later if steps[i].kind == StepKind.MESSAGE]
        return index if later_messages and all(_directs(texts[i]) for i in later_messages) else -1
    return -1


def _own_code(text: str, task: _Task) -> bool:
    """Whether a message holds code that the task does not: what reads as code ("Author(s)", "f(x) =")
    with the words either side of it, not found in the task's text. (Words, not characters: a task
    rewritten on its way keeps its words but not what surrounds them, "Return it as appearing" read
    back as "return it as it appears".)"""
    squeezed = _squeezed(text)
    for found in _CODE.finditer(squeezed):
        before = squeezed.rfind(" ", 0, max(0, found.start() - 1)) + 1
        after = squeezed.find(" ", found.end() + 1)
        around = squeezed[before : after if after >= 0 else len(squeezed)]
        if around not in task.squeezed:
            return True
    return False


def _directs(text: str) -> bool:
    """A short directive with no value of its own ("Now proceed with the plan.")."""
    if len(text) > 3 * DIRECTIVE_CHARS:  # (a blank-squeezed text this long is no directive: skip squeezing)
        return False
    own = _squeezed(text)
    return len(own) < DIRECTIVE_CHARS and not _VALUE.search(own) and "```" not in own


def _delivers(text: str, task: _Task) -> bool:
    """A message that gives the task: it holds the task's opening word for word and, besides the task,
    only a few words with no value and no code (a worker restating the task inside its work, a plan,
    code, does not give it). A paraphrase is not recognised: it reads like a worker's restatement."""
    if len(task.head) < 20 or len(text) > len(task.text) + DELIVERY_EXTRA_CHARS:
        return False
    squeezed = _squeezed(text)
    if task.head in squeezed:
        own = squeezed.replace(task.squeezed, " ").replace(task.head, " ")
    else:
        return False
    return len(own) <= DELIVERY_EXTRA_CHARS and not _VALUE.search(own) and not _CODE.search(own)


def _rephrases(text: str, task: _Task) -> bool:
    """A message that gives the task in other words: it holds most of the task's words (``REPHRASED_SHARE``
    of those of its opening), no value the task does not hold, and no code."""
    if len(task.words) < MIN_TASK_WORDS:
        return False
    lowered = text.lower()
    words = set(_WORD.findall(lowered))
    if len(task.words & words) < REPHRASED_SHARE * len(task.words):
        return False
    return set(_NUMBER.findall(lowered)) <= task.numbers and not _CODE.search(_squeezed(text))


@dataclass(frozen=True)
class _Task:
    """The task's text as the delivery test reads it."""

    text: str
    squeezed: str
    head: str
    words: frozenset[str]  # of its opening, four letters or more
    numbers: frozenset[str]  # every number it holds

    @classmethod
    def of(cls, text: str) -> _Task:
        squeezed = _squeezed(text)
        return cls(
            text=text,
            squeezed=squeezed,
            head=_squeezed(text[: TASK_PREFIX_CHARS * 2])[:TASK_PREFIX_CHARS],
            words=frozenset(_WORD.findall(text[: TASK_PREFIX_CHARS * 2].lower())) - _FUNCTION_WORDS,
            numbers=frozenset(_NUMBER.findall(text.lower())),
        )
