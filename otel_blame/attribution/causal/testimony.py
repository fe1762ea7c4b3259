"""Later testimony: a step that says an earlier one went wrong, and the step it points at.

Failures made by real models rarely carry a planted signature; what they leave is testimony. A critic
objects ("that figure is incorrect"), a verifier finds a mismatch ("does not match the source"), a
coordinator's progress review says nothing is being achieved ("we are not making progress", "stuck in
a loop"), a worker admits its own mistake ("I made an error above"). People find the decisive step
by reading backwards from such testimony, so this module does the same:

- ``testimony``, on the step that testifies (a critic is rarely the culprit);
- ``testified_wrong``, on the step the testimony points at: the latest earlier step of the agent it
  names, else, for a confession ("I made an error", "my mistake"), the testifier's own latest earlier
  step, else the message it answers (the latest earlier message by another agent).

Only a step's head is read (``TESTIMONY_CHARS``): testimony is said, not buried in a retrieved page.
Nothing here knows agent names in advance: a name counts only as one of the run's own agents.
"""

from __future__ import annotations

import re

from otel_blame.trajectory import StepKind, Trajectory

TESTIMONY_CHARS = 2000
# said of something earlier: wrong, mismatched, failed, not progressing (on lower-cased text)
_WRONG = re.compile(
    r"\b(?:is|was|are|were|seems?|appears?|looks?) (?:to be )?(?:incorrect|wrong|inaccurate|erroneous|"
    r"invalid|irrelevant|unrelated|not (?:correct|accurate|relevant|right|valid|what (?:we|i|was) "
    r"(?:need|want|ask)))"
    r"|\b(?:a|an|the|some) (?:mistake|error|miscalculation|oversight|discrepancy|inconsistency) "
    r"(?:in|with|was)\b"
    r"|\b(?:does|do|did)(?: not|n't) (?:match|align|correspond|agree|answer|address|satisfy|meet)\b"
    r"|\b(?:failed|fails|unable|could not|couldn't|was not able|wasn't able|were not able) to (?:find|locate|"
    r"retrieve|identify|access|provide|extract|load|open|verify|confirm|get|obtain)\b"
    r"|\bno (?:relevant |useful |such )?(?:results?|information|data|matches|records?) (?:were |was )?"
    r"(?:found|available|returned)\b"
    r"|\bnot (?:making|made|been making) (?:any |much |sufficient |enough )?progress\b"
    r"|\b(?:in|into|stuck in) (?:a|an) (?:loop|infinite loop|cycle)\b|\bgoing in circles\b"
    r"|\b(?:misunderst|misinterpret|misread|overlook)\w*\b"
)
_CONFESSION = re.compile(
    r"\b(?:i|we) (?:made|have made) (?:a|an) (?:mistake|error)\b|\bmy (?:mistake|apologies|error|bad)\b"
    r"|\b(?:i|we) apologi[sz]e\b|\bapologies for\b|\blet me (?:correct|fix|redo|re-?check|revisit)\b"
    r"|\b(?:i|we) (?:mis\w+|overlooked|forgot)\b"
)
# the same on ASCII text (word boundaries as table look-ups: twice as fast)
_ASCII_WRONG = re.compile(_WRONG.pattern, re.ASCII)
_ASCII_CONFESSION = re.compile(_CONFESSION.pattern, re.ASCII)
# a step is read for testimony only where one of these is (the most frequent first: a test stops at the
# first found)
_KEYS = (
    "not ", "no ", "error", "progress", "loop", "failed", "mis", "n't ", "let me", "incorrect", "mistake",
    "unable", "wrong", "inaccurate", "erroneous", "invalid", "irrelevant", "unrelated", "discrepan",
    "inconsisten", "fails", "circles", "overlook", "apolog", "oversight", "forgot",
)  # fmt: skip
# every confession holds one of these (most testimony is not one: its regex is mostly not run)
_CONFESSION_KEYS = ("made a", "my ", "apologi", "let me ", "i mis", "we mis", "overlooked", "forgot")


def read_testimony(
    trajectory: Trajectory, lowers: dict[int, str]
) -> tuple[dict[int, float], dict[int, float], set[int]]:
    """(testimony, testified_wrong, named): per step, whether it testifies that an earlier step went
    wrong, and how many testimonies point at it (0..1: one is 0.5, two or more 1); and the steps a
    testimony points at by naming their agent or by confessing (what a relayed message's author is
    held to: an objection to the message it answers may be about what the message relays)."""
    steps = trajectory.steps
    agents = {step.agent.lower(): step.agent for step in steps if len(step.agent) > 2}
    said: dict[int, float] = {}
    against: dict[int, float] = {}
    named: set[int] = set()
    for step in steps:
        if step.kind != StepKind.MESSAGE or step.index == 0:
            continue
        lowered = lowers[step.index] if step.index in lowers else step.content.lower()
        head = lowered[:TESTIMONY_CHARS]
        if not any(map(head.__contains__, _KEYS)):
            continue
        ascii_text = head.isascii()
        confession = any(map(head.__contains__, _CONFESSION_KEYS)) and (
            (_ASCII_CONFESSION if ascii_text else _CONFESSION).search(head) is not None
        )
        if not confession and (_ASCII_WRONG if ascii_text else _WRONG).search(head) is None:
            continue
        said[step.index] = 1.0
        target, by_name = _pointed_at(trajectory, step.index, head, agents, own=confession)
        if target is not None:
            against[target] = min(1.0, against.get(target, 0.0) + 0.5)
            if by_name:
                named.add(target)
    return said, against, named


def _pointed_at(
    trajectory: Trajectory, index: int, head: str, agents: dict[str, str], *, own: bool
) -> tuple[int | None, bool]:
    """The earlier step a testimony is about: the latest step of an agent it names, else (a confession)
    its own agent's latest earlier step, else the latest earlier message by another agent; and
    whether it was found by a name or a confession rather than by adjacency."""
    steps = trajectory.steps
    speaker = steps[index].agent
    named = [
        name
        for lowered, name in agents.items()
        if name != speaker
        and lowered in head
        and re.search(rf"(?<![\w-]){re.escape(lowered)}(?![\w-])", head)
    ]
    for earlier in range(index - 1, -1, -1):
        step = steps[earlier]
        if named:
            if step.agent in named:
                return earlier, True
        elif own:
            if step.agent == speaker:
                return earlier, True
        elif step.kind == StepKind.MESSAGE and step.agent != speaker or step.kind != StepKind.MESSAGE:
            return earlier, False
    return None, False
