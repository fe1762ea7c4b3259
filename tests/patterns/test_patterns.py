"""The pure grouping: a verdict's cause, its gist, and the oldest similar pattern of its signature."""

from __future__ import annotations

import hashlib

import pytest

from otel_blame.attribution.result import Attribution, Candidate
from otel_blame.patterns import (
    KIND_UNDECIDED,
    PatternIndex,
    action_of,
    cause_of,
    gist,
    is_pattern_id,
    role_of,
    undecided_id,
)
from otel_blame.trajectory import Step, StepKind, Trajectory


def _run(*steps: Step) -> Trajectory:
    return Trajectory(steps=list(steps))


def _verdict(agent: str, step: int, reason: str, **fields: object) -> Attribution:
    values: dict[str, object] = {"confidence": 0.8, "decided": True, "method": "ranker", "category": "agent"}
    values.update(fields)
    return Attribution(agent=agent, step=step, reason=reason, **values)  # type: ignore[arg-type]


RUN = _run(
    Step(index=0, agent="planner", content="Plan: look up order ORD-1042 and refund 20 EUR."),
    Step(index=1, agent="worker-3f9a2c1b", content="tool_call lookup_order({'id': 'ORD-1042'})"),
    Step(index=2, agent="lookup", kind=StepKind.TOOL, tool_name="lookup_order", content="total 200"),
    Step(index=3, agent="writer", role="writer (-> reviewer)", content="Drafted the reply."),
    Step(index=4, agent="writer", content="Refund 200 EUR. TERMINATE"),
    Step(index=5, agent="router", kind=StepKind.TOOL, tool_name="transfer_to_billing", content="{}"),
)


def test_the_gist_takes_out_names_ids_numbers_quotes_and_addresses() -> None:
    said = gist(
        'Step 3 by worker-3f9a2c1b: it sent "ORD-1042" to https://api.example/v1/orders and got HTTP 503 '
        "after 12.5 s; planner's order #A17 was 'refund 20 EUR'.",
        RUN.agents,
    )
    assert said == (
        "step <n> by <agent>: it sent <q> to <url> and got http <n> after <n> s; "
        "<agent>'s order <id> was <q>."
    )
    assert gist("Step 4 by  writer:\n the VALUE") == "step <n> by writer: the value"


def test_the_role_is_the_name_without_the_ids_a_run_generates() -> None:
    assert role_of("worker-3f9a2c1b") == "worker"
    assert role_of("agent_1723") == "agent"
    assert role_of("worker-6ba7b810-9dad-11d1-80b4-00c04fd430c8") == "worker"
    assert role_of("Assistant2") == "Assistant2"  # a slot the system gives stays
    assert role_of("Node-2") == "Node-2"
    assert role_of("WebSurfer") == "WebSurfer"


@pytest.mark.parametrize(
    ("step", "action"),
    [
        (0, "answer"),
        (1, "tool:lookup_order"),
        (2, "tool:lookup_order"),
        (3, "handoff"),
        (4, "stop"),
        (5, "handoff"),
    ],
)
def test_the_decisive_action(step: int, action: str) -> None:
    assert action_of(RUN, step) == action


def test_a_decided_verdict_brings_its_whole_signature() -> None:
    verdict = _verdict(
        "worker-3f9a2c1b", 1, "Step 1 by worker-3f9a2c1b: it did not use a value it was given.",
        failure_mode="information_withholding",
    )  # fmt: skip
    cause = cause_of("shop", "refund", RUN, verdict)
    signature = cause.signature
    assert (signature.role, signature.category, signature.failure_mode, signature.action) == (
        "worker", "agent", "information_withholding", "tool:lookup_order",
    )  # fmt: skip
    assert cause.gist == "step <n> by <agent>: it did not use a value it was given."
    assert is_pattern_id(cause.candidate_id()) and cause.candidate_id().startswith("p")


def test_an_undecided_verdict_brings_only_what_is_decided() -> None:
    guessed = [
        Candidate(step=1, agent="worker-3f9a2c1b", score=0.4),
        Candidate(step=0, agent="planner", score=0.3),
    ]
    undecided = _verdict("worker-3f9a2c1b", 1, "a guess", decided=False, candidates=guessed)
    alone = cause_of("shop", "refund", RUN, undecided)
    assert alone.kind == KIND_UNDECIDED and alone.candidate_id() == undecided_id("shop", "refund")
    dependency = undecided.model_copy(update={"category": "dependency", "dependency": "orders-api"})
    cause = cause_of("shop", "refund", RUN, dependency)
    assert not cause.undecided
    assert (cause.signature.dependency, cause.signature.role, cause.signature.action, cause.gist) == (
        "orders-api",
        None,
        None,
        "",
    )
    # never the pattern of a decided verdict with the same dependency
    decided = dependency.model_copy(update={"decided": True})
    assert cause_of("shop", "refund", RUN, decided).signature != cause.signature
    specification = undecided.model_copy(update={"category": "specification"})
    assert cause_of("shop", "refund", RUN, specification).signature.category == "specification"


def test_similar_reasons_are_one_pattern_and_different_ones_are_not() -> None:
    index = PatternIndex(90)
    first = cause_of(
        "shop",
        "refund",
        RUN,
        _verdict(
            "planner", 0, "Step 0 by planner: it overrode what it was given; a value first appears here."
        ),
    )
    reordered = cause_of(
        "shop",
        "refund",
        RUN,
        _verdict(
            "planner", 0, "Step 0 by planner: a value first appears here; it overrode what it was given."
        ),
    )
    other = cause_of(
        "shop", "refund", RUN, _verdict("planner", 0, "Step 0 by planner: a later step says it went wrong.")
    )
    opened, created = index.assign(first, 1.0)
    assert created and opened.id == first.candidate_id()
    assert index.assign(reordered, 2.0) == (opened, False)
    different, created = index.assign(other, 3.0)
    assert created and different.id != opened.id
    # another workflow never shares a pattern
    elsewhere = cause_of(
        "shop", "returns", RUN, _verdict("planner", 0, "Step 0 by planner: a later step says it went wrong.")
    )
    assert index.assign(elsewhere, 4.0)[0].id not in (opened.id, different.id)


def test_the_oldest_similar_pattern_wins_so_a_partial_index_answers_as_a_full_one() -> None:
    base = "step <n> by <agent>: it overrode what it was given; a value first appears here"
    middle = base + "; it did not use a value"
    late = middle + " it was given and more"
    signature = cause_of("s", "w", RUN, _verdict("planner", 0, base)).signature
    from otel_blame.patterns import Cause, Known

    full = PatternIndex(85)
    full.add(signature, Known("p000000000001", base, 1.0))
    full.add(signature, Known("p000000000002", late, 2.0))
    partial = PatternIndex(85)
    partial.add(signature, Known("p000000000001", base, 1.0))
    probe = Cause(signature, middle)
    assert full.find(probe) == partial.find(probe)


def test_ids_are_the_same_in_every_process() -> None:
    verdict = _verdict("planner", 0, "Step 0 by planner: a later step says it went wrong.")
    key = '["shop","refund","agent",null,"planner",null,"answer",true]'
    said = "step <n> by <agent>: a later step says it went wrong."
    digest = hashlib.blake2b(f"{key}\n{said}".encode(), digest_size=6).hexdigest()
    assert cause_of("shop", "refund", RUN, verdict).candidate_id() == "p" + digest
