"""Claims a step makes that check false (otel_blame.attribution.claims), and the verdicts they decide:
wrong unit conversions (pint converts), a rate the task gives set otherwise; what is not a claim
(arithmetic, qualified and ambiguous units, words pint reads as units, amounts) is left alone."""

from __future__ import annotations

import pytest

from otel_blame.attribution.claims import conversion_claims, false_claims, given_rates, rate_claims
from otel_blame.attribution.ranker import PROVEN_CONFIDENCE, RankerAttribution, RankerModel
from otel_blame.trajectory import Outcome, StepKind, Task, Trajectory
from tests.support.decided import NEVER_DECIDED, set_decided_threshold


@pytest.mark.parametrize(
    ("text", "true"),
    [
        ("Plan: one mile is 1.852 km, so convert.", "one mile is 1.609 km"),
        ("so 5 miles is about 9.26 km.", "5 miles is 8.047 km"),
        ("Note that 1 foot equals 10 inches here", "1 foot is 12 inches"),
        ("1 hour is equal to 120 minutes", "1 hour is 60 minutes"),
        ("miles = 5\nkm_per_mile = 1.852\nprint(miles * km_per_mile)", "one mile is 1.609 km"),
    ],
)
def test_a_wrong_conversion_checks_false(text: str, true: str) -> None:
    claims = conversion_claims(text)
    assert [why for _, why in claims] == [true]


@pytest.mark.parametrize(
    "text",
    [
        "one mile is 1.609 km and 5 km is about 3.1 miles",  # right, within the tolerance
        "3 feet is 36 inches; 2 hours is 7200 seconds",
        "2 * 5 km is 10 km",  # arithmetic, not a conversion
        "1 nautical mile is 1.852 km",  # a qualified unit
        "1 gallon is 4.546 litres, or 1 gallon is 3.785 litres",  # US or imperial: not checked
        "1 at is 3 in",  # words pint reads as units
        "a year is 300 days",  # a year of what calendar, and days are words too
        "60 km is 40 miles per hour",  # a rate, not a length
        "km_per_mile = 1.609344",
        "1 " + "kilo" * 40 + "metre is 3 miles",  # no unit is this long
    ],
)
def test_what_is_not_a_wrong_conversion_is_left_alone(text: str) -> None:
    assert conversion_claims(text) == []


TASK = "An order has 3 notebooks at $19.99 each. Sales tax is 8%. What is the total in dollars?"


def test_a_rate_the_task_gives_set_otherwise_checks_false() -> None:
    rates = given_rates(TASK)
    assert rates == {"tax": 8.0}
    claims = rate_claims("tax_rate = 0.18\ntotal = 1", rates)
    assert [why for _, why in claims] == ["the task gives tax as 8%"]
    assert [stated for stated, _ in rate_claims("We apply a tax of 18% to it.", rates)] == ["tax of 18%"]
    assert rate_claims("tax_rate = 0.08\ntaxRate = 8%\ntax = 5.52\nsales_tax = subtotal * 0.08", rates) == []
    assert given_rates("The tax is 8% in May and the tax is 6% in June.") == {}  # which one is meant?


def _run(*contents: tuple[str, str], task: str, kinds: dict[int, StepKind] | None = None) -> Trajectory:
    steps = [
        {"agent": agent, "content": content, "kind": (kinds or {}).get(index, StepKind.MESSAGE)}
        for index, (agent, content) in enumerate(contents)
    ]
    return Trajectory.from_steps(steps, task=Task(input=task), outcome=Outcome.FAILURE)


MILES = "A runner covers 5 miles. How many kilometres is that, rounded to two decimals?"


def test_a_claim_repeated_later_is_the_first_stater_s_and_the_task_is_no_claim() -> None:
    trajectory = _run(
        ("user", "A runner covers 5 miles; one mile is 1.852 km, says my watch. Kilometres?"),
        ("planner", "Plan: one mile is 1.852 km, so 5 miles is about 9.26 km."),
        ("coder", "```python\nkm_per_mile = 1.852\nprint(5 * km_per_mile)\n```"),
        ("reviewer", "As the planner said, one mile is 1.852 km. Final answer: 9.26 km"),
        task=MILES,
    )
    claims = false_claims(trajectory, task_step=0)
    assert sorted(claims) == [1, 2]  # the reviewer repeats the planner's claim: not its own
    assert claims[1].stated == "one mile is 1.852 km"


def test_the_first_false_claim_decides_the_verdict() -> None:
    trajectory = _run(
        ("user", MILES),
        ("planner", "Plan: one mile is 1.852 km, so 5 miles is about 9.26 km. Coder, confirm it."),
        ("coder", "```python\nkm_per_mile = 1.852\nprint(f'{5 * km_per_mile:.2f} km')\n```"),
        ("executor", "exitcode: 0 (execution succeeded)\nCode output: 9.26 km"),
        ("reviewer", "The code follows the plan. Final answer: 9.26 km TERMINATE"),
        task=MILES,
        kinds={3: StepKind.CODE_EXECUTION},
    )
    attribution = RankerAttribution().attribute(trajectory)
    assert (attribution.agent, attribution.step, attribution.decided) == ("planner", 1, True)
    assert attribution.confidence >= PROVEN_CONFIDENCE
    assert attribution.failure_mode != "disobey_task_specification"  # a conversion: the model says
    assert 'it states "one mile is 1.852 km", which checks false (one mile is 1.609 km)' in attribution.reason


def test_a_page_s_false_claim_decides_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    set_decided_threshold(monkeypatch, NEVER_DECIDED)  # only a claim could decide these
    trajectory = _run(
        ("user", MILES),
        ("searcher", "web_search('miles to km')"),
        ("search", "Conversions: one mile is 1.852 km (nautical charts)."),
        ("writer", "Final answer: 9.26 km"),
        task=MILES,
        kinds={2: StepKind.TOOL},
    )
    assert not RankerAttribution(model=RankerModel.load()).attribute(trajectory).decided
    plain = _run(("user", MILES), ("writer", "Final answer: 9.26 km"), task=MILES)
    assert not RankerAttribution().attribute(plain).decided


def test_a_rate_the_task_gives_set_otherwise_decides_and_names_the_specification() -> None:
    code = "```python\nsubtotal = 3 * 19.99\ntax_rate = 0.18\nprint(round(subtotal * (1 + tax_rate), 2))\n```"
    trajectory = _run(
        ("user", TASK),
        ("planner", "Plan: subtotal = 3 * 19.99, total = subtotal * (1 + 0.08). Coder, compute it."),
        ("coder", code),
        ("executor", "exitcode: 0 (execution succeeded)\nCode output: 70.76"),
        ("reviewer", "The code ran. Final answer: $70.76 TERMINATE"),
        task=TASK,
        kinds={3: StepKind.CODE_EXECUTION},
    )
    attribution = RankerAttribution().attribute(trajectory)
    assert (attribution.agent, attribution.step, attribution.decided) == ("coder", 2, True)
    assert attribution.failure_mode == "disobey_task_specification"
    assert "the task gives tax as 8%" in attribution.reason
