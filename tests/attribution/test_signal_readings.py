"""How the signals read a step: denials, stated answers, relayed pages, and the faster regexes."""

from __future__ import annotations

import re

from otel_blame.attribution import signals
from otel_blame.attribution.signals import (
    DUMP_CHARS,
    Fabrication,
    FinalAnswerEntry,
    ScoringContext,
    StuckLoop,
)

from .conftest import make_trajectory


def test_literal_first_regexes_match_exactly_what_the_written_ones_do():
    texts = [
        "none here",
        "xnone",
        "nonexistent",
        "a 404 b",
        "4040 rows",
        "valueerror: bad",
        "error: x",
        "the request has been satisfied",
        "subtask was completed",
        "we are not making progress",
        "i cannot access the page",
        "let's assume it is 5",
        "reassuming nothing",
        "this is incorrect, 12 not 13",
        "correctly done",
        "everything looks good",
        "unmocked",
        "(mock data)",
        "",
    ]
    patterns = [value for value in vars(signals).values() if isinstance(value, signals._Pattern)]
    assert patterns
    for pattern in patterns:
        written = pattern.regex  # as compiled: word boundaries written after the first letter
        original = re.compile(_undo_literal_first(written.pattern))
        assert original.pattern != written.pattern or "\\b" not in original.pattern
        for text in texts:
            assert bool(written.search(text)) == bool(original.search(text)), (pattern.regex.pattern, text)
            assert len(written.findall(text)) == len(original.findall(text)), (pattern.regex.pattern, text)


def _undo_literal_first(pattern: str) -> str:
    return re.sub(r"([a-z0-9])\(\?<!\\w\1\)", r"\\b\1", pattern)


def test_a_denied_loop_is_not_a_report_of_one():
    denied = make_trajectory(
        [
            ("Lead", "Plan: look up the price."),
            ("Finder", "I searched and found a price list."),
            ("Lead", "We are not yet in a loop; no evidence of being stuck. Next, check the date."),
            ("Finder", "The list is dated 2020."),
        ]
    )
    assert StuckLoop().evidence(ScoringContext.build(denied)) == {}
    ledger = make_trajectory(
        [
            ("Lead", "Plan: look up the price."),
            ("Finder", "I clicked an advert for microscopes."),
            ("Lead", '{"is_in_loop": {"reason": "clicking unrelated pages", "answer": true}}'),
            ("Finder", "I went back."),
        ]
    )
    assert StuckLoop().evidence(ScoringContext.build(ledger)) == {1: 1.0}


def test_a_stated_final_answer_is_traced_by_its_words_to_where_it_first_appeared():
    run = make_trajectory(
        [
            ("Lead", "Plan: find eateries near the park open at 11pm."),
            ("Surfer", "I searched. Results: The Shack, Olio Bar."),
            ("Surfer", "I clicked a listing: Sneekers Cafe, open late, 4 stars."),
            ("Lead", "Sneekers Cafe seems right."),
            ("Lead", "Request satisfied.\nFINAL ANSWER: Sneekers Cafe"),
        ],
        input="What is the closest eatery to the park that is open at 11pm?",
    )
    context = ScoringContext.build(run)
    assert context.answer_tokens == {"sneekers", "cafe"} and context.answer_step == 4
    assert FinalAnswerEntry().evidence(context) == {2: 1.0}


def test_an_answer_that_first_appears_in_its_own_statement_points_nowhere():
    run = make_trajectory(
        [
            ("Lead", "Plan: translate the sentence."),
            ("Helper", "The verb comes first in this language."),
            ("Lead", "FINAL ANSWER: Maktay Zapple"),
        ],
        input="Translate 'I like apples'.",
    )
    assert FinalAnswerEntry().evidence(ScoringContext.build(run)) == {}


def test_a_relayed_page_is_not_its_relayers_own_words():
    page = "Some page text. " * (DUMP_CHARS // 16 + 10)
    run = make_trajectory(
        [
            ("Lead", "Plan: open the page."),
            ("Surfer", "I opened the page.\n" + page + " let's assume hypothetical placeholder values"),
            ("Coder", "Let's assume the value is 5 as a placeholder."),
        ]
    )
    evidence = Fabrication().evidence(ScoringContext.build(run))
    assert 1 not in evidence and evidence.get(2, 0) > 0
