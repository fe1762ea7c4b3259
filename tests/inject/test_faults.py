"""Each fault kind: which messages it applies to and what it changes (deterministic per seed)."""

from __future__ import annotations

import json
import random
import re

import pytest

from otel_blame.inject.faults import (
    FAULT_KINDS,
    HANDOFF_NOTE,
    TOOL_ERROR_TEXT,
    FaultKind,
    applies,
    apply_fault,
    is_error_result,
)

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


CALL = json.dumps({"order_id": "#W2378156", "reason": "ordered by mistake", "quantity": 2})
CONFIRMATION = (
    "I found order #W2378156, placed on 2024-03-15, with 2 items totalling $84.50. "
    "Per our policy, please confirm (yes) that you want me to cancel it. "
    "The refund will go back to the original payment method within 5-7 business days. "
    "Is there anything else I should know first?"
)
AFTER_ERROR = (
    "Thank you for waiting. The order service returned an error (HTTP 503 Service Unavailable). "
    "I will retry the lookup once before going further."
)
# kind -> (text, step kind, what else the message path knows about it)
SAMPLES: dict[FaultKind, tuple[str, str, dict]] = {
    FaultKind.TOOL_ERROR: (OUTPUT, "code_execution", {}),
    FaultKind.WRONG_TOOL_RESULT: (OUTPUT, "code_execution", {}),
    FaultKind.WRONG_TOOL_ARGUMENT: (CALL, "tool_call", {"tool_name": "cancel_pending_order"}),
    FaultKind.WRONG_TOOL: (
        CALL,
        "tool_call",
        {"tool_name": "cancel_pending_order", "tools": ("cancel_pending_order", "return_delivered_items")},
    ),
    FaultKind.SKIPPED_POLICY_STEP: (CONFIRMATION, "message", {}),
    FaultKind.IGNORED_TOOL_ERROR: (AFTER_ERROR, "message", {"after_error": True}),
    FaultKind.FABRICATED_FACT: (CONFIRMATION, "message", {}),
    FaultKind.PREMATURE_HANDOFF: (CONFIRMATION, "message", {}),
    FaultKind.LOST_CONTEXT: (CONFIRMATION, "message", {}),
}


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_every_kind_changes_a_message_it_applies_to_the_same_way_for_the_same_seed(kind):
    text, step_kind, known = SAMPLES.get(kind, (PLAN, "message", {}))
    assert applies(kind, text, step_kind, **known)
    tools = {"tool_name": known.get("tool_name"), "tools": known.get("tools", ())}
    first = apply_fault(kind, text, random.Random(7), **tools)
    again = apply_fault(kind, text, random.Random(7), **tools)
    assert first == again and (first.text != text or first.tool_name != known.get("tool_name"))
    assert first.description


def test_calls_take_only_call_faults_and_messages_never_take_them():
    for kind in FAULT_KINDS:
        on_call = applies(kind, CALL, "tool_call", tool_name="a", tools=("a", "b"))
        assert on_call == (kind in (FaultKind.WRONG_TOOL_ARGUMENT, FaultKind.WRONG_TOOL)), kind
    assert not applies(FaultKind.WRONG_TOOL_ARGUMENT, CONFIRMATION, "message")
    assert not applies(FaultKind.WRONG_TOOL, CALL, "tool_call", tool_name="a", tools=("a",))


def test_a_wrong_argument_keeps_the_call_well_formed_and_changes_one_value():
    for seed in range(20):
        changed = json.loads(apply_fault(FaultKind.WRONG_TOOL_ARGUMENT, CALL, random.Random(seed)).text)
        original = json.loads(CALL)
        assert changed.keys() == original.keys()
        differing = [key for key in original if changed[key] != original[key]]
        assert len(differing) == 1 and type(changed[differing[0]]) is type(original[differing[0]])


def test_a_wrong_tool_is_another_tool_of_the_run_with_the_same_arguments():
    injected = apply_fault(
        FaultKind.WRONG_TOOL, CALL, random.Random(0), tool_name="lookup", tools=("lookup", "cancel", "refund")
    )
    assert injected.text == CALL and injected.tool_name in ("cancel", "refund")


def test_a_skipped_check_removes_the_sentence_that_asks_for_it():
    changed = apply_fault(FaultKind.SKIPPED_POLICY_STEP, CONFIRMATION, random.Random(0)).text
    assert "confirm" not in changed and "#W2378156" in changed


def test_an_ignored_error_drops_only_its_acknowledgement_and_only_after_an_error():
    assert not applies(FaultKind.IGNORED_TOOL_ERROR, AFTER_ERROR, "message", after_error=False)
    changed = apply_fault(FaultKind.IGNORED_TOOL_ERROR, AFTER_ERROR, random.Random(0)).text
    assert changed.strip() == "Thank you for waiting."


def test_a_fabricated_fact_is_an_identifier_or_date_of_the_same_shape():
    for seed in range(20):
        changed = apply_fault(FaultKind.FABRICATED_FACT, CONFIRMATION, random.Random(seed)).text
        assert changed != CONFIRMATION
        assert re.search(r"#W\d{7}\b", changed) and re.search(r"\b2024-\d\d-\d\d\b", changed)
        assert "#W2378156" not in changed or "2024-03-15" not in changed


def test_a_premature_hand_off_and_lost_context_cut_the_message_short():
    handed = apply_fault(FaultKind.PREMATURE_HANDOFF, CONFIRMATION, random.Random(0)).text
    assert handed.startswith("I found order #W2378156") and handed.endswith(HANDOFF_NOTE)
    assert "confirm" not in handed
    lost = apply_fault(FaultKind.LOST_CONTEXT, CONFIRMATION, random.Random(0)).text
    assert CONFIRMATION.startswith(lost) and len(lost) < len(CONFIRMATION)


def test_a_failed_tool_result_is_recognised_as_an_error():
    assert is_error_result(TOOL_ERROR_TEXT)
    assert is_error_result('{"error": "HTTP 429 Too Many Requests"}')
    assert not is_error_result(OUTPUT)


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
