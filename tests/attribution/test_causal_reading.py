"""The causal reading's evidence, one cause at a time, on small runs written the way every source
writes them (``tool_call NAME(ARGS)`` for a call, a tool step for its result): each test has a twin
without the cause, where the evidence must stay off, so a reading that fires everywhere fails."""

from __future__ import annotations

import json

import pytest

from otel_blame.attribution.causal import read_causally
from otel_blame.attribution.causal.arithmetic import agrees, expression_value
from otel_blame.attribution.causal.calls import argument_atoms, atoms_of, tool_calls
from otel_blame.attribution.causal.graph import RunGraph, build_graph
from otel_blame.attribution.causal.reading import _answered
from otel_blame.loaders import parse_trajectory
from otel_blame.trajectory import Outcome, StepKind, Task, Trajectory


def _run(
    steps: list[tuple[str, str] | tuple[str, str, str]], task: str = "", final: str | None = None
) -> Trajectory:
    """(agent, content) messages and (agent, content, tool name) tool results."""
    built = []
    for step in steps:
        if len(step) == 3:
            built.append({"agent": step[0], "content": step[1], "kind": StepKind.TOOL, "tool_name": step[2]})
        else:
            built.append({"agent": step[0], "content": step[1]})
    return Trajectory.from_steps(
        built, task=Task(input=task or None, final_output=final), outcome=Outcome.FAILURE
    )


def _call(name: str, **arguments: object) -> str:
    return f"tool_call {name}({json.dumps(arguments)})"


def _feature(trajectory: Trajectory, name: str) -> dict[int, float]:
    return read_causally(trajectory).features[name]


TASK = "Change the shipping address of order #W9031525 to 899 Maple Avenue, Austin, TX 78701."


def _address_run(address: str) -> Trajectory:
    return _run(
        [
            ("customer", TASK),
            ("assistant", _call("get_order_details", order_id="#W9031525")),
            ("assistant", '{"order_id": "#W9031525", "status": "pending"}', "get_order_details"),
            ("assistant", _call("modify_address", order_id="#W9031525", address=address)),
            ("assistant", json.dumps({"order_id": "#W9031525", "address": address}), "modify_address"),
            ("assistant", f"The address is now {address}."),
        ],
        task=TASK,
    )


def test_a_call_argument_nothing_before_gave_is_novel_and_one_that_was_given_is_not() -> None:
    wrong = _address_run("629 Maple Avenue, Austin, TX 78701")
    assert _feature(wrong, "novel_call_value") == {3: 0.5}
    right = _address_run("899 Maple Avenue, Austin, TX 78701")
    assert _feature(right, "novel_call_value") == {}


def test_a_one_word_argument_is_checked_as_it_is_and_a_query_phrase_is_not() -> None:
    def run(region: str, query: str) -> Trajectory:
        return _run(
            [
                ("manager", "Compute the EMEA revenue for 2025-Q2."),
                ("analyst", _call("query_ledger", region=region, quarter="2025-Q2")),
                ("analyst", '{"lines": []}', "query_ledger"),
                ("analyst", _call("search", query=query)),
            ]
        )

    assert _feature(run("AEME", "emea revenue figures"), "novel_call_value") == {1: 0.5}
    assert _feature(run("EMEA", "emea revenue figures"), "novel_call_value") == {}


def test_a_result_that_does_not_follow_from_its_call_contradicts_it() -> None:
    def calculator(value: float) -> Trajectory:
        return _run(
            [
                ("critic", _call("calculate", expression="149.99 * (1 - 30 / 100)")),
                ("critic", json.dumps({"value": value}), "calculate"),
                ("critic", f"The verified answer is {value}."),
            ]
        )

    assert _feature(calculator(209.99), "result_contradicts_call") == {1: 1.0}
    assert _feature(calculator(104.99), "result_contradicts_call") == {}

    def lookup(echoed: str) -> Trajectory:
        return _run(
            [
                ("agent", _call("get_order", order_id="ORD-1042")),
                ("agent", json.dumps({"order_id": echoed, "total": 12.5}), "get_order"),
            ]
        )

    assert _feature(lookup("ORD-2077"), "result_contradicts_call") == {1: 1.0}
    assert _feature(lookup("ORD-1042"), "result_contradicts_call") == {}


def test_computed_output_passes_the_answers_origin_to_its_computation_unless_it_contradicts_it() -> None:
    def calculator(value: float) -> Trajectory:
        return _run(
            [
                ("critic", _call("calculate", expression="149.99 * (1 - 30 / 100)")),
                ("critic", json.dumps({"value": value}), "calculate"),
                ("critic", f"The verified answer is {value}."),
            ]
        )

    assert _feature(calculator(104.99), "answer_origin") == {0: 1.0}  # the expression computed it
    assert _feature(calculator(209.99), "answer_origin") == {1: 1.0}  # the tool's own wrong output


def test_an_answer_whose_value_follows_from_nothing_at_hand_is_unsupported_where_it_is_stated() -> None:
    def story(answer: str) -> Trajectory:
        return _run(
            [("Planner", "Plan: compute 6*7."), ("Solver", f"The answer is {answer}."), ("Critic", "Ok.")]
        )

    # the critic's "Ok." states nothing: the answer is the solver's
    assert _feature(story("41"), "answer_unsupported") == {1: 1.0}
    assert _feature(story("42"), "answer_unsupported") == {}  # 6 * 7, worked out


def test_the_answer_is_read_where_the_final_output_is_stated_not_at_a_closing_thanks() -> None:
    trajectory = _run(
        [
            ("customer", "Please cancel order #W1."),
            ("assistant", "Order #W1 is cancelled; the refund of $154.20 goes to card 4417."),
            ("customer", "Thank you, that is all. ###STOP###"),
        ],
        final="Order #W1 is cancelled; the refund of $154.20 goes to card 4417.",
    )
    assert read_causally(trajectory).graph.answer_step == 1


def test_a_made_up_identifier_is_novel_and_a_relayed_one_is_not() -> None:
    def run(customer: str) -> Trajectory:
        return _run(
            [
                ("user", "My parcel arrived damaged."),
                ("triage", _call("lookup_customer", email="[REDACTED:email:3fa9c1d2]")),
                ("triage", '{"customer_id": "C-1348"}', "lookup_customer"),
                ("triage", f"Case summary: customer {customer}, issue: damaged item."),
            ]
        )

    assert 3 in _feature(run("C-0342"), "novel_identifier")
    assert 3 not in _feature(run("C-1348"), "novel_identifier")


def test_a_victim_saying_its_input_lacks_something_points_at_the_message_it_answers() -> None:
    def run(reply: str) -> Trajectory:
        return _run(
            [
                ("user", "Refund my webcam, order ORD-28878."),
                ("triage", "Case summary: order ORD-28878, damaged webcam. Transferring you."),
                ("refunds", reply),
            ]
        )

    lacking = run("The case note does not confirm that your identity was verified, so I cannot refund.")
    assert _feature(lacking, "input_found_lacking") == {1: 1.0}
    assert _feature(run("I have refunded the webcam of order ORD-28878."), "input_found_lacking") == {}


def test_a_stop_that_announces_work_still_to_do_ends_the_run_not_the_failed_call_before_it() -> None:
    def run(last: str) -> Trajectory:
        return _run(
            [
                ("customer", "Where is order #W5?"),
                ("assistant", _call("get_order_details", order_id="#W5")),
                ("assistant", '{"error": "HTTP 503 Service Unavailable"}', "get_order_details"),
                ("assistant", last),
            ]
        )

    premature = read_causally(run("The order service failed. I will retry the lookup once.\nTERMINATE"))
    assert premature.features["unanswered_stop"] == {3: 1.0} and premature.root_dependency() is None
    given_up = read_causally(run("The order service is down; I cannot look the order up.\nTERMINATE"))
    assert given_up.root_dependency() == 2  # the dependency ended the run: nothing left undone


def test_a_task_delivered_cut_short_drops_the_task() -> None:
    task = "Hi, this is Dalia. I would like to return the Throw Blanket from my order #W6174401."
    cut = _run([("customer", "Hi, this is Dalia."), ("assistant", "How can I help?")], task=task)
    assert _feature(cut, "dropped_task").get(0) == 1.0
    whole = _run([("customer", task), ("assistant", "How can I help?")], task=task)
    assert 0 not in _feature(whole, "dropped_task")


def test_a_call_its_agents_next_message_says_failed_caused_the_failure() -> None:
    def run(report: str) -> Trajectory:
        return _run(
            [
                ("manager", "Compute the EMEA refunds for 2025-Q2."),
                ("analyst", _call("Delegate work to coworker", region="EMEA", quarter="2025-Q2")),
                ("analyst", report),
            ]
        )

    failed = run("Refunds: not available (I encountered an error: Action 'Delegate' don't exist).")
    assert _feature(failed, "caused_failing_result") == {1: 1.0}
    assert _feature(run("Refunds for EMEA in 2025-Q2: $29,832.39."), "caused_failing_result") == {}


@pytest.mark.parametrize(
    ("text", "atoms"),
    [
        ("Order #W9031525 came to 1,250.50 on 2024-03-28.", ["#w9031525", "1250.5", "2024-03-28"]),
        ("user jonas_berg_1333 and INC-4134.", ["jonas_berg_1333", "inc-4134"]),
        ("no digits here", []),
        ("[REDACTED:email:3fa9c1d2] wrote", ["3fa9c1d2"]),
    ],
)
def test_atoms_are_the_numbers_and_identifiers_with_a_digit(text: str, atoms: list[str]) -> None:
    assert atoms_of(text) == atoms


def test_tool_calls_are_read_with_json_arguments_and_without() -> None:
    calls = tool_calls('I will look.\ntool_call calculator({"expression": "ceil(11388 / 900)"})\nthen')
    assert [(call.name, call.arguments) for call in calls] == [
        ("calculator", {"expression": "ceil(11388 / 900)"})
    ]
    assert argument_atoms(calls[0]) == ["11388", "900"]
    assert tool_calls("tool_call f(a=1, b=(2))")[0].arguments == "a=1, b=(2)"
    assert tool_calls("no call here") == []


def test_an_arithmetic_argument_is_worked_out_and_compared_as_printed() -> None:
    assert expression_value("ceil(11388 / 900)") == 13.0
    assert expression_value("math.floor(7 / 2) + 1") == 4.0
    assert expression_value("Growth plan per seat") is None and expression_value("2024") is None
    assert agrees(88.8298, ["88.83"]) and agrees(-44.4, ["44.4"]) and not agrees(88.83, ["10705.8"])


def test_a_call_read_from_a_chat_file_and_from_spans_is_the_same_evidence() -> None:
    messages = [
        {"role": "user", "content": TASK},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {
                        "name": "modify_address",
                        "arguments": json.dumps({"order_id": "#W9031525", "address": "629 Maple Avenue"}),
                    },
                }
            ],
        },
        {"role": "tool", "name": "modify_address", "content": '{"status": "ok"}'},
    ]
    trajectory = parse_trajectory(json.dumps({"messages": messages, "question": TASK}))
    assert _feature(trajectory, "novel_call_value") == {1: 0.5}


def _answered_by_walking_back(graph: RunGraph, index: int) -> int | None:
    """The definition the one-pass index must match: walk back to the closest earlier message by
    another agent, stopping at the task's step."""
    steps = graph.steps
    for earlier in range(index - 1, -1, -1):
        if earlier == graph.task_step:
            return -1
        if steps[earlier].kind == StepKind.MESSAGE and steps[earlier].agent != steps[index].agent:
            return earlier
    return -1 if graph.trajectory.task.input else None


@pytest.mark.parametrize("task", ["", "Find the 2019 revenue of ACME Corp and report it."])
def test_the_message_each_step_answers_is_the_closest_earlier_one_by_another_agent(task: str) -> None:
    turns: list[tuple[str, str] | tuple[str, str, str]] = [
        ("user", task or "Find the revenue."),
        ("planner", "Step 1: search. Step 2: report."),
        ("planner", "Searcher, please search."),
        ("searcher", _call("web_search", query="ACME revenue 2019")),
        ("searcher", '{"revenue": "4.2B"}', "web_search"),
        ("searcher", "Revenue was 4.2B."),
        ("searcher", "Anything else?"),
        ("planner", "Thanks. TERMINATE"),
        ("reviewer", "Looks right."),
    ]
    for trajectory in (_run(turns, task=task), _run(turns[1:], task=task)):
        graph = build_graph(trajectory)
        expected = [_answered_by_walking_back(graph, index) for index in range(len(trajectory.steps))]
        assert _answered(graph) == expected
