"""Follow the failure back through the run: per step, is its content supported by what it was given?

The failure signal is the step that states the run's answer (or its last message), and every tool or
code result that failed. Walking back through what each step used (:mod:`.graph`) gives the steps on
the failure's path. A step's content is *unsupported* when:

- a value or name first appears there (``novel``), above all one that reaches the answer
  (``answer_origin``);
- it leaves out a requirement of the task, or a statement of the message it answers, that nothing
  later carries (``dropped_task``, ``dropped_input``);
- it overrides what it was given (``override``: "Correction: ... should be ...", a name assigned two
  different values);
- it stops the run before any answer while leaving work for others: the request itself, code to run,
  a plan or a question before the stop word (``unanswered_stop``); any stop the run went on past
  (``stop_mid_run``); a stop word inside a tool's or code's output, where nothing decides to stop
  (``stop_in_result``);
- it is a result that does not follow from its call: a failure the call did not cause (a dependency:
  HTTP 429/5xx, a timeout, a failing tool span; or arithmetic code that cannot fail), a value the
  call's arithmetic does not produce, or an identifier the call asked for answered with another
  (``dependency``, ``result_contradicts_call``);
- it calls a tool with an argument (a number, an identifier) nothing before it gave
  (``novel_call_value``), or states an identifier (an id, a date, a code) nothing before it gave:
  identifiers are passed on, never worked out (``novel_identifier``);
- it states the run's answer with values that nothing before it gave or derives
  (``answer_unsupported``);
- the agent it handed over to said what it got was lacking: missing, not confirmed, incomplete
  (``input_found_lacking``, on the message that was answered: the victim names its input);
- a later step testifies that it went wrong: an objection, a mismatch, a confession, a review that
  says no progress is being made (``testified_wrong``; the testifying step gets ``testimony``:
  :mod:`.testimony`).

Every feature is a number in [0, 1] per step; the ranker (:mod:`otel_blame.attribution.ranker`)
weighs them. Nothing here knows agent names, role strings or absolute positions.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice

from otel_blame.attribution.causal.arithmetic import agrees, expression_value, printed_numbers
from otel_blame.attribution.causal.calls import (
    ToolCall,
    argument_atoms,
    argument_words,
    atoms_of,
    keyed_values,
    parse_json,
    tool_calls,
)
from otel_blame.attribution.causal.graph import (
    HEAD_CHARS,
    TAIL_CHARS,
    RunGraph,
    build_graph,
    is_value,
    numbers_in,
    tokens_of,
)
from otel_blame.attribution.causal.testimony import read_testimony
from otel_blame.attribution.systemic import lowered_for_matching, result_text_failure, says_an_answer
from otel_blame.trajectory import DependencyFailure, Step, StepKind, Trajectory

CAUSAL_FEATURES: tuple[str, ...] = (
    "novel_value",
    "novel",
    "novel_result",
    "answer_origin",
    "on_path",
    "first_unsupported",
    "dropped_task",
    "dropped_input",
    "override",
    "unanswered_stop",
    "explained_stop",
    "stop_mid_run",
    "dependency",
    "calls_failed_dependency",
    "result_error",
    "caused_failing_result",
    "result_contradicts_call",
    "answer_step",
    "novel_call_value",
    "answer_unsupported",
    "input_found_lacking",
    "novel_identifier",
    "stop_in_result",
    "testimony",
    "testified_wrong",
)

_STOP = re.compile(r"\bTERMINATE\b|\bSTOP\b")
_STOP_LINE = re.compile(r"(?:^|\n)[ \t#]*(?:TERMINATE|STOP)[ \t.!#]*$")  # a stop word said, not quoted
STOP_CHARS = 400  # a stop word is read in a message's tail
_LAST_STEPS = 2  # a stop in the run's last steps is where runs end; one earlier cut it short
# run on lower-cased text, and only when one of their keys is there (a scan of every message is
# costly): a correction opening a line (read from the newline before it, the text read with one in
# front, so the scan jumps from line to line), and phrases overriding a value or an instruction
_CORRECTION_LINE = re.compile(r"\n[ \t]*correction\s*:")
_OVERRIDE = re.compile(
    r"should (?:be|read|have been) \d|instead of \d|skip (?:step|item|line) \d"
    r"|ignore (?:the|that|step|previous)\b|scratch that\b"
)
_OVERRIDE_KEYS = ("should", "instead", "skip", "ignore", "scratch")
_ASSIGN_VALUE = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*(-?\d[\d_]*(?:\.\d+)?)\s*$", re.MULTILINE)
_GIVES_A_NUMBER = re.compile(r"=\s*-?\d")  # in every assignment of a number: the scan jumps from "=" to "="
_HARD_PATTERN = (
    r"traceback \(most recent call last\)|execution failed|exit ?code:? ?[1-9]|[a-z]error:|[a-z]exception:"
)
_HARD = re.compile(_HARD_PATTERN, re.IGNORECASE)
# on the lower-cased text (see lowered_for_matching) the case-sensitive regex matches where _HARD does on
# the original, and only where one of these is: most results are ruled out by plain tests
_HARD_LOWER = re.compile(_HARD_PATTERN)
_HARD_KEYS = ("traceback", "execution failed", "exit", "error:", "exception:")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_DIGIT = re.compile(r"\d")
MAX_STATEMENTS = 16
ANSWER_INPUTS = 2  # the steps just before the answer whose values it may work from
# small whole numbers (a count, a day of a date) are not operands of a derivation: with them nearly any
# value is "twice" or "three more than" something at hand
SMALL_OPERAND = 10
_WORD = re.compile(r"[a-z_][a-z0-9_]{2,}|\d+(?:\.\d+)?")
_ASCII_WORD = re.compile(_WORD.pattern, re.ASCII)  # the same on ASCII text (\d as table look-ups)


@dataclass
class CausalReading:
    """The causal evidence of one run: per feature, its value per step (absent = 0)."""

    graph: RunGraph
    features: dict[str, dict[int, float]]
    failure_path: set[int]
    dependency_at: dict[int, DependencyFailure] = field(default_factory=dict)
    named_wrong: set[int] = field(default_factory=set)  # testified wrong by name or by confession

    def of(self, index: int) -> dict[str, float]:
        return {name: found[index] for name, found in self.features.items() if index in found}

    def root_dependency(self) -> int | None:
        """The earliest failing dependency the run never got past: no later call to it succeeded.
        Where the failure's path starts at one, it is the cause, wherever in the run it sits; unless
        a later step stopped the run while announcing work still to do (a retry it never made): then
        that stop, not the dependency, ended the run."""
        steps = self.graph.steps
        stops = self.features["unanswered_stop"]
        for index in sorted(self.dependency_at):
            name = self.dependency_at[index].name
            recovered = any(
                later not in self.dependency_at
                and (steps[later].tool_name or steps[later].agent)
                == (steps[index].tool_name or steps[index].agent)
                and steps[later].kind == steps[index].kind
                and not steps[later].is_error
                for later in range(index + 1, len(steps))
            )
            if not recovered and name and not any(stop > index for stop in stops):
                return index
        return None


# a tool's error that says the call was wrong, not the tool (run on a result's lower-cased head)
_CALLERS_ERROR = re.compile(
    r"unexpected keyword|missing \d* ?required|not a valid|invalid|not found|no such|does not exist"
    r"|doesn't exist|are not all in|is not in|unknown (?:tool|argument|parameter|field|key)|typeerror"
    r"|valueerror|keyerror|must be|validation error|bad request|\b(?:400|404|422)\b"
)


def _dependencies(trajectory: Trajectory, graph: RunGraph) -> dict[int, DependencyFailure]:
    """Failing dependencies by step: recorded on spans, else said in a result's text (429, 5xx,
    timeouts). A tool span's bare error status whose result says the call was wrong (an unexpected
    argument, an unknown id, "not a valid tool") is the call's failure, not the tool's: the call
    caused it, and the reading charges the call (``caused_failing_result``)."""
    found: dict[int, DependencyFailure] = {}
    for failure in trajectory.dependency_failures:
        if failure.step is None or not 0 <= failure.step < len(trajectory.steps) or failure.step in found:
            continue
        said = result_text_failure(trajectory, failure.step)
        if said is not None:
            failure = failure.model_copy(update={"kind": said.kind, "detail": said.detail})
        elif failure.kind == "tool_error" and _CALLERS_ERROR.search(graph.texts[failure.step][:1500].lower()):
            continue
        found[failure.step] = failure
    for step in trajectory.steps:
        if step.kind != StepKind.MESSAGE and step.index not in found:
            failure = result_text_failure(trajectory, step.index)
            if failure is not None:
                found[step.index] = failure
    return found


def _is_statement_line(line: str) -> bool:
    """A line with something in it that does not open or close a code block."""
    stripped = line.lstrip()
    return bool(stripped) and not stripped.startswith("```")


def _lowered(graph: RunGraph, index: int, whole_lowers: Sequence[str | None] | None) -> str:
    """A step's text as the reading reads it, lower-cased (the whole text's, when it is read whole)."""
    if whole_lowers is not None and len(graph.steps[index].content) <= HEAD_CHARS + TAIL_CHARS:
        lowered = whole_lowers[index]
        if lowered is not None:
            return lowered
    return graph.texts[index].lower()


def _statements(text: str) -> list[set[str]]:
    """The statements of a message that give or assign a value (its lines, or its sentences when it is
    one line), as word sets: prose (a request, thanks) is not carried over, values are."""
    if "=" not in text and not _DIGIT.search(text):
        return []  # (no statement of it can give a value)
    # (only the first MAX_STATEMENTS lines are read: the others are not filtered)
    lines = list(islice(filter(_is_statement_line, text.splitlines()), MAX_STATEMENTS))
    units = lines if len(lines) >= 2 else _SENTENCE.findall(text)
    found = []
    for unit in units[:MAX_STATEMENTS]:
        if "=" not in unit and not _DIGIT.search(unit):
            continue
        lowered = unit.lower()
        words = set((_ASCII_WORD if lowered.isascii() else _WORD).findall(lowered))
        if len(words) >= 2:
            found.append(words)
    return found


def _fails_hard(text: str) -> bool:
    """A traceback, a failed execution, a non-zero exit code or an ``...Error:`` in a result."""
    lower = lowered_for_matching(text)
    if lower is None:
        return _HARD.search(text) is not None
    return any(map(lower.__contains__, _HARD_KEYS)) and _HARD_LOWER.search(lower) is not None


def _carried(statement: set[str], words: set[str]) -> bool:
    return len(statement & words) >= 0.6 * len(statement)


def _dropped_input(
    graph: RunGraph, lower: str, given: int | None, statements: dict[int, list[set[str]]]
) -> float:
    """Statements of the message this step (its lower-cased text ``lower``) answers that it left out,
    when it carries most of the rest (it restates or implements that message and dropped part of it).
    ``statements`` caches each source's statements (many steps answer the same message)."""
    if given is None:
        return 0.0
    if given not in statements:
        source = graph.texts[given] if given >= 0 else (graph.trajectory.task.input or "")
        statements[given] = _statements(source[:3000])
    found = statements[given]
    if len(found) < 2:
        return 0.0
    # the message's words that the statements hold (the others carry none of them): looked up in
    # the statements' words rather than all put in a set of their own
    said = set().union(*found).intersection((_ASCII_WORD if lower.isascii() else _WORD).findall(lower))
    missing = sum(1 for statement in found if not _carried(statement, said))
    if missing == 0 or missing * 2 > len(found):
        return 0.0
    return min(1.0, missing / 2)


def _task_cut_short(graph: RunGraph) -> int | None:
    """The message that delivered the task with most of it cut off: its text is the opening of the
    recorded task, and much shorter (what followed never reached the agents)."""
    task = " ".join((graph.trajectory.task.input or "").split())
    if len(task) < 40:
        return None
    for index in graph.candidates[:3]:
        content = graph.steps[index].content
        # a head already as long says the whole is (a relayed page is not squeezed whole to learn it)
        if len(" ".join(content[: len(task)].split())) >= 0.6 * len(task):
            continue
        said = " ".join(content.split())
        if len(said) >= 8 and len(said) < 0.6 * len(task) and task.startswith(said.rstrip(".…")):
            return index
    return None


def _dropped_task(graph: RunGraph) -> dict[int, float]:
    """Task values that stop being carried: each task number no step after its last carrier repeats is
    charged to the first message after that carrier that restates other task values (it should have
    carried this one too)."""
    steps = graph.steps
    task_numbers = set(numbers_in(graph.trajectory.task.input or ""))
    if len(task_numbers) < 2:
        return {}
    carriers: dict[str, list[int]] = {number: [] for number in task_numbers}
    message_numbers: dict[int, set[str]] = {}
    for index in graph.candidates:
        present = set(graph.numbers[index]) & task_numbers
        message_numbers[index] = present
        for number in present:
            carriers[number].append(index)
    found: dict[int, float] = {}
    for number, where in carriers.items():
        last = where[-1] if where else -1
        if last >= (graph.answer_step or 0):
            continue
        for index in graph.candidates:
            if index <= last or steps[index].kind != StepKind.MESSAGE:
                continue
            if len(message_numbers.get(index, set()) - {number}) >= 1:
                found[index] = min(1.0, found.get(index, 0.0) + 0.5)
                break
    return found


# a message saying what it was given lacks something (run on lower-cased text, when a key is there)
_LACKING = re.compile(
    r"\b(?:does not|doesn't|did not|didn't|do not|don't) (?:confirm|include|say|state|mention|provide|"
    r"contain|give|show|specify)\b|\b(?:is|was|are|were) (?:still )?(?:missing|not (?:provided|given|"
    r"included|confirmed|verified|specified)|incomplete|unverified)\b|\bmissing (?:from|in) (?:the|your)\b"
    r"|\bnot enough (?:information|detail)|\bincomplete (?:information|summary|note|report|data)\b"
)
_ASCII_LACKING = re.compile(_LACKING.pattern, re.ASCII)  # the same on ASCII text, twice as fast
_LACKING_KEYS = ("not ", "n't ", "missing", "incomplete", "unverified")
LACKING_CHARS = 1500


def _found_lacking(graph: RunGraph, lowers: dict[int, str], answers_to: list[int | None]) -> dict[int, float]:
    """The message each complaint answers (the closest earlier message by another agent): an agent
    that says its input lacks something names where the run went wrong before it."""
    found: dict[int, float] = {}
    for index in graph.candidates:
        if graph.steps[index].kind != StepKind.MESSAGE:
            continue
        head = lowers[index][:LACKING_CHARS]
        if any(map(head.__contains__, _LACKING_KEYS)) and (
            (_ASCII_LACKING if head.isascii() else _LACKING).search(head)
        ):
            given = answers_to[index]
            if given is not None and given >= 0 and given != graph.task_step:
                found[given] = 1.0
    return found


# (the words behind one word boundary: the regex tries each word's start once, not once per word)
_ASKS = re.compile(
    r"\?\s*$|```|\b(?:(?:please|implement|next|then|retry|wait)\b"
    # work the message itself announces: "I will retry", "let me check", "I'll wait"
    r"|(?:i|we) (?:will|shall|am going to|are going to)\b|(?:i'll|we'll|let me|let us)\b"
    # work the message itself lists as left: "Still to find: ...", "remaining", "not yet"
    r"|still (?:to|need)|(?:remaining|not yet|left to)\b)",
    re.IGNORECASE | re.MULTILINE,
)
_ASKS_LOWER = re.compile(_ASKS.pattern, re.MULTILINE)  # the same for the lower-cased text


def _stops(text: str) -> bool:
    """A stop word in a message's tail (the plain tests rule out most messages before the regex)."""
    tail = text[-STOP_CHARS:]
    return ("TERMINATE" in tail or "STOP" in tail) and _STOP.search(tail) is not None


def _pending_work(text: str, is_request: bool) -> bool:
    """A message that stops the run while leaving work for others: the request itself, code to run,
    a plan, a question or an instruction before the stop word (a closing summary leaves none)."""
    if is_request:
        return True
    before = _STOP.split(text[-1500:])[0]
    lowered = lowered_for_matching(before)
    return bool(_ASKS.search(before) if lowered is None else _ASKS_LOWER.search(lowered))


def _reassigned(text: str) -> bool:
    """A name given two different constant values in one message: it contradicts itself."""
    if not _GIVES_A_NUMBER.search(text):
        return False  # (the line-by-line regex tries every character; most code assigns no number)
    values: dict[str, str] = {}
    for name, value in _ASSIGN_VALUE.findall(text):
        if values.setdefault(name, value) != value:
            return True
    return False


def _answered(graph: RunGraph) -> list[int | None]:
    """Per step, the message it answers: the closest earlier message by another agent after the task's
    step (-1: the task, where the task's step comes first, or nothing does and the task is recorded;
    else None). One pass over the run, not a walk back from every step."""
    unanswered = -1 if graph.trajectory.task.input else None
    found: list[int | None] = []
    latest: int | None = None  # the latest message since the task's step
    other: int | None = None  # the latest message since then by another agent than the latest's
    for step in graph.steps:
        if latest is not None and graph.steps[latest].agent != step.agent:
            found.append(latest)
        else:
            found.append(other if other is not None else unanswered)
        if step.index == graph.task_step:
            latest = other = None  # what came before the task's step is not what a step answers
            unanswered = -1
        elif step.kind == StepKind.MESSAGE:
            if latest is not None and graph.steps[latest].agent != step.agent:
                other = latest
            latest = step.index
    return found


def _call_of_result(calls: list[ToolCall], tool_name: str | None) -> ToolCall | None:
    """The call a result answers, among the calls of the message behind it (by tool name)."""
    if not calls:
        return None
    return next((call for call in reversed(calls) if call.name == tool_name), calls[-1])


def _expression_argument(call: ToolCall) -> float | None:
    """The value of a call's first argument that is an arithmetic expression (a calculator's)."""
    arguments = call.arguments.values() if isinstance(call.arguments, dict) else [call.arguments]
    for value in arguments:
        if isinstance(value, str):
            expected = expression_value(value)
            if expected is not None:
                return expected
    return None


def _contradicts(call: ToolCall, result: str) -> bool:
    """A result that does not follow from its call: a calculator's expression whose value it does not
    print, or an identifier the call asked for that the result answers with another."""
    expected = _expression_argument(call)
    if expected is not None:
        printed = numbers_in(result)
        return bool(printed) and not agrees(expected, printed)
    arguments = call.arguments if isinstance(call.arguments, dict) else {"": call.arguments}
    answered = parse_json(result)
    if not isinstance(answered, dict):
        return False
    asked = keyed_values(arguments)
    echoed = keyed_values(answered)
    return any(key in echoed and echoed[key] != value for key, value in asked.items())


_IDENTIFIER_MARKS = frozenset("-#@._")


def _is_identifier(atom: str) -> bool:
    """An atom that names something (C-1348, #W9031525, 2024-03-28, jonas_berg_1333), not a value:
    identifiers are looked up or passed on, never worked out, so one nothing gave was made up."""
    if is_value(atom) and atom.replace(".", "", 1).isdigit():
        return False
    return not _IDENTIFIER_MARKS.isdisjoint(atom) or len(atom) >= 6


@dataclass
class _AtomsReading:
    identifiers: dict[int, float] = field(default_factory=dict)  # novel_identifier
    novel_calls: dict[int, float] = field(default_factory=dict)  # novel_call_value
    contradicted: dict[int, float] = field(default_factory=dict)  # result_contradicts_call
    failed_calls: dict[int, float] = field(default_factory=dict)  # caused_failing_result


# a message saying the call it just made failed (lower-cased head; where no result step was recorded)
_CALL_FAILED = re.compile(
    r"\b(?:encountered an error|an error occurred|error:|failed|does not exist|doesn't exist|don't exist"
    r"|not a valid tool|invalid (?:tool|argument|input)|not available)\b"
)


def _atoms_read(graph: RunGraph) -> _AtomsReading:
    """One pass over the numbers and identifiers of every step, in order: per message, the
    identifiers it is first to state (``novel_identifier``) and the share of its calls' argument
    values nothing before it gave (``novel_call_value``); per tool result, whether it contradicts its
    call; per call whose result was not recorded as a step, whether its agent's next message says it
    failed."""
    steps = graph.steps
    calls = {
        index: found
        for index in graph.candidates
        if steps[index].kind == StepKind.MESSAGE and (found := tool_calls(steps[index].content))
    }
    # a number is never an identifier: only the calls' arguments are checked against the numbers seen
    with_numbers = bool(calls)
    seen = set(atoms_of(graph.trajectory.task.input or "", with_numbers=with_numbers))
    # what the agents had seen, as text (for one-word arguments), the run's agents' names among it (a
    # delegation names its coworker: no value made up); only runs that make calls keep it
    known = [graph.trajectory.task.input or "", *graph.trajectory.agents]
    history = [text.lower() for text in known] if calls else []
    found = _AtomsReading()
    identifiers, novel, contradicted = found.identifiers, found.novel_calls, found.contradicted
    candidates = set(graph.candidates)
    for step in steps:
        atoms = atoms_of(graph.texts[step.index], with_numbers=with_numbers)
        if step.index in calls:
            arguments = [atom for call in calls[step.index] for atom in argument_atoms(call)]
            fresh = [atom for atom in arguments if atom not in seen]
            words = [word for call in calls[step.index] for word in argument_words(call)]
            if words:  # (a one-word argument holds no space: in the texts joined, it is found in one)
                said = " ".join(history)
                fresh += [word for word in words if word not in said]
            if fresh:
                novel[step.index] = min(1.0, len(fresh) / 2)
        elif step.kind == StepKind.TOOL and graph.call_of.get(step.index) in calls:
            call = _call_of_result(calls[graph.call_of[step.index]], step.tool_name)
            if call is not None and _contradicts(call, step.content):
                contradicted[step.index] = 1.0
        if step.kind == StepKind.MESSAGE and step.index in candidates and step.index != graph.task_step:
            made_up = {atom for atom in atoms if atom not in seen and _is_identifier(atom)}
            if made_up:
                identifiers[step.index] = min(1.0, len(made_up) / 2)
        seen.update(atoms)
        if calls:
            history.append(graph.texts[step.index].lower())
    for index in calls:
        after = index + 1
        if (
            after < len(steps)
            and steps[after].kind == StepKind.MESSAGE
            and steps[after].agent == steps[index].agent
            and _CALL_FAILED.search(steps[after].content[:LACKING_CHARS].lower())
        ):
            found.failed_calls[index] = 1.0
    return found


_OPERATIONS = (
    lambda a, b: a + b,
    lambda a, b: a - b,
    lambda a, b: b - a,
    lambda a, b: a * b,
    lambda a, b: a / b if b else None,
    lambda a, b: b / a if a else None,
)


def _derived(value: str, numbers: list[str]) -> bool:
    """Whether ``value`` is one arithmetic step from two of ``numbers`` (a sum, difference, product or
    ratio of values at hand: worked out, not made up)."""
    try:
        target = float(value)
    except ValueError:
        return False
    values = []
    for number in dict.fromkeys(numbers):
        if number != value:
            try:
                operand = float(number)
            except ValueError:
                continue
            if abs(operand) > SMALL_OPERAND or "." in number:
                values.append(operand)
    values = values[:16]
    decimals = len(value.split(".")[1]) if "." in value else 0
    tolerance = 0.5 * 10**-decimals + 1e-9 * max(1.0, abs(target))
    for position, first in enumerate(values):
        for second in values[position:]:
            for operation in _OPERATIONS:
                found = operation(first, second)
                if found is not None and abs(found - target) <= tolerance:
                    return True
    return False


_WRITTEN_EXPRESSION = re.compile(r"[(\d][\d.,()\s]*[-+*/×][\d.,()\s+\-*/×]*\d\)?")
MAX_EXPRESSIONS = 12


def _expression_values(text: str) -> list[float]:
    """The values of the arithmetic expressions a text writes out ("compute 6*7", "`(90 + 50) / 2`")."""
    found = []
    for match in _WRITTEN_EXPRESSION.finditer(text[:3000]):
        value = expression_value(match.group(0).replace("×", "*").replace(",", ""))
        if value is not None:
            found.append(value)
            if len(found) >= MAX_EXPRESSIONS:
                break
    return found


def agrees_any(token: str, values: list[float]) -> bool:
    """Whether a stated value is one of ``values`` (as printed)."""
    return any(agrees(value, [token]) for value in values)


def _answer_unsupported(graph: RunGraph, made_up: dict[int, float]) -> float:
    """The share of the answer's values that first appear in the step stating it and do not follow
    from the values at hand there (the answer itself is where they were made up); an identifier the
    answer is first to state (``made_up``: nothing before gave it) counts in full."""
    index = graph.answer_step
    if index is None or graph.steps[index].kind != StepKind.MESSAGE:
        return 0.0
    if made_up.get(index):
        return 1.0
    values = {token for token in graph.answer_tokens & graph.tokens[index] if is_value(token)}
    if not values:
        return 0.0
    fresh = [token for token in values if graph.origin.get(token) == index]
    if not fresh:
        return 0.0
    at_hand = list(graph.numbers[index])
    stated: list[float] = []  # what the expressions written in the answer and its inputs come to
    for used in range(index, max(-1, index - ANSWER_INPUTS - 1), -1):
        if used != index:
            at_hand += graph.numbers[used]
        stated += _expression_values(graph.texts[used])
    unsupported = [token for token in fresh if not _derived(token, at_hand) and not agrees_any(token, stated)]
    return len(unsupported) / len(values)


def _computes(result: Step, call_text: str) -> bool:
    """Whether a result is computed by its call: code's output, or a tool called with an arithmetic
    expression."""
    if result.kind == StepKind.CODE_EXECUTION:
        return True
    return any(_expression_argument(call) is not None for call in tool_calls(call_text))


def _origin_to_calls(graph: RunGraph, features: dict[str, dict[int, float]]) -> None:
    """Computed output is its computation's: where the answer's values first appear in what code
    printed or a calculator returned (and nothing failed there: no failing dependency, no
    contradiction), they originate in the code or the expression that computed them. A lookup's
    values are the world's, not the request's: they stay where they are."""
    origins = features["answer_origin"]
    for index in [index for index in origins if graph.steps[index].kind != StepKind.MESSAGE]:
        call = graph.call_of.get(index)
        if (
            call is None
            or not _computes(graph.steps[index], graph.steps[call].content)
            or index in features["dependency"]
            or index in features["result_contradicts_call"]
            or index in features["result_error"]
        ):
            continue
        origins[call] = min(1.0, origins.get(call, 0.0) + origins.pop(index))


def read_causally(
    trajectory: Trajectory,
    graph: RunGraph | None = None,
    *,
    whole_lowers: Sequence[str | None] | None = None,
) -> CausalReading:
    """The causal features of every candidate step (see the module docstring). ``whole_lowers``: each
    step's whole text lower-cased where already at hand (else None)."""
    graph = graph or build_graph(trajectory)
    steps = trajectory.steps
    features: dict[str, dict[int, float]] = {name: {} for name in CAUSAL_FEATURES}
    dependency_at = _dependencies(trajectory, graph)
    lowers = {index: _lowered(graph, index, whole_lowers) for index in graph.candidates}
    # whether a step states an answer (a recorded final output may be whatever the last step said)
    answered = any(map(says_an_answer, lowers.values()))
    failed_results = {
        step.index
        for step in steps
        if step.kind != StepKind.MESSAGE and (step.is_error or _fails_hard(graph.texts[step.index]))
    }
    starts = [graph.answer_step] if graph.answer_step is not None else []
    starts += sorted(failed_results | set(dependency_at))
    path = graph.ancestors(starts)
    # the answer's values when it states any (what makes an answer wrong), else all its tokens
    traced = {token for token in graph.answer_tokens if is_value(token)} or graph.answer_tokens
    answer_count = len(traced)
    answer_origins = Counter(graph.origin.get(token) for token in traced)
    last_message = max(
        (index for index in graph.candidates if steps[index].kind == StepKind.MESSAGE), default=None
    )
    first_unsupported_seen = False
    statements: dict[int, list[set[str]]] = {}
    answers_to = _answered(graph)
    for index in graph.candidates:
        step = steps[index]
        text = graph.texts[index]
        novel = graph.novel[index]
        is_message = step.kind == StepKind.MESSAGE
        values = {token for token in novel if is_value(token)}
        if novel:
            share = min(1.0, len(novel) / 5)
            features["novel" if is_message else "novel_result"][index] = share
        if values and is_message:
            features["novel_value"][index] = min(1.0, len(values) / 2)
        if answer_count and index != graph.answer_step:
            origin = answer_origins.get(index, 0)
            if origin:
                features["answer_origin"][index] = origin / answer_count
        if index in path:
            features["on_path"][index] = 1.0
            if is_message and values and not first_unsupported_seen:
                features["first_unsupported"][index] = 1.0
                first_unsupported_seen = True
        if index == graph.answer_step:
            features["answer_step"][index] = 1.0
        stops = _stops(text)
        if index < len(steps) - _LAST_STEPS and stops:
            features["stop_mid_run"][index] = 1.0  # the run went on past a stop: it was cut or derailed
        if is_message:
            dropped = _dropped_input(graph, lowers[index], answers_to[index], statements)
            if dropped:
                features["dropped_input"][index] = dropped
            lower = lowers[index][:3000]
            overrides = ("correction" in lower and _CORRECTION_LINE.search("\n" + lower)) or (
                any(map(lower.__contains__, _OVERRIDE_KEYS)) and _OVERRIDE.search(lower)
            )
            if overrides or ("=" in text and _reassigned(text[:3000])):
                features["override"][index] = 1.0
            if stops:
                recent = range(index - 1, max(-1, index - 3), -1)
                pending = _pending_work(text, index == graph.task_step)
                if not answered and index == last_message and pending:
                    features["unanswered_stop"][index] = 1.0
                elif any(earlier in failed_results or earlier in dependency_at for earlier in recent):
                    features["explained_stop"][index] = 1.0
        else:
            if _STOP_LINE.search(text.rstrip()[-400:]):
                features["stop_in_result"][index] = 1.0
            call = graph.call_of.get(index)
            if index in dependency_at:
                features["dependency"][index] = 1.0
                if call is not None:
                    features["calls_failed_dependency"][call] = 1.0
            elif index in failed_results:
                features["result_error"][index] = 1.0
                call_text = graph.texts[call] if call is not None else ""
                if call is not None and printed_numbers(call_text) is not None:
                    # arithmetic that cannot fail did: the executor failed, not the code
                    features["dependency"][index] = 0.5
                elif call is not None:
                    features["caused_failing_result"][call] = 1.0
            elif step.kind == StepKind.CODE_EXECUTION and graph.call_of.get(index) is not None:
                expected = printed_numbers(graph.texts[graph.call_of[index]])
                if expected is not None and expected != set(graph.numbers[index]):
                    features["result_contradicts_call"][index] = 1.0
    for index, value in _dropped_task(graph).items():
        features["dropped_task"][index] = value
    cut_short = _task_cut_short(graph)
    if cut_short is not None:
        features["dropped_task"][cut_short] = 1.0
    features["input_found_lacking"].update(_found_lacking(graph, lowers, answers_to))
    said, against, named = read_testimony(graph.trajectory, lowers)
    features["testimony"].update(said)
    features["testified_wrong"].update(against)
    atoms = _atoms_read(graph)
    features["novel_identifier"].update(atoms.identifiers)
    features["novel_call_value"].update(atoms.novel_calls)
    features["result_contradicts_call"].update(atoms.contradicted)
    features["caused_failing_result"].update(atoms.failed_calls)
    _origin_to_calls(
        graph, features
    )  # (once every contradiction is known: a result contradicting its call keeps it)
    unsupported_answer = _answer_unsupported(graph, atoms.identifiers)
    if unsupported_answer and graph.answer_step is not None:
        features["answer_unsupported"][graph.answer_step] = unsupported_answer
    for index in dependency_at:  # a failing call recorded under the agent's own step (spans)
        if steps[index].kind == StepKind.MESSAGE:
            features["dependency"][index] = 1.0
    return CausalReading(graph, features, path, dependency_at, named)


__all__ = ["CAUSAL_FEATURES", "CausalReading", "read_causally", "tokens_of"]
