"""Victims are not culprits: what kind of failure an attribution found, and its MAST failure mode.

Pure (a Trajectory and an Attribution in, the Attribution with ``category``, ``dependency`` and
``failure_mode`` filled in out); it never moves the blamed agent or step, it says what kind of fault
that step was.

``category``:

- ``dependency`` when a tool, API or model provider failed at the blamed step (a failing span in or
  under the step's span: an HTTP 429/5xx, a timeout, a provider error, a tool span with an error;
  see :mod:`otel_blame.conventions.dependencies`), or in the tool or code results right before or
  right after it (the result it was reacting to, or the result of the call it made).
  ``dependency`` names the failing tool or service.
- ``specification`` when the run itself says the task or the instructions were wrong: a step says
  they are contradictory, ambiguous, inconsistent or incomplete ("the task does not give the numbers
  I need", "these instructions are contradictory").
- ``agent`` otherwise: the agent's own output was wrong.

``failure_mode`` is one of the 14 modes of MAST (Cemri et al., "Why Do Multi-Agent LLM Systems
Fail?", NeurIPS 2025 Datasets and Benchmarks), only where the trace carries evidence for it (see
:data:`FAILURE_MODES` and ``docs/semconv.md``); otherwise None.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from otel_blame.attribution.result import Attribution
from otel_blame.trajectory import DependencyFailure, StepKind, Trajectory

# MAST: identifier written as blame.failure_mode -> (MAST number, name in the paper, group)
FAILURE_MODES: dict[str, tuple[str, str, str]] = {
    "disobey_task_specification": ("FM-1.1", "Disobey task specification", "specification issues"),
    "disobey_role_specification": ("FM-1.2", "Disobey role specification", "specification issues"),
    "step_repetition": ("FM-1.3", "Step repetition", "specification issues"),
    "loss_of_conversation_history": ("FM-1.4", "Loss of conversation history", "specification issues"),
    "unaware_of_termination_conditions": (
        "FM-1.5",
        "Unaware of termination conditions",
        "specification issues",
    ),
    "conversation_reset": ("FM-2.1", "Conversation reset", "inter-agent misalignment"),
    "fail_to_ask_for_clarification": ("FM-2.2", "Fail to ask for clarification", "inter-agent misalignment"),
    "task_derailment": ("FM-2.3", "Task derailment", "inter-agent misalignment"),
    "information_withholding": ("FM-2.4", "Information withholding", "inter-agent misalignment"),
    "ignored_other_agents_input": ("FM-2.5", "Ignored other agent's input", "inter-agent misalignment"),
    "reasoning_action_mismatch": ("FM-2.6", "Reasoning-action mismatch", "inter-agent misalignment"),
    "premature_termination": ("FM-3.1", "Premature termination", "task verification"),
    "no_or_incomplete_verification": ("FM-3.2", "No or incomplete verification", "task verification"),
    "incorrect_verification": ("FM-3.3", "Incorrect verification", "task verification"),
}

# heuristic signals (otel_blame.attribution.signals) that are evidence of a MAST mode at the step
SIGNAL_MODES: dict[str, str] = {
    "stuck": "step_repetition",
    "plan_gap": "disobey_task_specification",
    "off_task_report": "task_derailment",
    "approval": "incorrect_verification",
}
AGENT_SIGNAL_MODES: dict[str, str] = {"premature_acceptance": "no_or_incomplete_verification"}

_SUBJECT = r"(?:task|instructions?|requirements?|specification|spec|request|question|prompt)"
_FAULTY = (
    r"(?:contradict\w*|conflicting|ambiguous|unclear|inconsistent|under-?specified|incomplete|impossible"
    r"|self-contradictory)"
)
_SPECIFICATION_PATTERN = (
    rf"\b(?:{_SUBJECT}\b[^.\n]{{0,40}}?\b(?:is|are|seems?|looks?|appears?)\s+(?:to be\s+)?{_FAULTY}"
    rf"|{_FAULTY}\s+{_SUBJECT}"
    rf"|{_SUBJECT}\s+(?:does|did)(?: not|n't) (?:give|say|specify|provide|state|include|contain)"
    r"|(?:not enough|insufficient|missing) (?:information|details|data)"
    r" (?:in|from) the (?:task|request|question))"
)
_SPECIFICATION = re.compile(_SPECIFICATION_PATTERN, re.IGNORECASE)
# the same, case-sensitive, for the lower-cased text (see lowered_for_matching); and for ASCII text
# with ASCII classes, table look-ups (where \s lacks the separators \x1c-\x1f: they are put back)
_SPECIFICATION_LOWER = re.compile(_SPECIFICATION_PATTERN)
_ASCII_SPECIFICATION_LOWER = re.compile(_SPECIFICATION_PATTERN.replace(r"\s", r"[\s\x1c-\x1f]"), re.ASCII)
_TERMINATE = re.compile(r"\bTERMINATE\b")
_FINAL_ANSWER = re.compile(r"final answer|the answer is|answer:", re.IGNORECASE)
_FINAL_ANSWERS = ("final answer", "the answer is", "answer:")  # its alternatives, for plain tests
_REPEATS_FOR_LOOP = 3


# what a tool or code result says when the service it called failed (spans say it better; a result's
# text is the evidence left when the instrumentation recorded no HTTP span)
_RESULT_SAYS_DEPENDENCY = re.compile(
    r"\bHTTP(?:/[\d.]+)?[ :]+(?:error[ :]+)?(429|5\d\d)\b"
    r"|\b(429|5\d\d) (?:Too Many Requests|Internal Server Error|Bad Gateway|Service Unavailable"
    r"|Gateway Time-?out)\b"
    r"|\b(Service Unavailable|Too Many Requests|Bad Gateway|Gateway Time-?out"
    r"|(?:Read|Connect)Timeout(?:Error)?|timed out|rate limit exceeded)\b",
    re.IGNORECASE,
)
_ERROR_LINE = re.compile(
    r"\s*(?:[\w.]*(?:Error|Exception)\b|Traceback|HTTP\b|error\b|status\b)", re.IGNORECASE
)
# the same, case-sensitive, for the lower-cased text (see lowered_for_matching; its only escapes are
# \b and \d, which lower-casing leaves as they are)
_RESULT_SAYS_DEPENDENCY_LOWER = re.compile(_RESULT_SAYS_DEPENDENCY.pattern.lower())
# every match of _RESULT_SAYS_DEPENDENCY holds one of these (lower-cased): most results hold none
_DEPENDENCY_WORDS = (
    "http",
    "too many requests",
    "internal server error",
    "bad gateway",
    "service unavailable",
    "gateway time",
    "timeout",
    "timed out",
    "rate limit exceeded",
)
_HOST = re.compile(r"\b(?:https?://)?((?:[a-z0-9-]+\.)+[a-z]{2,})(?=[/:\s)]|$)", re.IGNORECASE)


# where a result says how its own call went: a JSON result's top-level status fields
_STATUS_KEYS = (
    "error",
    "errors",
    "status",
    "status_code",
    "code",
    "message",
    "detail",
    "reason",
    "exception",
)
STATUS_HEAD_CHARS = 300  # a text result states its own failure at its head (a status line, an error)


def _status_text(content: str) -> str:
    """The part of a result that reports on the call itself, not what it retrieved: a JSON object's
    status fields, else the head of the text and its error lines. A search result quoting a document
    about "HTTP 429" is not a failed search."""
    stripped = content.lstrip()
    if stripped.startswith("{"):
        try:
            decoded = json.loads(stripped[:20_000])
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            return " ".join(str(decoded[key]) for key in _STATUS_KEYS if key in decoded)
    head = content[:STATUS_HEAD_CHARS]
    errors = [line for line in content[:4000].splitlines() if _ERROR_LINE.match(line)]
    return "\n".join([head, *errors])


# A case-insensitive regex of lower-case ASCII letters matches a text exactly where the same regex,
# case-sensitive, matches the text lower-cased (several times faster), unless the text holds one of
# the three characters that fold to an ASCII letter without lower-casing to it alone
_FOLDS_APART = ("\u0130", "\u0131", "\u017f")  # İ, ı, ſ


def lowered_for_matching(text: str) -> str | None:
    """``text`` lower-cased for a case-sensitive regex standing in for a case-insensitive one, or
    None where only the case-insensitive regex reads it right."""
    if not text.isascii() and any(map(text.__contains__, _FOLDS_APART)):
        return None
    return text.lower()


def result_text_failure(trajectory: Trajectory, index: int) -> DependencyFailure | None:
    """A tool or code result whose own status says a service failed (HTTP 429/5xx, a timeout)."""
    step = trajectory.steps[index]
    if step.kind == StepKind.MESSAGE:
        return None  # an agent's prose mentioning a 503 is not evidence of one
    content = step.content
    if not content.lstrip().startswith("{"):
        # the status text is pieces of the first 4000 characters, and a match never spans two pieces
        lowered = lowered_for_matching(content[:4000])
        if lowered is not None and not any(map(lowered.__contains__, _DEPENDENCY_WORDS)):
            return None
    status = _status_text(content)
    lowered = lowered_for_matching(status)
    if lowered is not None and not (
        any(map(lowered.__contains__, _DEPENDENCY_WORDS)) and _RESULT_SAYS_DEPENDENCY_LOWER.search(lowered)
    ):
        return None
    found = _RESULT_SAYS_DEPENDENCY.search(status)  # (what it says, as it says it)
    if found is None:
        return None
    host = _HOST.search(step.content[:4000])
    name = step.tool_name or (host.group(1) if host else None) or f"the service called in step {index}"
    kind = "timeout" if re.search(r"time", found.group(0), re.IGNORECASE) else "http_status"
    return DependencyFailure(name=name, kind=kind, detail=found.group(0), step=index, span_id=step.span_id)


def nearby_dependency_failure(trajectory: Trajectory, step: int) -> DependencyFailure | None:
    """A dependency that failed at ``step``, or in the tool/code results just before or after it
    (recorded on spans, else said in a result's text)."""
    by_step: dict[int, DependencyFailure] = {}
    for failure in trajectory.dependency_failures:
        if failure.step is not None:
            by_step.setdefault(failure.step, failure)
    for index in range(len(trajectory.steps)):
        if index not in by_step and abs(index - step) <= 8:
            found = result_text_failure(trajectory, index)
            if found is not None:
                by_step[index] = found
    if step in by_step:
        return by_step[step]
    steps = trajectory.steps
    for direction in (1, -1):  # the result of its own call first, then the result it answered
        index = step + direction
        while 0 <= index < len(steps) and steps[index].kind != StepKind.MESSAGE:
            if index in by_step:
                return by_step[index]
            index += direction
    return None


def _ended_without_answer(trajectory: Trajectory) -> bool:
    """The run was ended (a TERMINATE in its last message) before any answer was given."""
    if trajectory.task.final_output:
        return False
    # (a message with something in it: isspace reads up to its first visible character, strip copies it)
    messages = [
        step
        for step in trajectory.steps
        if step.kind == StepKind.MESSAGE and step.content and not step.content.isspace()
    ]
    if not messages or "TERMINATE" not in messages[-1].content or not _TERMINATE.search(messages[-1].content):
        return False
    return not any(states_an_answer(step.content) for step in messages)


def states_an_answer(text: str) -> bool:
    """``_FINAL_ANSWER`` found in ``text``: by plain tests on its lower-cased form (the same matches,
    a fraction of the cost on a long page)."""
    lowered = lowered_for_matching(text)
    if lowered is None:
        return _FINAL_ANSWER.search(text) is not None
    return says_an_answer(lowered)


def says_an_answer(lowered: str) -> bool:
    """Whether a lower-cased text states an answer ("final answer", "the answer is", "answer:")."""
    return "answer" in lowered and any(map(lowered.__contains__, _FINAL_ANSWERS))


# Every match of _SPECIFICATION holds one word of each group: plain substring tests on the lowered
# text rule out almost every step before the (case-insensitive, backtracking) regex runs.
# (the most frequent first: a test stops at the first found)
SPECIFICATION_CHARS = 4000  # what is read of a message for a specification fault
_SUBJECT_WORDS = ("spec", "request", "question", "instruction", "task", "requirement", "prompt")
_FAULT_WORDS = (
    "does not", "did not", "specified", "missing", "doesn't", "didn't", "incomplete", "ambiguous",
    "inconsistent", "insufficient", "impossible", "contradict", "not enough", "unclear", "conflicting",
)  # fmt: skip


def _states_a_specification_fault(text: str, lowered: str | None = None) -> bool:
    """``_SPECIFICATION`` found in ``text``: plain tests first, then the regex (on the lower-cased text
    where that reads the same). ``lowered``: ``text`` lower-cased, when already at hand."""
    if lowered is None:
        lowered = text.lower()
    if not (any(map(lowered.__contains__, _SUBJECT_WORDS)) and any(map(lowered.__contains__, _FAULT_WORDS))):
        return False
    if text.isascii():
        return _ASCII_SPECIFICATION_LOWER.search(lowered) is not None
    if lowered_for_matching(text) is None:
        return _SPECIFICATION.search(text) is not None
    return _SPECIFICATION_LOWER.search(lowered) is not None


def specification_evidence(
    trajectory: Trajectory, whole_lowers: Sequence[str | None] | None = None
) -> int | None:
    """The first message step saying the task or its instructions are wrong, if any.
    ``whole_lowers``: each step's whole text lower-cased where already at hand (else None)."""
    for step in trajectory.steps:
        if step.kind != StepKind.MESSAGE:
            continue
        text = step.content[:SPECIFICATION_CHARS]
        lowered = None
        if whole_lowers is not None and len(step.content) <= SPECIFICATION_CHARS:
            lowered = whole_lowers[step.index]  # (the whole text is what is read)
        if _states_a_specification_fault(text, lowered):
            return step.index
    return None


def failure_mode(
    trajectory: Trajectory,
    attribution: Attribution,
    by_signal: dict[str, dict[int, float]] | None = None,
    weights: dict[str, float] | None = None,
) -> str | None:
    """The MAST mode the evidence at the blamed step supports, or None.

    ``by_signal`` is the heuristic's evidence per signal (step index -> strength), when known: the
    strongest mapped signal at the blamed step names the mode."""
    steps = trajectory.steps
    if not 0 <= attribution.step < len(steps):
        return None
    blamed = steps[attribution.step]
    if _ended_without_answer(trajectory):
        return "premature_termination"
    said = blamed.content.strip()
    same = [
        step
        for step in trajectory.steps_of(blamed.agent)
        if said
        and step.kind == StepKind.MESSAGE
        and len(step.content) >= len(said)  # (cheap: a shorter text cannot say it)
        and step.content.strip() == said
    ]
    if len(same) >= _REPEATS_FOR_LOOP:
        return "step_repetition"
    if by_signal:
        weights = weights or {}
        found: list[tuple[float, str]] = []
        for signal, mode in SIGNAL_MODES.items():
            strength = by_signal.get(signal, {}).get(attribution.step, 0.0)
            if strength:
                found.append((weights.get(signal, 1.0) * strength, mode))
        for signal, mode in AGENT_SIGNAL_MODES.items():
            strength = sum(
                value
                for index, value in by_signal.get(signal, {}).items()
                if 0 <= index < len(steps) and steps[index].agent == blamed.agent
            )
            if strength:
                found.append((weights.get(signal, 1.0) * strength, mode))
        if found:
            return max(found)[1]
    return None


def describe_failure(
    trajectory: Trajectory,
    attribution: Attribution,
    by_signal: dict[str, dict[int, float]] | None = None,
    weights: dict[str, float] | None = None,
) -> Attribution:
    """The attribution with category, dependency and failure mode; fields a method already set stay."""
    update: dict[str, object] = {}
    reason = attribution.reason
    if attribution.category is None:
        dependency = nearby_dependency_failure(trajectory, attribution.step)
        if dependency is not None:
            update["category"] = "dependency"
            update["dependency"] = dependency.name
            detail = f" ({dependency.detail})" if dependency.detail else ""
            reason += f" It failed because {dependency.name} failed{detail}: a dependency"
            reason += ", not the agent's own output."
        elif (flagged := specification_evidence(trajectory)) is not None:
            update["category"] = "specification"
            reason += (
                f" Step {flagged} says the task or its instructions were wrong: a specification problem."
            )
        else:
            update["category"] = "agent"
    if attribution.failure_mode is None and update.get("category", attribution.category) != "dependency":
        mode = failure_mode(trajectory, attribution, by_signal, weights)
        if mode is not None:
            update["failure_mode"] = mode
    if reason != attribution.reason:
        update["reason"] = reason
    return attribution.model_copy(update=update) if update else attribution
