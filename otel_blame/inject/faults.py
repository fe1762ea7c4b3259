"""The faults ``otel-blame inject`` plants, each a pure transformation of one outgoing message.

Every kind says which messages it applies to (:func:`applies`) and how it changes one
(:func:`apply_fault`, deterministic for a given ``random.Random``). The transformations are
general (numbers, numbered instructions, code blocks, tool output, a tool call's JSON arguments
and tool name), not tied to one app. The message kinds are those of the message path: ``message``,
``tool`` / ``code_execution`` (a result), ``tool_call`` (a call before it runs: the text is its
JSON arguments) and ``handoff``.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from enum import StrEnum


class FaultKind(StrEnum):
    NUMBER = "number"  # a number in the message perturbed
    DROP_INSTRUCTION = "drop_instruction"  # one instruction (line, sentence) removed
    CONTRADICT_INSTRUCTION = "contradict_instruction"  # an instruction contradicting the message added
    TOOL_ERROR = "tool_error"  # a tool / code execution result replaced by an error
    WRONG_TOOL_RESULT = "wrong_tool_result"  # a tool / code execution result with a wrong value
    TERMINATE = "terminate"  # a premature TERMINATE
    WRONG_TOOL_ARGUMENT = "wrong_tool_argument"  # one argument of a tool call changed before it runs
    WRONG_TOOL = "wrong_tool"  # another tool of the run called with the same arguments
    SKIPPED_POLICY_STEP = "skipped_policy_step"  # a required check (verify, confirm, ...) left out
    IGNORED_TOOL_ERROR = "ignored_tool_error"  # the agent's acknowledgement of a failed tool call dropped
    FABRICATED_FACT = "fabricated_fact"  # an identifier or date the inputs never gave
    PREMATURE_HANDOFF = "premature_handoff"  # the agent hands over after its first sentence
    LOST_CONTEXT = "lost_context"  # the message cut short: what followed never reaches the others


FAULT_KINDS: tuple[FaultKind, ...] = tuple(FaultKind)
TOOL_KINDS = ("tool", "code_execution")  # results
CALL_KINDS = ("tool_call", "handoff")  # calls, offered before they run
HANDOFF_NOTE = "I am handing this over now."
TERMINATE_WORD = "TERMINATE"
TOOL_ERROR_TEXT = (
    "exitcode: 1 (execution failed)\nCode output: \nError: ConnectionError: "
    "the service did not answer (HTTP 503 Service Unavailable)"
)

_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.]*\w)")
_NUMBERED_LINE = re.compile(r"^\s*(\d+)[.)]\s+\S", re.MULTILINE)
_CODE_BLOCK = re.compile(r"```(?:python|py)?\n(?P<body>.*?)```", re.DOTALL)
_ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>.+)$", re.MULTILINE)
_SENTENCE = re.compile(r"[^.!?]+[.!?]+(?:\s+|$)")


_POLICY_WORD = re.compile(
    r"\b(?:verif(?:y|ied|ies)|confirm(?:ed|s|ation)?|authenticat\w*|check(?:ed|s)?|validat\w*|"
    r"approv\w*|ensure|policy|eligib\w*|consent)\b",
    re.IGNORECASE,
)
_ERROR_WORD = re.compile(
    r"\b(?:error|errors|failed|fails|failure|unavailable|timed out|timeout|retry|retrying|"
    r"could not|did not answer|503|429|500)\b",
    re.IGNORECASE,
)
_ERROR_RESULT = re.compile(
    r"exitcode:\s*[1-9]|Traceback|\bHTTP\s*(?:429|5\d\d)\b|\b(?:5\d\d|429)\s+(?:Service|Internal|Bad|"
    r"Gateway|Too)|\bTimeout\w*|timed out|\"error\"|\bError:",
    re.IGNORECASE,
)
# identifiers (ORD-1042, W2378156, #A17) and ISO dates: facts an agent repeats from its inputs
_FACT = re.compile(r"(?<![\w-])(?:#?[A-Z]{1,5}-?\d{3,}|\d{4}-\d{2}-\d{2})(?![\w-])")


@dataclass(frozen=True)
class Injected:
    """The changed text (and tool name, for a call) and a one-line description of what changed."""

    text: str
    description: str
    tool_name: str | None = None


def is_error_result(text: str) -> bool:
    """Whether a tool / code execution result reports a failure (an error, HTTP 429/5xx, a timeout)."""
    return bool(_ERROR_RESULT.search(text))


def _call_arguments(text: str) -> dict[str, object] | None:
    try:
        loaded = json.loads(text)
    except ValueError:
        return None
    return loaded if isinstance(loaded, dict) else None


def _changeable_arguments(arguments: dict[str, object]) -> list[str]:
    return [
        key
        for key, value in arguments.items()
        if (isinstance(value, int | float) and not isinstance(value, bool))
        or (isinstance(value, str) and value.strip())
    ]


def _units_matching(text: str, pattern: re.Pattern[str]) -> list[tuple[int, int]]:
    return [(start, end) for start, end in _instruction_units(text) if pattern.search(text[start:end])]


def _numbers(text: str) -> list[re.Match[str]]:
    """The numbers a fault may change: not list enumerators ("2. ..."), not an exit code."""
    skipped = set()
    for match in re.finditer(r"^\s*\d+[.)]\s|exitcode:\s*\d+", text, re.MULTILINE):
        skipped.update(range(match.start(), match.end()))
    return [m for m in _NUMBER.finditer(text) if m.start(1) not in skipped]


def _perturbed(value: str, rng: random.Random) -> str:
    """A clearly different number of the same form (integers stay integers)."""
    factor = rng.choice((0.5, 0.7, 1.3, 1.5, 2.0, 3.0))
    if "." in value:
        decimals = len(value.split(".")[1])
        new = round(float(value) * factor, decimals)
        if new == float(value):
            new = float(value) + 1
        return f"{new:.{decimals}f}"
    number = int(value)
    new_int = round(number * factor)
    return str(new_int if new_int != number else number + 1)


def _instruction_units(text: str) -> list[tuple[int, int]]:
    """Spans of removable instructions: code statements, numbered lines, or else sentences."""
    block = _CODE_BLOCK.search(text)
    if block:
        start = block.start("body")
        units = []
        offset = start
        for line in block["body"].splitlines(keepends=True):
            if line.strip() and not line.lstrip().startswith("#"):
                units.append((offset, offset + len(line)))
            offset += len(line)
        return units
    lines = [m for m in re.finditer(r"^.*(?:\n|$)", text, re.MULTILINE) if _NUMBERED_LINE.match(m.group())]
    if len(lines) >= 2:
        return [(m.start(), m.end()) for m in lines]
    sentences = [m for m in _SENTENCE.finditer(text) if m.group().strip()]
    return [(m.start(), m.end()) for m in sentences]


def applies(
    kind: FaultKind,
    text: str,
    step_kind: str,
    *,
    last: bool = False,
    tool_name: str | None = None,
    tools: tuple[str, ...] = (),
    after_error: bool = False,
) -> bool:
    """Whether ``kind`` can change this message.

    ``last``: the run's final message; ``tool_name``: the tool a call calls; ``tools``: the tools
    the run is known to call (the other choices of a wrong tool); ``after_error``: the sending
    agent's latest tool result in this run was a failure.
    """
    is_tool = step_kind in TOOL_KINDS
    if step_kind in CALL_KINDS:
        if kind is FaultKind.WRONG_TOOL_ARGUMENT:
            arguments = _call_arguments(text)
            return arguments is not None and bool(_changeable_arguments(arguments))
        if kind is FaultKind.WRONG_TOOL:
            return step_kind == "tool_call" and any(t != tool_name for t in tools)
        return False
    if kind in (FaultKind.WRONG_TOOL_ARGUMENT, FaultKind.WRONG_TOOL):
        return False
    if kind is FaultKind.SKIPPED_POLICY_STEP:
        return (
            not is_tool and len(_instruction_units(text)) >= 2 and bool(_units_matching(text, _POLICY_WORD))
        )
    if kind is FaultKind.IGNORED_TOOL_ERROR:
        units = _instruction_units(text)
        return (
            not is_tool
            and after_error
            and len(units) >= 2
            and 0 < len(_units_matching(text, _ERROR_WORD)) < len(units)
        )
    if kind is FaultKind.FABRICATED_FACT:
        return not is_tool and bool(_FACT.search(text))
    if kind is FaultKind.PREMATURE_HANDOFF:
        return not is_tool and not last and len(_instruction_units(text)) >= 3
    if kind is FaultKind.LOST_CONTEXT:
        return not last and len(_instruction_units(text)) >= 4
    if kind is FaultKind.NUMBER:
        return bool(_numbers(text))
    if kind is FaultKind.DROP_INSTRUCTION:
        return not is_tool and len(_instruction_units(text)) >= 2
    if kind is FaultKind.CONTRADICT_INSTRUCTION:
        return not is_tool and not last and (bool(_numbers(text)) or bool(_CODE_BLOCK.search(text)))
    if kind is FaultKind.TOOL_ERROR:
        return is_tool
    if kind is FaultKind.WRONG_TOOL_RESULT:
        return is_tool and bool(_numbers(text))
    if kind is FaultKind.TERMINATE:
        return not last and TERMINATE_WORD not in text
    raise ValueError(f"unknown fault kind {kind!r}")


def apply_fault(
    kind: FaultKind,
    text: str,
    rng: random.Random,
    *,
    tool_name: str | None = None,
    tools: tuple[str, ...] = (),
) -> Injected:
    """The message with the fault planted; raises ValueError when ``kind`` cannot change ``text``."""
    if kind is FaultKind.WRONG_TOOL_ARGUMENT:
        return _wrong_argument(text, rng)
    if kind is FaultKind.WRONG_TOOL:
        others = sorted({t for t in tools if t != tool_name})
        if not others:
            raise ValueError(f"{kind}: no other tool to call")
        chosen = rng.choice(others)
        return Injected(text, f"the wrong tool was called: {chosen} instead of {tool_name}", tool_name=chosen)
    if kind is FaultKind.SKIPPED_POLICY_STEP:
        units = _units_matching(text, _POLICY_WORD)
        if not units or len(_instruction_units(text)) < 2:
            raise ValueError(f"{kind}: the message states no check to skip")
        start, end = rng.choice(units)
        return Injected(
            text[:start] + text[end:], f"a required check was skipped: {text[start:end].strip()[:120]!r}"
        )
    if kind is FaultKind.IGNORED_TOOL_ERROR:
        units = _units_matching(text, _ERROR_WORD)
        if not units or len(units) == len(_instruction_units(text)):
            raise ValueError(f"{kind}: the message does not acknowledge an error")
        kept = text
        for start, end in reversed(units):
            kept = kept[:start] + kept[end:]
        dropped = " ".join(text[s:e].strip() for s, e in units)
        return Injected(kept, f"the tool error was ignored: dropped {dropped[:120]!r}")
    if kind is FaultKind.FABRICATED_FACT:
        found = list(_FACT.finditer(text))
        if not found:
            raise ValueError(f"{kind}: the message states no identifier or date")
        match = rng.choice(found)
        fabricated = _fabricated(match.group(), rng)
        changed = text[: match.start()] + fabricated + text[match.end() :]
        return Injected(changed, f"a fabricated fact: {match.group()} became {fabricated}")
    if kind is FaultKind.PREMATURE_HANDOFF:
        units = _instruction_units(text)
        if len(units) < 3:
            raise ValueError(f"{kind}: the message is too short to cut")
        cut = units[0][1]
        return Injected(
            f"{text[:cut].rstrip()}\n{HANDOFF_NOTE}",
            f"a premature hand-off after the first of {len(units)} parts",
        )
    if kind is FaultKind.LOST_CONTEXT:
        units = _instruction_units(text)
        if len(units) < 4:
            raise ValueError(f"{kind}: the message is too short to lose part of it")
        keep = max(1, len(units) * rng.choice((1, 2)) // 4)
        cut = units[keep - 1][1]
        return Injected(
            text[:cut].rstrip(), f"the message was truncated: {len(units) - keep} of {len(units)} parts lost"
        )
    if kind in (FaultKind.NUMBER, FaultKind.WRONG_TOOL_RESULT):
        found = _numbers(text)
        if not found:
            raise ValueError(f"{kind}: the message has no number")
        match = rng.choice(found)
        new = _perturbed(match.group(1), rng)
        changed = text[: match.start(1)] + new + text[match.end(1) :]
        what = "tool result" if kind is FaultKind.WRONG_TOOL_RESULT else "number"
        return Injected(changed, f"a wrong {what}: {match.group(1)} became {new}")
    if kind is FaultKind.DROP_INSTRUCTION:
        units = _instruction_units(text)
        if len(units) < 2:
            raise ValueError(f"{kind}: the message has fewer than two instructions")
        start, end = rng.choice(units)
        dropped = text[start:end].strip()
        return Injected(text[:start] + text[end:], f"an instruction was dropped: {dropped[:120]!r}")
    if kind is FaultKind.CONTRADICT_INSTRUCTION:
        return _contradict(text, rng)
    if kind is FaultKind.TOOL_ERROR:
        return Injected(TOOL_ERROR_TEXT, "the tool result was replaced by an error (HTTP 503)")
    if kind is FaultKind.TERMINATE:
        return Injected(f"{text.rstrip()}\n{TERMINATE_WORD}", "a premature TERMINATE ended the run")
    raise ValueError(f"unknown fault kind {kind!r}")


def _contradict(text: str, rng: random.Random) -> Injected:
    block = _CODE_BLOCK.search(text)
    if block:
        assignments = list(_ASSIGNMENT.finditer(block["body"]))
        numeric = [a for a in assignments if _numbers(a["value"])]
        if numeric:
            target = rng.choice(numeric)
            value_numbers = _numbers(target["value"])
            number = rng.choice(value_numbers)
            new_value = (
                target["value"][: number.start(1)]
                + _perturbed(number.group(1), rng)
                + target["value"][number.end(1) :]
            )
            line = f"{target['name']} = {new_value}\n"
            body_end = block.end("body")
            # the override goes right after the assignment it contradicts
            insert_at = block.start("body") + target.end() + 1
            insert_at = min(insert_at, body_end)
            changed = text[:insert_at] + line + text[insert_at:]
            return Injected(changed, f"a contradicting statement was added: {line.strip()!r}")
    numbered = [m for m in re.finditer(r"^\s*(\d+)[.)]\s+\S.*$", text, re.MULTILINE)]
    found = _numbers(text)
    if numbered and (not found or rng.random() < 0.5):
        line = rng.choice(numbered)
        addition = f"Correction: skip step {line.group(1)}."
    elif found:
        match = rng.choice(found)
        addition = f"Correction: {match.group(1)} should be {_perturbed(match.group(1), rng)}."
    else:
        raise ValueError("contradict_instruction: nothing in the message to contradict")
    return Injected(f"{text.rstrip()}\n{addition}", f"a contradicting instruction was added: {addition!r}")


def _wrong_argument(text: str, rng: random.Random) -> Injected:
    arguments = _call_arguments(text)
    keys = _changeable_arguments(arguments) if arguments is not None else []
    if arguments is None or not keys:
        raise ValueError("wrong_tool_argument: the call has no argument to change")
    key = rng.choice(keys)
    value = arguments[key]
    if isinstance(value, int | float):
        new: object = (
            type(value)(_perturbed(str(value), rng))
            if isinstance(value, int)
            else float(_perturbed(str(value), rng))
        )
    else:
        assert isinstance(value, str)
        new = _changed_string(value, rng)
    changed = {**arguments, key: new}
    return Injected(json.dumps(changed), f"a wrong tool argument: {key}={value!r} became {new!r}")


def _changed_string(value: str, rng: random.Random) -> str:
    """A different value of the same shape: a digit run changed, else a word dropped or replaced."""
    digits = list(re.finditer(r"\d+", value))
    if digits:
        match = rng.choice(digits)
        replacement = _perturbed(match.group(), rng).zfill(len(match.group()))
        return value[: match.start()] + replacement + value[match.end() :]
    words = value.split()
    if len(words) >= 2:
        del words[rng.randrange(len(words))]
        return " ".join(words)
    return value[::-1] if value[::-1] != value else f"{value}_old"


def _fabricated(token: str, rng: random.Random) -> str:
    """An identifier or date of the same shape with different digits (a date stays a valid date)."""
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", token):
        year, month, day = (int(part) for part in token.split("-"))
        day = (day + rng.randint(3, 20) - 1) % 28 + 1
        month = (month + rng.randint(0, 2) - 1) % 12 + 1
        return f"{year:04d}-{month:02d}-{day:02d}"
    positions = [i for i, c in enumerate(token) if c.isdigit()]
    chars = list(token)
    for position in rng.sample(positions, k=min(2, len(positions))):
        chars[position] = str((int(chars[position]) + rng.randint(1, 9)) % 10)
    fabricated = "".join(chars)
    return fabricated if fabricated != token else token[:-1] + str((int(token[-1]) + 1) % 10)
