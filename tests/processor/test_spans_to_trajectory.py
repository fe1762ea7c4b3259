"""Spans of every accepted instrumentation become the same Trajectory; broken traces still parse."""

from __future__ import annotations

import json

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from otel_blame import semconv as sc
from otel_blame.conventions import sdk_spans_to_proto, trajectories_from_spans, trajectory_from_spans
from otel_blame.trajectory import Outcome, StepKind

from .spans import record_agent_run

TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def _span(span_id: int, parent: int | None, name: str, start: int, **attrs: object) -> Span:
    return Span(
        trace_id=TRACE,
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        name=name,
        start_time_unix_nano=start,
        end_time_unix_nano=start + 10,
        attributes=[_kv(k.replace("__", "."), v) for k, v in attrs.items()],
    )


def _resource(*spans: Span) -> list[ResourceSpans]:
    return [ResourceSpans(scope_spans=[ScopeSpans(spans=list(spans))])]


def test_genai_spans_from_the_sdk_give_ordered_steps_task_and_outcome() -> None:
    spans = record_agent_run(
        [("Planner", "plan: multiply"), ("Solver", "the answer is 41")], failed=True, tool_after=1
    )
    trajectory = trajectory_from_spans(sdk_spans_to_proto(spans))
    assert [s.agent for s in trajectory.steps] == ["Planner", "Solver", "calculator"]
    assert [s.content for s in trajectory.steps][:2] == ["plan: multiply", "the answer is 41"]
    tool = trajectory.steps[2]
    assert tool.kind == StepKind.TOOL and tool.tool_name == "calculator" and tool.is_error
    assert trajectory.task.name == "solve" and trajectory.task.expected_output == "42"
    assert trajectory.outcome == Outcome.FAILURE
    root = next(s for s in spans if s.parent is None)
    assert trajectory.root_span_id == format(root.context.span_id, "016x")
    assert trajectory.trace_id == format(root.context.trace_id, "032x")


def test_step_index_attribute_wins_over_start_time() -> None:
    spans = _resource(
        _span(1, None, "invoke_workflow t", 0, gen_ai__operation__name="invoke_workflow"),
        _span(
            2,
            1,
            "invoke_agent B",
            100,
            gen_ai__agent__name="B",
            otel_blame__step__index=1,
            gen_ai__operation__name="invoke_agent",
            output__value="second",
        ),
        _span(
            3,
            1,
            "invoke_agent A",
            200,
            gen_ai__agent__name="A",
            otel_blame__step__index=0,
            gen_ai__operation__name="invoke_agent",
            output__value="first",
        ),
    )
    trajectory = trajectory_from_spans(spans)
    assert [s.content for s in trajectory.steps] == ["first", "second"]


def test_openinference_openllmetry_and_ag2_shapes() -> None:
    spans = _resource(
        _span(1, None, "crew", 0, openinference__span__kind="CHAIN", traceloop__workflow__name="research"),
        _span(
            2,
            1,
            "researcher",
            10,
            openinference__span__kind="AGENT",
            agent__name="Researcher",
            output__value="found 3 sources",
        ),
        _span(
            3,
            1,
            "search",
            20,
            openinference__span__kind="TOOL",
            tool__name="web_search",
            output__value="no results",
        ),
        _span(
            4,
            1,
            "writer.agent",
            30,
            traceloop__span__kind="agent",
            traceloop__entity__name="Writer",
            traceloop__entity__output=json.dumps({"content": "draft"}),
        ),
        _span(
            5,
            1,
            "execute_code Executor",
            40,
            ag2__span__type="code_execution",
            gen_ai__operation__name="execute_code",
            gen_ai__agent__name="Executor",
            ag2__code_execution__output="Traceback: boom",
            ag2__code_execution__exit_code=1,
        ),
    )
    trajectory = trajectory_from_spans(spans)
    assert trajectory.task.name == "research"
    steps = trajectory.steps
    assert [(s.agent, s.kind) for s in steps] == [
        ("Researcher", StepKind.MESSAGE),
        ("web_search", StepKind.TOOL),
        ("Writer", StepKind.MESSAGE),
        ("Executor", StepKind.CODE_EXECUTION),
    ]
    assert steps[1].content == "no results" and steps[2].content == "draft"
    assert steps[3].is_error and steps[3].content == "Traceback: boom"


def test_llm_span_under_agent_is_not_a_step_but_lends_content() -> None:
    spans = _resource(
        _span(1, None, "conversation", 0, gen_ai__operation__name="conversation"),
        _span(2, 1, "invoke_agent A", 10, gen_ai__operation__name="invoke_agent", gen_ai__agent__name="A"),
        _span(
            3,
            2,
            "chat gpt",
            11,
            gen_ai__operation__name="chat",
            gen_ai__output__messages=json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [
                            {"type": "text", "content": "hi"},
                            {"type": "tool_call", "name": "f", "arguments": {"x": 1}},
                        ],
                    }
                ]
            ),
        ),
    )
    trajectory = trajectory_from_spans(spans)
    assert len(trajectory.steps) == 1
    assert trajectory.steps[0].content == 'hi\ntool_call f({"x": 1})'


def test_content_from_log_records_joined_by_span_id() -> None:
    spans = _resource(
        _span(1, None, "w", 0, gen_ai__operation__name="invoke_workflow"),
        _span(2, 1, "chat m", 10, gen_ai__operation__name="chat", gen_ai__agent__name="A"),
        _span(3, 1, "chat m", 20, gen_ai__operation__name="chat", gen_ai__agent__name="B"),
    )
    details = LogRecord(
        trace_id=TRACE,
        span_id=(2).to_bytes(8, "big"),
        event_name=sc.EVENT_INFERENCE_DETAILS,
        attributes=[
            _kv(
                sc.GEN_AI_OUTPUT_MESSAGES,
                json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "from details"}]}]),
            )
        ],
    )
    body = AnyValue()
    message = body.kvlist_value.values.add(key="message")
    message.value.kvlist_value.values.add(key="content").value.string_value = "from choice"
    choice = LogRecord(
        trace_id=TRACE,
        span_id=(3).to_bytes(8, "big"),
        body=body,
        attributes=[_kv(sc.EVENT_NAME, sc.EVENT_CHOICE)],
    )
    logs = [ResourceLogs(scope_logs=[ScopeLogs(log_records=[details, choice])])]
    steps = trajectory_from_spans(spans, logs).steps
    assert [s.content for s in steps] == ["from details", "from choice"]


def test_cyclic_and_missing_parents_duplicates_and_no_root() -> None:
    cyclic = _resource(
        _span(
            2,
            3,
            "invoke_agent A",
            10,
            gen_ai__operation__name="invoke_agent",
            gen_ai__agent__name="A",
            output__value="a",
        ),
        _span(
            3,
            2,
            "invoke_agent B",
            20,
            gen_ai__operation__name="invoke_agent",
            gen_ai__agent__name="B",
            output__value="b",
        ),
        _span(
            3,
            2,
            "invoke_agent B",
            20,
            gen_ai__operation__name="invoke_agent",
            gen_ai__agent__name="B",
            output__value="b",
        ),
    )
    trajectory = trajectory_from_spans(cyclic)
    assert [s.agent for s in trajectory.steps] == ["A", "B"]  # the duplicate counted once
    assert trajectory.root_span_id is not None

    orphan = _resource(
        _span(
            5,
            99,
            "invoke_agent A",
            10,
            gen_ai__operation__name="invoke_agent",
            gen_ai__agent__name="A",
            otel_blame__task__outcome="failure",
        ),
    )
    trajectory = trajectory_from_spans(orphan)
    assert trajectory.root_span_id == (5).to_bytes(8, "big").hex()
    assert trajectory.outcome == Outcome.FAILURE


def test_error_status_without_outcome_attribute_is_failure() -> None:
    root = _span(1, None, "w", 0, gen_ai__operation__name="invoke_workflow")
    root.status.code = Status.STATUS_CODE_ERROR
    spans = _resource(root, _span(2, 1, "invoke_agent A", 5, gen_ai__operation__name="invoke_agent"))
    trajectory = trajectory_from_spans(spans)
    assert trajectory.outcome == Outcome.FAILURE and trajectory.steps[0].agent == "A"


def test_no_agent_steps_is_a_clear_error_and_many_traces_are_split() -> None:
    with pytest.raises(ValueError, match="no agent steps"):
        trajectory_from_spans(_resource(_span(1, None, "GET /", 0, http__method="GET")))
    with pytest.raises(ValueError, match="no spans"):
        trajectory_from_spans([])
    first = record_agent_run([("A", "x")], failed=False)
    second = record_agent_run([("B", "y")], failed=True)
    both = sdk_spans_to_proto(first + second)
    with pytest.raises(ValueError, match="2 traces"):
        trajectory_from_spans(both)
    found = trajectories_from_spans(both)
    assert [t.steps[0].agent for t in found] == ["A", "B"]
    assert [t.outcome for t in found] == [Outcome.SUCCESS, Outcome.FAILURE]


def test_declared_steps_win_over_other_instrumentations_in_the_same_trace() -> None:
    spans = _resource(
        _span(1, None, "invoke_workflow t", 0, gen_ai__operation__name="invoke_workflow"),
        _span(2, 1, "invoke_agent A", 10, gen_ai__operation__name="invoke_agent", gen_ai__agent__name="A",
              otel_blame__step__index=0, output__value="ours"),
        _span(3, 2, "invoke_agent A", 11, ag2__span__type="agent", gen_ai__operation__name="invoke_agent",
              gen_ai__agent__name="A", output__value="AG2's copy"),
        _span(4, 3, "chat m", 12, gen_ai__operation__name="chat", gen_ai__agent__name="A"),
    )  # fmt: skip
    trajectory = trajectory_from_spans(spans)
    assert [(s.agent, s.content) for s in trajectory.steps] == [("A", "ours")]


def test_a_genai_run_without_task_attributes_takes_its_task_from_the_outermost_agent_run() -> None:
    question = "What is 6 * 7?"
    spans = _resource(
        _span(1, None, "main", 0),
        _span(
            2,
            1,
            "invoke_agent Solver",
            1,
            gen_ai__operation__name="invoke_agent",
            gen_ai__agent__name="Solver",
            gen_ai__input__messages=json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": question}]}]
            ),
            gen_ai__output__messages=json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "41"}]}]
            ),
        ),
        _span(
            3,
            2,
            "chat m",
            2,
            gen_ai__operation__name="chat",
            gen_ai__output__messages=json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "6 * 7 = 41"}]}]
            ),
        ),
    )
    trajectory = trajectory_from_spans(spans)
    assert trajectory.task.input == question and trajectory.task.final_output == "41"
    assert trajectory.task.name == question and trajectory.task.workflow == "main"  # not "main" as its name
    assert [(s.agent, s.content) for s in trajectory.steps] == [("Solver", "6 * 7 = 41")]
