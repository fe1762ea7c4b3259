"""Each fault kind: which messages it applies to and what it changes (deterministic per seed)."""

from __future__ import annotations

import random

import pytest

from otel_blame.inject.faults import FAULT_KINDS, FaultKind, applies, apply_fault

PLAN = (
    "Plan:\n1. subtotal = 3 * 19.99 + 2 * 4.50\n2. total = subtotal * (1 + 8 / 100)\n"
    "3. Print total rounded to 2 decimals."
)
CODE = "```python\nsubtotal = 3 * 19.99 + 2 * 4.50\ntotal = subtotal * 1.08\nprint(round(total, 2))\n```"
OUTPUT = "exitcode: 0 (execution succeeded)\nCode output: Result: 74.49\n"
QUESTION = "An order has 3 notebooks at $19.99 each. Sales tax is 8%. What is the total?"


def test_tool_faults_apply_only_to_tool_results_and_instruction_faults_only_to_messages():
    assert applies(FaultKind.TOOL_ERROR, OUTPUT, "code_execution")
    assert applies(FaultKind.WRONG_TOOL_RESULT, OUTPUT, "tool")
    assert not applies(FaultKind.TOOL_ERROR, PLAN, "message")
    assert not applies(FaultKind.DROP_INSTRUCTION, OUTPUT, "code_execution")
    assert not applies(FaultKind.CONTRADICT_INSTRUCTION, OUTPUT, "code_execution")
    assert not applies(FaultKind.TERMINATE, PLAN, "message", last=True)
    assert not applies(FaultKind.TERMINATE, "done. TERMINATE", "message")
    assert not applies(FaultKind.NUMBER, "no digits here", "message")


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_every_kind_changes_a_message_it_applies_to_the_same_way_for_the_same_seed(kind):
    tool_fault = kind in (FaultKind.TOOL_ERROR, FaultKind.WRONG_TOOL_RESULT)
    text, step_kind = (OUTPUT, "code_execution") if tool_fault else (PLAN, "message")
    assert applies(kind, text, step_kind)
    first = apply_fault(kind, text, random.Random(7))
    again = apply_fault(kind, text, random.Random(7))
    assert first == again and first.text != text and first.description


def test_numbers_change_but_list_enumerators_and_exit_codes_do_not():
    for seed in range(30):
        changed = apply_fault(FaultKind.NUMBER, PLAN, random.Random(seed)).text
        assert [line[:3] for line in changed.splitlines()[1:]] == ["1. ", "2. ", "3. "]
        wrong = apply_fault(FaultKind.WRONG_TOOL_RESULT, OUTPUT, random.Random(seed)).text
        assert wrong.startswith("exitcode: 0") and "74.49" not in wrong


def test_instructions_are_dropped_from_plans_code_and_prose():
    for text in (PLAN, CODE, QUESTION):
        changed = apply_fault(FaultKind.DROP_INSTRUCTION, text, random.Random(1))
        assert len(changed.text) < len(text)
        assert changed.description.startswith("an instruction was dropped")


def test_contradictions_override_code_and_correct_prose():
    code = apply_fault(FaultKind.CONTRADICT_INSTRUCTION, CODE, random.Random(2)).text
    assigned = [line.split(" = ")[0] for line in code.splitlines() if " = " in line]
    assert len(assigned) == len(set(assigned)) + 1  # one variable assigned again with another value
    prose = apply_fault(FaultKind.CONTRADICT_INSTRUCTION, QUESTION, random.Random(2)).text
    assert prose.startswith(QUESTION) and "\nCorrection: " in prose


def test_a_fault_that_cannot_apply_says_so():
    with pytest.raises(ValueError, match="no number"):
        apply_fault(FaultKind.NUMBER, "nothing", random.Random(0))
