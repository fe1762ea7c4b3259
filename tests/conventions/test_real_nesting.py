"""Real third-party telemetry read as it nests (issue 25): every model call and tool call is a step of
the agent it ran in, grouping spans add only what nothing below them says, agents are named by what the
telemetry says (never the service or the host), and a span tree reads like the same spans over OTLP."""

from __future__ import annotations

import copy
import gzip
import json
from itertools import count
from pathlib import Path

import pytest

from otel_blame.conventions import build_trajectory
from otel_blame.loaders import MAX_GUNZIPPED_BYTES, TrajectoryFormatError, load_saved_run, load_trajectory
from otel_blame.otlp_json import traces_to_json
from otel_blame.span_tree import SpanTreeError, span_tree_to_otlp
from otel_blame.trajectory import Outcome, StepKind

from . import span_trees as st


def _built(tree: dict):  # noqa: ANN202
    return build_trajectory(span_tree_to_otlp(tree))


def _names(tree: dict) -> dict[str, str]:
    return {span["span_id"]: span["span_name"] for span in st.spans_of(tree)}


def test_every_model_call_and_tool_call_is_a_step_of_its_agent_on_its_own_span() -> None:
    tree = st.gaia_run()
    trajectory = _built(tree).trajectory
    names = _names(tree)
    spans = [names[step.span_id] for step in trajectory.steps]
    assert spans == [
        "LiteLLMModel.__call__",  # the manager's facts survey
        "LiteLLMModel.__call__",  # its plan
        "LiteLLMModel.__call__",  # its code calling the searcher
        "LiteLLMModel.__call__",  # the searcher's plan
        "LiteLLMModel.__call__",  # web_search call
        "SearchInformationTool",
        "LiteLLMModel.__call__",  # page_down call
        "PageDownTool",
        "LiteLLMModel.__call__",  # final_answer call
        "Step 1",  # the manager's code run: what the searcher's answer printed
        "LiteLLMModel.__call__",
        "FinalAnswerTool",
        "Step 2",  # its code run's logs
        "LiteLLMModel.__call__",  # the formatting call outside both agents
    ]
    assert trajectory.steps[1].content == st.MANAGER_PLAN
    assert trajectory.steps[4].content == 'tool_call web_search({"query": "NeurIPS 2022 Yuri"})'
    assert [s.kind for s in trajectory.steps if names[s.span_id] == "Step 1"] == [StepKind.CODE_EXECUTION]
    # a ToolCallingAgent's "Step N" output repeats its tool's: no step of its own
    assert sum(1 for s in trajectory.steps if s.content == "Results: openreview.net") == 1


def test_failed_and_empty_tool_calls_are_tool_steps_with_their_error_and_arguments() -> None:
    trajectory = _built(st.gaia_run()).trajectory
    page_down = next(s for s in trajectory.steps if s.tool_name == "page_down")
    assert page_down.kind == StepKind.TOOL and page_down.is_error
    assert st.PAGE_DOWN_ERROR in page_down.content and page_down.arguments == '{"": ""}'
    final = next(s for s in trajectory.steps if s.tool_name == "final_answer")
    assert final.kind == StepKind.TOOL and final.content == "" and final.arguments == '["0"]'
    # the failed "Step 2" around the failed tool says nothing the tool step does not
    assert sum(1 for s in trajectory.steps if s.is_error) == 1


def test_agents_are_named_by_the_telemetry_never_the_service_the_host_or_the_question() -> None:
    built = _built(st.gaia_run())
    agents = [step.agent for step in built.trajectory.steps]
    assert set(agents) == {"CodeAgent", "search_agent", "answer_single_question"}
    assert agents[:3] == ["CodeAgent"] * 3 and agents[3:9] == ["search_agent"] * 6
    assert agents[9:13] == ["CodeAgent"] * 4
    # the formatting call runs outside both agents; its prompt quotes "You are Van Helsing"
    assert agents[13] == "answer_single_question"
    assert not {st.SERVICE, st.HOST, "Van Helsing"} & set(agents)
    assert built.notes.agent_unnamed == 1


def test_two_managed_agents_are_told_apart_by_their_tools() -> None:
    tree = st.gaia_run()
    manager = next(s for s in st.spans_of(tree) if s["span_name"] == "CodeAgent.run")
    manager["span_attributes"].update(
        {
            "smolagents.managed_agents.0.name": "reader",
            "smolagents.managed_agents.0.tools_names": '["inspect_file_as_text"]',
            "smolagents.managed_agents.1.name": "search_agent",
            "smolagents.managed_agents.1.tools_names": '["final_answer", "page_down", "web_search"]',
        }
    )
    agents = {step.agent for step in _built(tree).trajectory.steps}
    assert "search_agent" in agents and "reader" not in agents


def test_the_task_comes_from_the_agent_run_and_the_answer_from_it_or_a_final_answer_line() -> None:
    tree = st.gaia_run()
    task = _built(tree).trajectory.task
    assert task.input == st.TASK and task.final_output == "0"
    assert task.name == st.QUESTION  # the question it asks, not the root span "main"
    assert task.workflow == "main"  # runs of the same program still share a workflow
    manager = next(s for s in st.spans_of(tree) if s["span_name"] == "CodeAgent.run")
    del manager["span_attributes"]["output.value"]
    assert _built(tree).trajectory.task.final_output == "0"  # from the "FINAL ANSWER: 0" line


def test_an_agent_run_that_ended_in_an_error_is_a_failure_else_the_outcome_stays_unknown() -> None:
    tree = st.gaia_run()
    assert _built(tree).trajectory.outcome == Outcome.UNKNOWN
    manager = next(s for s in st.spans_of(tree) if s["span_name"] == "CodeAgent.run")
    manager["status_code"] = "Error"
    manager["status_message"] = "AgentMaxStepsError: reached max steps"
    trajectory = _built(tree).trajectory
    assert trajectory.outcome == Outcome.FAILURE and "AgentMaxStepsError" in (trajectory.outcome_reason or "")
    manager["status_code"] = "Unset"
    manager["events"] = [{"Name": "exception", "Attributes": {"exception.type": "ValueError"}}]
    assert _built(tree).trajectory.outcome == Outcome.FAILURE


def test_a_code_run_that_failed_without_a_tool_is_a_failed_code_step() -> None:
    tree = st.gaia_run()
    step_2 = [s for s in st.spans_of(tree) if s["span_name"] == "Step 2"][-1]  # the manager's
    del step_2["span_attributes"]["output.value"]
    step_2["child_spans"].pop()  # no tool: the code itself raised
    step_2["status_code"] = "Error"
    step_2["events"] = [
        {
            "Name": "exception",
            "Attributes": {"exception.type": "InterpreterError", "exception.message": "bad"},
        }
    ]
    trajectory = _built(tree).trajectory
    failed = [s for s in trajectory.steps if s.is_error and s.kind == StepKind.CODE_EXECUTION]
    assert len(failed) == 1 and failed[0].content == "InterpreterError: bad"


def test_a_span_tree_and_the_same_spans_over_otlp_give_the_same_trajectory(tmp_path: Path) -> None:
    tree = st.gaia_run()
    tree_file = tmp_path / "run.json"
    tree_file.write_text(json.dumps(tree))
    otlp_file = tmp_path / "run.otlp.json"
    otlp_file.write_text(traces_to_json(span_tree_to_otlp(copy.deepcopy(tree))))
    from_tree, from_otlp = load_trajectory(tree_file), load_trajectory(otlp_file)
    assert from_tree.model_dump(exclude={"source"}) == from_otlp.model_dump(exclude={"source"})
    # the first step's span is the fourth to start: "2025-03-19T17:00:03", read as UTC
    assert from_tree.steps[0].start_time_unix_nano == 1742403603 * 10**9


def test_gzipped_files_read_the_same_and_broken_ones_say_why(tmp_path: Path) -> None:
    tree = st.gaia_run()
    plain, packed = tmp_path / "run.json", tmp_path / "run.json.gz"
    plain.write_text(json.dumps(tree))
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert load_trajectory(packed).model_dump(exclude={"source"}) == load_trajectory(plain).model_dump(
        exclude={"source"}
    )
    assert load_saved_run(packed).trajectory.steps
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(packed.read_bytes()[: len(packed.read_bytes()) // 2])
    with pytest.raises(TrajectoryFormatError, match="truncated gzip"):
        load_trajectory(cut)
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as handle:
        chunk = b" " * (1 << 24)
        for _ in range(MAX_GUNZIPPED_BYTES // len(chunk) + 1):
            handle.write(chunk)
    with pytest.raises(TrajectoryFormatError, match="larger than"):
        load_trajectory(bomb)


def test_malformed_span_trees_are_refused_with_the_place_and_the_reason(tmp_path: Path) -> None:
    tree = st.gaia_run()
    tree["spans"][0]["child_spans"][0]["span_id"] = "not-hex"
    with pytest.raises(SpanTreeError, match=r"spans\[0\]\.child_spans\[0\]\.span_id: 'not-hex'"):
        span_tree_to_otlp(tree)
    bad = tmp_path / "bad.json"
    tree = st.gaia_run()
    tree["spans"][0]["duration"] = "an hour"
    bad.write_text(json.dumps(tree))
    with pytest.raises(TrajectoryFormatError, match="not an ISO 8601 duration"):
        load_trajectory(bad)
    deep: dict = {"span_id": "1" * 16, "span_name": "x", "child_spans": []}
    node = deep
    for number in range(2, 2_100):
        child = {"span_id": f"{number:016x}", "span_name": "x", "child_spans": []}
        node["child_spans"].append(child)
        node = child
    with pytest.raises(SpanTreeError, match="nested more than"):
        span_tree_to_otlp({"trace_id": st.TRACE_ID, "spans": [deep]})


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504, 599])
def test_an_http_429_or_5xx_on_a_tool_span_is_a_failing_dependency_even_without_an_error_status(
    status: int,
) -> None:
    tree = st.gaia_run()
    search = next(s for s in st.spans_of(tree) if s["span_name"] == "SearchInformationTool")
    search["span_attributes"]["http.response.status_code"] = status  # the span's status stays OK
    failures = _built(tree).trajectory.dependency_failures
    assert [(f.name, f.kind, f.detail) for f in failures if f.span_id == search["span_id"]] == [
        ("web_search", "http_status", f"HTTP {status}")
    ]


@pytest.mark.parametrize("status", [200, 404, 499, 600])
def test_other_http_statuses_on_an_ok_tool_span_are_not_a_failing_dependency(status: int) -> None:
    tree = st.gaia_run()
    search = next(s for s in st.spans_of(tree) if s["span_name"] == "SearchInformationTool")
    search["span_attributes"]["http.response.status_code"] = status
    failures = _built(tree).trajectory.dependency_failures
    assert not [f for f in failures if f.span_id == search["span_id"]]


def test_a_tool_called_with_an_argument_it_does_not_take_is_the_callers_fault_not_a_dependency() -> None:
    from otel_blame.attribution.registry import create_method

    trajectory = _built(st.gaia_run()).trajectory
    page_down = next(s for s in trajectory.steps if s.tool_name == "page_down")
    assert page_down.is_error and "unexpected keyword argument" in page_down.content
    assert not [f for f in trajectory.dependency_failures if f.step == page_down.index]
    verdict = create_method("ranker").attribute(trajectory)
    assert verdict.category != "dependency" and verdict.dependency is None


def test_a_chain_with_a_model_call_inside_a_tool_is_read_as_the_tools() -> None:
    """A tool that runs a chain of its own (LangChain's tools do): the chain's model call is the tool's
    work, not a step, and the chain around it adds nothing (this shape raised a KeyError once)."""
    t = st.Tree()
    summary = "A summary of the page."
    chain = t.span("summarise", "CHAIN", t.llm(summary), output__value=summary)
    tool = t.tool("VisitTool", "visit_page", {"url": "https://example.com"}, summary)
    tool["child_spans"].append(chain)
    chain["parent_span_id"] = tool["span_id"]
    agent = t.span(
        "ToolCallingAgent.run",
        "AGENT",
        t.llm(calls=[("visit_page", {"url": "https://example.com"})]),
        tool,
        t.llm("The page says it is a summary."),
        input__value=json.dumps({"task": "Read the page."}),
    )
    st.stamp(agent, count(0))
    trajectory = _built({"trace_id": st.TRACE_ID, "spans": [agent]}).trajectory
    names = _names({"spans": [agent]})
    assert [names[step.span_id] for step in trajectory.steps] == [
        "LiteLLMModel.__call__",
        "VisitTool",
        "LiteLLMModel.__call__",
    ]
    assert trajectory.steps[1].content == summary
