"""What each step of a run used: the values, names and phrases it repeats from earlier steps (or from
the task), and for a tool or code result the call that produced it.

A step's *tokens* are the distinctive bits of its text: numbers (``4.50`` and ``4.5`` are one value),
quoted phrases, capitalised names inside sentences and the names code assigns. A token's *origin* is
the first step that carried it (``TASK`` for the task itself). A step uses the origins of its tokens;
a result uses the call behind it. Nothing here knows agent names or positions: only who wrote what,
in which order, and what repeats.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from otel_blame.attribution.systemic import states_an_answer
from otel_blame.trajectory import Step, StepKind, Trajectory

TASK = -1
# what is read of a long step (a relayed page, a file): its head and tail, so a step costs bounded time
HEAD_CHARS = 2000
TAIL_CHARS = 600
MAX_NUMBERS = 40  # per step: a table of figures adds nothing after the first rows
NUMBER_SCAN_CHARS = 2000
ANSWER_LOOKBACK = 3  # the messages at the run's end where its answer may be stated

# a number: starts with a digit (so the scan jumps from digit to digit) not preceded by a word
# character or a dot, not followed by one
_VALUE_PATTERN = r"\d(?<![\w.]\d)[\d,]*(?:\.\d+)?(?!\w)"
_VALUE = re.compile(_VALUE_PATTERN)
# the same for ASCII text, where \d and \w mean the same either way and ASCII ones are plain table
# look-ups (most steps are ASCII; the others keep Unicode digits and letters)
_ASCII_VALUE = re.compile(_VALUE_PATTERN, re.ASCII)
# list markers ("2. " at a line's start) and exit codes: each read from the newline before it (the
# text is read with a newline in front), so the scan jumps from line to line instead of trying a
# line start at every character
_NOT_VALUES = re.compile(r"\n(?:[ \t]*\d+[.)][ \t]|exit ?code:? ?\d+)", re.IGNORECASE)
_QUOTED = re.compile(r"[\"“]([^\"”\n]{3,60})[\"”]")
# the same where no “ is: opening on one character, the scan jumps from quote to quote
_PLAIN_QUOTED = re.compile(r"\"([^\"”\n]{3,60})[\"”]")
# a name after a lower-case word, a number or punctuation: the scan jumps from space to space (the
# character before it is checked behind), which is what makes it cheap
_NAME = re.compile(r" (?<=[a-z0-9,;:(] )([A-Z][a-zA-Z]{2,}(?: [A-Z][a-zA-Z]{2,})*)")
# the name before an "=" (within NAME_BEFORE_CHARS): read backwards from the "=" over blanks and the
# word before them (a forward search would try every start in the window), from its first letter
NAME_BEFORE_CHARS = 40
_WORD_BEFORE_REVERSED = re.compile(r"[ \t]*(\w+)")
_NAME_START = re.compile(r"[A-Za-z_]")
_CODE_BLOCK = re.compile(r"```")
_STOPPED = re.compile(r"\bTERMINATE\b|\bSTOP\b")
_TERMINATE_ONLY = re.compile(r"^\W*(?:terminate|exit|done|ok(?:ay)?|thanks?(?: you)?)\W*$", re.IGNORECASE)


def window(text: str) -> str:
    """What is read of a step: all of it, or the head and tail of a very long one (a relayed page)."""
    if len(text) <= HEAD_CHARS + TAIL_CHARS:
        return text
    return text[:HEAD_CHARS] + "\n" + text[-TAIL_CHARS:]


def canonical_number(raw: str) -> str:
    """``1,250.50`` -> ``1250.5``: one spelling per value, so a repeated value is recognised."""
    value = raw.replace(",", "")
    if "." in value:
        value = value.rstrip("0").rstrip(".")
    return value or "0"


def numbers_in(text: str) -> list[str]:
    """The values a text states (at most ``MAX_NUMBERS``): not list markers ("2. ..." at a line's
    start), exit codes, or digits inside a word or an identifier."""
    lines = "\n" + text
    if _NOT_VALUES.search(lines):
        text = _NOT_VALUES.sub("\n ", lines)[1:]
    values = _ASCII_VALUE if text.isascii() else _VALUE
    # (a trailing comma the scan took goes with the others in canonical_number)
    return list(map(canonical_number, values.findall(text, 0, NUMBER_SCAN_CHARS)[:MAX_NUMBERS]))


def is_value(token: str) -> bool:
    return token[:1].isdigit()


def _assigned_names(text: str) -> list[str]:
    """Names given a value with ``name = ...`` (not ``==``, ``<=``, ``=>``)."""
    names = []
    position = text.find("=")
    while position != -1:
        if text[position + 1 : position + 2] not in ("=", ">") and text[position - 1 : position] not in (
            "=",
            "!",
            "<",
            ">",
        ):
            name = _name_before(text, position)
            if name:
                names.append(name)
        position = text.find("=", position + 1)
    return names


def _name_before(text: str, position: int) -> str | None:
    """The name ending (blanks aside) right before ``position``, or before a newline there, within
    ``NAME_BEFORE_CHARS``: from the first letter or underscore of the word there."""
    start = max(0, position - NAME_BEFORE_CHARS)
    end = position - 1 if position > start and text[position - 1] == "\n" else position
    found = _WORD_BEFORE_REVERSED.match(text[start:end][::-1])
    if found is None:
        return None
    word = found.group(1)[::-1]
    letter = _NAME_START.search(word)
    return word[letter.start() :] if letter else None


def tokens_of(text: str, numbers: list[str] | None = None) -> set[str]:
    """The distinctive bits of a text (see the module docstring); ``numbers`` when already read."""
    found = set(numbers_in(text) if numbers is None else numbers)
    if "“" in text:
        found.update(map(str.lower, _QUOTED.findall(text)))
    elif '"' in text:
        found.update(map(str.lower, _PLAIN_QUOTED.findall(text)))
    found.update(map(str.lower, _NAME.findall(text)))
    if "=" in text:
        found |= {f"={name}" for name in _assigned_names(text)}
    return found


def is_task_statement(step: Step, trajectory: Trajectory) -> bool:
    """A first step that opens with the task text is the request, not a suspect."""
    if step.index != 0:
        return False
    task = " ".join((trajectory.task.input or "").split()).lower()
    if not task:
        return False
    return " ".join(step.content[: len(task) + 400].split()).lower().startswith(task[:60])


@dataclass
class RunGraph:
    """One run read as a graph of uses (see the module docstring)."""

    trajectory: Trajectory
    texts: list[str]
    numbers: list[list[str]]
    tokens: list[set[str]]
    task_tokens: set[str]
    origin: dict[str, int]
    novel: list[set[str]]
    uses: list[set[int]]
    call_of: dict[int, int]
    candidates: list[int]
    task_step: int | None
    answer_step: int | None
    answer_tokens: set[str] = field(default_factory=set)

    @property
    def steps(self) -> list[Step]:
        return self.trajectory.steps

    def ancestors(self, starts: list[int]) -> set[int]:
        """Every step the given steps used, directly or through other steps (the starts included)."""
        seen: set[int] = set()
        stack = [start for start in starts if start >= 0]
        while stack:
            index = stack.pop()
            if index in seen:
                continue
            seen.add(index)
            stack.extend(used for used in self.uses[index] if used >= 0 and used not in seen)
        return seen


def _call_behind(steps: list[Step], result: Step, messages: set[int]) -> int | None:
    """The message that made a tool call or wrote the code a result answers: the closest earlier
    message, preferring one with a code block for code output (within a few steps)."""
    fallback = None
    for index in range(result.index - 1, max(-1, result.index - 6), -1):
        if index not in messages:
            continue
        if result.kind != StepKind.CODE_EXECUTION or _CODE_BLOCK.search(steps[index].content):
            return index
        if fallback is None:
            fallback = index
    return fallback


def _answer(
    trajectory: Trajectory, texts: list[str], tokens: list[set[str]], candidates: list[int]
) -> tuple[str, int | None]:
    """The run's answer text and the step that states it: the recorded final output and the last
    message that carries it (a closing "thanks" after it states nothing), else the last message with
    something in it."""
    messages = [index for index in reversed(candidates) if trajectory.steps[index].kind == StepKind.MESSAGE]
    last = messages[0] if messages else None
    final = trajectory.task.final_output
    if final:
        return final, _stating(final, messages, texts, tokens) or last
    if last is None or (_STOPPED.search(texts[last][-400:]) and not states_an_answer(texts[last])):
        return "", last  # the run was stopped before it answered: there is no answer to trace
    # the last message that states something: a closing "Looks right." after the answer states nothing
    stating = next(
        (
            index
            for index in messages[:ANSWER_LOOKBACK]
            if states_an_answer(texts[index]) or any(token[:1].isdigit() for token in tokens[index])
        ),
        last,
    )
    return texts[stating][-600:], stating


def _squeezed(text: str) -> str:
    return " ".join(text.lower().split())


def _stating(final: str, messages: list[int], texts: list[str], tokens: list[set[str]]) -> int | None:
    """The last of ``messages`` (latest first) that states ``final``: holds its text, or most of its
    values and names."""
    wanted = _squeezed(final)[:200]
    carried = tokens_of(final[:2000])
    for index in messages[:40]:
        if wanted and wanted in _squeezed(texts[index]):
            return index
        if carried and len(carried & tokens[index]) >= 0.6 * len(carried):
            return index
    return None


def build_graph(trajectory: Trajectory) -> RunGraph:
    """Read every step once: its tokens, which of them it was first to carry, what it used."""
    steps = trajectory.steps
    texts = [window(step.content) for step in steps]
    task_step = 0 if steps and is_task_statement(steps[0], trajectory) else None
    # the task as recorded; the message that delivered it is a step like any other (it may differ)
    task_tokens = tokens_of(trajectory.task.input or "")
    origin: dict[str, int] = dict.fromkeys(task_tokens, TASK)
    tokens: list[set[str]] = []
    numbers: list[list[str]] = []
    novel: list[set[str]] = []
    uses: list[set[int]] = []
    for step in steps:
        values = numbers_in(texts[step.index])
        found = tokens_of(texts[step.index], values)
        numbers.append(values)
        tokens.append(found)
        # one look-up per token: a fresh one originates here, another was used from where it did
        fresh: set[str] = set()
        used: set[int] = set()
        for token in found:
            first = origin.get(token)
            if first is None:
                fresh.add(token)
            else:
                used.add(first)
        origin.update(dict.fromkeys(fresh, step.index))
        novel.append(fresh)
        uses.append(used)
    candidates = [
        step.index for step in steps if step.content.strip() and not _TERMINATE_ONLY.match(step.content)
    ] or [step.index for step in steps]
    messages = {index for index in candidates if steps[index].kind == StepKind.MESSAGE}
    call_of: dict[int, int] = {}
    for step in steps:
        if step.kind != StepKind.MESSAGE:
            call = _call_behind(steps, step, messages)
            if call is not None:
                call_of[step.index] = call
                uses[step.index].add(call)
    answer_text, answer_step = _answer(trajectory, texts, tokens, candidates)
    answer_tokens = tokens_of(answer_text) | {n for n in numbers_in(answer_text) if n not in task_tokens}
    return RunGraph(
        trajectory=trajectory,
        texts=texts,
        numbers=numbers,
        tokens=tokens,
        task_tokens=task_tokens,
        origin=origin,
        novel=novel,
        uses=uses,
        call_of=call_of,
        candidates=candidates,
        task_step=task_step,
        answer_step=answer_step,
        answer_tokens=answer_tokens,
    )
