"""Claims a step makes that can be checked without a model: shown false, they decide a verdict.

A verdict's odds of being right come from a model of how often verdicts like it were right on real
failures. Some steps need no odds: what they state can be checked, and it is false. Two kinds are
checked here, both narrow on purpose (a false alarm here is a decided verdict):

- **unit conversions**: ``one mile is 1.852 km``, ``5 miles is about 9.26 km``,
  ``km_per_mile = 1.852``. Units are read and converted by `pint`; a claim more than
  :data:`TOLERANCE` off is false. Words that are units only in some senses (``a``, ``at``, ``in``),
  units with several definitions (ton, gallon, ounce, cup …) and qualified units (a *nautical* mile,
  a *US* gallon) are not checked.
- **a rate the task gives, set otherwise**: the task says ``Sales tax is 8%``; a step sets
  ``tax_rate = 0.18`` or says ``a tax of 18%``. Only percentages are compared, and only where the
  task names one value for that word: an amount (``tax = 5.52``) is not a rate and is not compared.

:func:`false_claims` finds the first such claim of every step; a claim stated in an earlier step is
not the later step's own (it repeats it).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from otel_blame.trajectory import Trajectory

if TYPE_CHECKING:
    import pint

TOLERANCE = 0.05  # a stated conversion off by more than this share of the true value is false
MAX_CHARS = 4000  # a step's text read for claims (claims sit in plans and code, not in page dumps)
MAX_UNIT_CHARS = 24  # a longer word is no unit (and is not handed to pint's parser)

_NUMBER = r"\d+(?:,\d{3})*(?:\.\d+)?"
_HEDGE = r"(?:about|approximately|approx\.?|roughly|exactly|nearly|~|≈)\s*"
_VERB = r"(?:is|are|equals|equal to|is equal to|=|==|≈|~|makes|converts to|corresponds to|gives)"
# "<n> <unit> is [about] <n> <unit>": not inside arithmetic ("2 * 5 km is …"), not a rate's part
_CONVERSION = re.compile(
    rf"(?<![\d.*/+×^-])(?<![*/+×^-]\s)\b(?P<n1>{_NUMBER}|one|an?)\s*(?P<u1>[A-Za-z]+)\s+{_VERB}\s+"
    rf"(?:{_HEDGE})?(?P<n2>{_NUMBER})\s*(?P<u2>[A-Za-z]+)\b(?!\s*(?:/|per\b|²|³|\^|squared|cubed))",
    re.IGNORECASE,
)
# what every conversion has, found fast: a number right after a verb or a hedge ("is 1.852", "about
# 9.26"). A cheap test on the character before the blank finds the places (a digit is rarely after
# one of these); the words before each are then compared; the full pattern runs only where one is, a
# few texts in a hundred
_AFTER_VERB = re.compile(r"\d(?:(?<=[seoty.=~≈]\s\d)|(?<=[~≈]\d))")
_VERBS = (
    "is", "are", "=", "equals", "equal to", "converts to", "corresponds to", "makes", "gives",
    "about", "approximately", "approx.", "roughly", "exactly", "nearly", "~", "≈",
)  # fmt: skip
_VERB_ENDINGS = tuple(f"{word} " for word in _VERBS) + tuple(f"{word}\n" for word in _VERBS) + ("~", "≈")


def _has_conversion(text: str) -> bool:
    for match in _AFTER_VERB.finditer(text):
        if text[max(0, match.start() - 16) : match.start()].endswith(_VERB_ENDINGS):
            return True
    return False


# a conversion factor named for its units in code: ``km_per_mile = 1.852``
_FACTOR = re.compile(
    r"\b(?P<to>[A-Za-z]+)_per_(?P<from>[A-Za-z]+)\s*=\s*(?P<n>\d+(?:\.\d+)?)\s*(?:#[^\n]*)?$",
    re.MULTILINE,
)
# words pint reads as units that are (also, and more often) English words or symbols of other things
_NOT_UNITS = frozenset(
    "a an am at in is it as be by do go if me my no of oh on or so to up us we pm min mins "
    "c f g k l t b d e h j m n p q r s u v w x y z "
    "degree degrees deg hand hands point points second seconds stone stones bar bars "
    "year years yr yrs day days".split()
)
# units defined more than one way (US / imperial / metric), so a conversion may be right in another
_AMBIGUOUS = frozenset(
    "ton tons tonne tonnes gallon gallons gal pint pints pt quart quarts qt ounce ounces oz "
    "cup cups calorie calories cal kcal barrel barrels bushel bushels tablespoon tablespoons tbsp "
    "teaspoon teaspoons tsp pound pounds lb lbs hundredweight".split()
)
_QUALIFIERS = frozenset(
    "nautical us u.s. imperial survey fluid short long metric troy statute international sea air "
    "square cubic sq cu".split()
)
# the dimensions whose conversions are checked: plain physical quantities
_DIMENSIONS = ("[length]", "[mass]", "[time]", "[length] ** 2", "[length] ** 3")

# a percentage the task gives to a named thing: "Sales tax is 8%", "a discount of 15 %"
_GIVEN_RATE = re.compile(
    r"(?P<name>[A-Za-z][A-Za-z-]*)\s+(?:rate\s+)?(?:is|of|at|=|:)\s+(?P<value>\d+(?:\.\d+)?)\s*(?:%|percent\b)",
    re.IGNORECASE,
)
# a step setting a rate in code: ``tax_rate = 0.18`` (a literal on its own line)
_SET_RATE = re.compile(
    r"^\s*(?P<ident>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>\d*\.\d+|\d+)\s*(?P<percent>%)?\s*(?:#[^\n]*)?$",
    re.MULTILINE,
)


@dataclass(frozen=True)
class FalseClaim:
    """A claim a step makes that checks false: the text as stated, what it should have said, and its
    kind (``conversion``, or ``task_value``: a value the task gives, set otherwise)."""

    step: int
    stated: str
    why: str
    kind: str


@functools.cache
def _registry() -> pint.UnitRegistry | None:
    try:
        import pint
    except ImportError:  # pragma: no cover - pint comes with the processor extra
        return None
    return pint.UnitRegistry()


@functools.lru_cache(maxsize=512)
def _unit(word: str) -> object | None:
    """The pint unit a word names, where it names a plain physical unit unambiguously."""
    lower = word.lower()
    if lower in _NOT_UNITS or lower in _AMBIGUOUS or not 2 <= len(lower) <= MAX_UNIT_CHARS:
        return None
    registry = _registry()
    if registry is None:
        return None
    try:
        unit = registry.parse_units(lower)
    except Exception:  # pint raises several kinds for words it does not know
        return None
    if str(unit.dimensionality) not in _DIMENSIONS:
        return None
    return unit


def _number(text: str) -> float:
    lower = text.lower()
    if lower in ("one", "a", "an"):
        return 1.0
    return float(lower.replace(",", ""))


def _qualified(text: str, start: int) -> bool:
    """Whether the word before ``start`` qualifies the unit that follows (a *nautical* mile)."""
    before = text[max(0, start - 16) : start].split()
    return bool(before) and before[-1].lower().strip(".,;:") in _QUALIFIERS


def _converted(amount: float, source: object, target: object) -> float | None:
    registry = _registry()
    if registry is None:
        return None
    try:
        return float(registry.Quantity(amount, source).to(target).magnitude)
    except Exception:  # incompatible dimensions
        return None


def _off(stated: float, true: float) -> bool:
    return true > 0 and not math.isclose(stated, true, rel_tol=TOLERANCE)


def _true_if_off(amount: float, source_word: str, stated: float, target_word: str) -> float | None:
    """What ``amount`` ``source_word`` is in ``target_word``, where ``stated`` is off from it (None
    where the words are no checked units, or the stated value holds)."""
    source, target = _unit(source_word), _unit(target_word)
    if source is None or target is None or source == target:
        return None
    true = _converted(amount, source, target)
    return true if true is not None and _off(stated, true) else None


def conversion_claims(text: str) -> list[tuple[str, str]]:
    """(claim as stated, the true value) for each unit conversion in ``text`` that checks false."""
    found: list[tuple[str, str]] = []
    if _has_conversion(text):
        for match in _CONVERSION.finditer(text):
            if _qualified(text, match.start("u1")) or _qualified(text, match.start("u2")):
                continue
            if text[match.end("u1") : match.end("u1") + 1] == "_":
                continue
            true = _true_if_off(_number(match["n1"]), match["u1"], _number(match["n2"]), match["u2"])
            if true is not None:
                said = f"{match['n1']} {match['u1']} is {true:.4g} {match['u2']}"
                found.append((match.group(0).strip(), said))
    if "_per_" in text:
        for match in _FACTOR.finditer(text):
            true = _true_if_off(1.0, match["from"], float(match["n"]), match["to"])
            if true is not None:
                found.append((match.group(0).strip(), f"one {match['from']} is {true:.4g} {match['to']}"))
    return found


def _words(identifier: str) -> set[str]:
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", identifier)
    return {word.lower() for word in re.split(r"[_\W]+", spaced) if word}


def given_rates(task: str) -> dict[str, float]:
    """The percentages the task gives, by the word they are given for (``tax``: 8.0); a word given
    two different values is left out (which one a step means cannot be told)."""
    rates: dict[str, set[float]] = {}
    if "%" not in task and "percent" not in task:
        return {}
    for match in _GIVEN_RATE.finditer(task):
        rates.setdefault(match["name"].lower(), set()).add(float(match["value"]))
    return {name: next(iter(values)) for name, values in rates.items() if len(values) == 1}


def rate_claims(text: str, rates: dict[str, float]) -> list[tuple[str, str]]:
    """(claim as stated, what the task gives) for each rate ``text`` sets otherwise than the task."""
    if not rates:
        return []
    lowered = text.lower()
    if not any(name in lowered for name in rates):
        return []
    found: list[tuple[str, str]] = []
    for match in _SET_RATE.finditer(text):
        named = [name for name in _words(match["ident"]) if name in rates]
        if len(named) != 1:
            continue
        given = rates[named[0]]
        value = float(match["value"])
        if match["percent"]:
            stated = value
        elif 0 < value < 1:
            stated = value * 100
        else:
            continue  # an amount or a count, not a rate
        if not math.isclose(stated, given, rel_tol=1e-6, abs_tol=1e-9):
            found.append((match.group(0).strip(), f"the task gives {named[0]} as {given:g}%"))
    for match in _GIVEN_RATE.finditer(text):
        name = match["name"].lower()
        if name in rates and not math.isclose(float(match["value"]), rates[name], rel_tol=1e-6):
            found.append((match.group(0).strip(), f"the task gives {name} as {rates[name]:g}%"))
    return found


def false_claims(trajectory: Trajectory, task_step: int | None = None) -> dict[int, FalseClaim]:
    """Each step's first claim that checks false and that no earlier step stated, by step index.
    The task as given (``task_step``) is what rates are checked against, never a claim."""
    task = trajectory.task.input or ""
    if task_step is not None and 0 <= task_step < len(trajectory.steps):
        task = f"{task}\n{trajectory.steps[task_step].content or ''}"
    rates = given_rates(task)
    stated_before: set[str] = set()
    found: dict[int, FalseClaim] = {}
    for step in trajectory.steps:
        if step.index == task_step:
            continue
        text = (step.content or "")[:MAX_CHARS]
        if not text:
            continue
        claims = [(*claim, "conversion") for claim in conversion_claims(text)] + [
            (*claim, "task_value") for claim in rate_claims(text, rates)
        ]
        own = [claim for claim in claims if claim[0].lower() not in stated_before]
        if own:
            stated, why, kind = own[0]
            found[step.index] = FalseClaim(step=step.index, stated=stated, why=why, kind=kind)
        stated_before |= {stated.lower() for stated, _, _ in claims}
    return found
