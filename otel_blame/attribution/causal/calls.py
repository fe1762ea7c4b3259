"""Tool calls inside a step's text, and the values their arguments carry.

Every source writes a call the same way (``tool_call NAME(ARGUMENTS)``, the conventions layer's and
the loaders' rendering; the arguments usually JSON). A call's arguments are what the agent chose to
send: each identifier or number in them should come from somewhere the agent could see (the task,
an earlier message, an earlier result). One that first appears in the call is the agent's own
invention, and an early, decisive one: the tool then works on the wrong thing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from otel_blame.attribution.causal.graph import canonical_number

_CALL = re.compile(r"tool_call ([^\s(][^(\n]{0,80}?)\(")  # names may hold spaces (CrewAI's tools)
# the atoms of a text worth checking: numbers, identifiers with a digit (ORD-1042, #W9031525,
# user_id_17, an e-mail), not plain words (a query's words are the agent's own)
# an atom is read from its first digit on (a regex that starts with a digit lets the scan jump from
# digit to digit), then extended back over the identifier characters before it
# 1,250.50 whole: its commas go after. (Written as runs of a character class between the commas:
# the same matches as a repeated alternative, which the regex engine steps through a character at a
# time)
_FROM_DIGIT_PATTERN = r"\d[\w\-@.]*(?:,(?=\d{3})[\w\-@.]*)*"
_FROM_DIGIT = re.compile(_FROM_DIGIT_PATTERN)
_ASCII_FROM_DIGIT = re.compile(_FROM_DIGIT_PATTERN, re.ASCII)  # the same on ASCII text, and faster
_IDENTIFIER_CHARS = frozenset("_-@.#")
MAX_ATOM_CHARS = 200
ATOM_SCAN_CHARS = 20_000
_DECODER = json.JSONDecoder()
MAX_ATOMS = 12


@dataclass(frozen=True)
class ToolCall:
    """One call: the tool's name and its arguments (a dict when they were a JSON object)."""

    name: str
    arguments: Any


def tool_calls(text: str) -> list[ToolCall]:
    """The calls written in a step's text, in order (none when it holds no ``tool_call``)."""
    if "tool_call " not in text:
        return []
    found = []
    for match in _CALL.finditer(text):
        start = match.end()
        arguments: Any
        try:
            arguments, end = _DECODER.raw_decode(text, start)
            if text[end : end + 1] != ")":
                raise ValueError
        except ValueError:
            close = text.find(")\n", start)
            arguments = text[start : close if close != -1 else len(text.rstrip()) - 1]
        found.append(ToolCall(match.group(1), arguments))
    return found


def _scalars(value: Any, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(key, scalar) pairs of a JSON value, nested keys flattened to their last name."""
    if depth > 6:
        return
    if isinstance(value, dict):
        for key, inner in value.items():
            if isinstance(inner, dict | list):
                yield from _scalars(inner, depth + 1)
            else:
                yield str(key), inner
    elif isinstance(value, list):
        for inner in value[:20]:
            yield from _scalars(inner, depth + 1)
    elif value is not None:
        yield "", value


def atoms_of(text: str, *, with_numbers: bool = True) -> list[str]:
    """The numbers (canonical spelling) and identifiers with a digit in ``text``, lower-cased; only
    the identifiers without ``with_numbers``."""
    text = text[:ATOM_SCAN_CHARS]
    atoms = []
    for match in (_ASCII_FROM_DIGIT if text.isascii() else _FROM_DIGIT).finditer(text):
        start, word = match.start(), match.group(0)
        if start and (text[start - 1].isalnum() or text[start - 1] in _IDENTIFIER_CHARS):
            begin, lowest = start - 1, max(0, start - MAX_ATOM_CHARS)
            while begin > lowest and (text[begin - 1].isalnum() or text[begin - 1] in _IDENTIFIER_CHARS):
                begin -= 1
            word = text[begin:start] + word
        word = word.rstrip(".-@").replace(",", "")
        if word.replace(".", "", 1).isdigit():
            if with_numbers:
                atoms.append(canonical_number(word))
        elif len(word) >= 3:
            atoms.append(word.lower())
    return atoms


def argument_atoms(call: ToolCall) -> list[str]:
    """The values of a call's arguments to check against what the agent had seen (``atoms_of`` of
    each argument)."""
    atoms: list[str] = []
    for _, value in _scalars(call.arguments):
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            atoms.append(canonical_number(repr(value)))
        else:
            atoms.extend(atoms_of(str(value)))
        if len(atoms) >= MAX_ATOMS:
            break
    return atoms[:MAX_ATOMS]


def argument_words(call: ToolCall) -> list[str]:
    """A call's one-word text arguments (a region, a code, a name: no spaces), lower-cased: each
    should appear, as it is, in something the agent saw. Phrases (a search query) are the agent's
    own wording and are not checked."""
    words = []
    for _, value in _scalars(call.arguments):
        if isinstance(value, str):
            word = value.strip().lower()
            if 2 <= len(word) <= 40 and " " not in word and any(ch.isalpha() for ch in word):
                words.append(word)
    return words[:MAX_ATOMS]


def keyed_values(value: Any) -> dict[str, str]:
    """Identifier-like scalars by key (``{"order_id": "#W1"}`` -> ``{"order_id": "#w1"}``): what a
    result should echo of its call."""
    found: dict[str, str] = {}
    for key, inner in _scalars(value):
        if key and key not in found and isinstance(inner, str | int) and not isinstance(inner, bool):
            text = str(inner).strip().lower()
            if text and len(text) <= 80 and any(map(str.isdigit, text)):
                found[key] = text
    return found


def parse_json(text: str) -> Any:
    """A result's text as JSON, or None."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        return json.loads(stripped)
    except ValueError:
        return None
