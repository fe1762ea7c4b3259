"""The faults ``otel-blame inject`` plants, each a pure text transformation of one message.

Every kind says which messages it applies to (:func:`applies`) and how it changes one
(:func:`apply_fault`, deterministic for a given ``random.Random``). The transformations are
general (numbers, numbered instructions, code blocks, tool output), not tied to one app.
"""

from __future__ import annotations

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


FAULT_KINDS: tuple[FaultKind, ...] = tuple(FaultKind)
TOOL_KINDS = ("tool", "code_execution")
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


@dataclass(frozen=True)
class Injected:
    """The changed text and a one-line description of what changed (the dataset's mistake reason)."""

    text: str
    description: str


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


def applies(kind: FaultKind, text: str, step_kind: str, *, last: bool = False) -> bool:
    """Whether ``kind`` can change this message (``last``: the run's final message)."""
    is_tool = step_kind in TOOL_KINDS
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


def apply_fault(kind: FaultKind, text: str, rng: random.Random) -> Injected:
    """The message with the fault planted; raises ValueError when ``kind`` cannot change ``text``."""
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
