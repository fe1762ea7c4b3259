"""The latest GenAI conventions as another instrumentation writes them: spans made by
``opentelemetry-util-genai`` (the handler the contrib GenAI instrumentations share), read as a run.

What the latest conventions changed and how it reads (docs/semconv.md, "Two shapes of the
conventions"): the workflow's name (``gen_ai.workflow.name``) is the task's name; an ``invoke_agent``
span is an in-process (internal) or a remote (client) agent, a step either way; a tool's result is
``gen_ai.tool.call.result``; a ``plan`` span groups the planning model call and is no step of its own;
a framework's turn (``handle_conversation_turn``) groups like a workflow; a failed call's
``gen_ai.client.operation.exception`` log record marks its span's step as failed, with its text.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.trace import SpanKind

from otel_blame import semconv as sc
from otel_blame.conventions import build_trajectory, sdk_logs_to_proto, sdk_spans_to_proto

pytest.importorskip("opentelemetry.util.genai.handler")

from opentelemetry.util.genai.handler import TelemetryHandler  # noqa: E402
from opentelemetry.util.genai.types import (  # noqa: E402
    InputMessage,
    OutputMessage,
    Text,
    ToolCallRequest,
)

QUESTION = "How many people live in Paris?"


@pytest.fixture
def handler(capture, monkeypatch) -> Iterator[TelemetryHandler]:  # noqa: ANN001
    monkeypatch.setenv(sc.ENV_CAPTURE_MESSAGE_CONTENT, "SPAN_ONLY")
    yield TelemetryHandler(tracer_provider=capture.provider)


@pytest.fixture
def logs() -> Iterator[tuple[LoggerProvider, InMemoryLogRecordExporter]]:
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _said(text: str, role: str = "assistant") -> list[OutputMessage]:
    return [OutputMessage(role=role, parts=[Text(content=text)], finish_reason="stop")]


def _chat(handler: TelemetryHandler, reply: str, *, calls: list[ToolCallRequest] = ()) -> None:  # type: ignore[assignment]
    with handler.inference("openai", request_model="gpt-4o") as call:
        call.input_messages = [InputMessage(role="user", parts=[Text(content=QUESTION)])]
        parts = [Text(content=reply), *calls] if reply else list(calls)
        call.output_messages = [OutputMessage(role="assistant", parts=parts, finish_reason="stop")]


def test_a_run_in_the_latest_conventions_reads_as_its_steps(capture, handler) -> None:  # noqa: ANN001
    tracer = capture.provider.get_tracer("app")
    with handler.workflow("population_pipeline") as workflow:
        workflow.input_messages = [InputMessage(role="user", parts=[Text(content=QUESTION)])]
        with handler.invoke_local_agent(agent_name="planner", request_model="gpt-4o"):
            # the planning phase: its model call is the planner's step, the plan span none of its own
            with tracer.start_as_current_span(
                "plan planner",
                attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_PLAN, sc.GEN_AI_AGENT_NAME: "planner"},
            ):
                _chat(handler, "Plan: look up the population, then answer.")
        with handler.invoke_local_agent(agent_name="researcher", request_model="gpt-4o"):
            lookup = ToolCallRequest(arguments={"city": "Paris"}, name="population", id="call_1")
            _chat(handler, "", calls=[lookup])
            with handler.tool("population", tool_call_id="call_1") as tool:
                tool.arguments = {"city": "Paris"}
                tool.tool_result = "2100000"
            _chat(handler, "Paris has 2.1 million inhabitants.")
        # a remote agent: the client span is its step
        with handler.invoke_remote_agent("openai", agent_name="writer") as writer:
            writer.output_messages = _said("Answer: about 2.1 million people.")
        workflow.output_messages = _said("Answer: about 2.1 million people.")
    spans = capture.spans()
    assert {s.attributes[sc.GEN_AI_OPERATION_NAME] for s in spans} >= {
        "invoke_workflow",
        "plan",
        "execute_tool",
    }
    assert next(s for s in spans if s.name == "invoke_agent writer").kind is SpanKind.CLIENT
    trajectory = build_trajectory(sdk_spans_to_proto(spans)).trajectory
    assert trajectory.task.name == "population_pipeline"
    assert trajectory.task.input == QUESTION
    assert trajectory.task.final_output == "Answer: about 2.1 million people."
    assert [(s.agent, s.kind.value, s.content, s.tool_name) for s in trajectory.steps] == [
        ("planner", "message", "Plan: look up the population, then answer.", None),
        ("researcher", "message", 'tool_call population({"city": "Paris"})', None),
        ("researcher", "tool", "2100000", "population"),
        ("researcher", "message", "Paris has 2.1 million inhabitants.", None),
        ("writer", "message", "Answer: about 2.1 million people.", None),
    ]
    assert trajectory.steps[2].arguments == '{"city":"Paris"}'  # as the handler wrote them
    assert not any(step.is_error for step in trajectory.steps)


def test_a_failed_call_reads_from_its_client_operation_exception(capture, handler, logs) -> None:  # noqa: ANN001
    """The exception as the conventions record it for a GenAI client call: a WARN log record named
    ``gen_ai.client.operation.exception`` in the failed span's context, or a span event of that name."""
    logger_provider, records = logs
    logger = logger_provider.get_logger("app")
    tracer = capture.provider.get_tracer("app")
    with tracer.start_as_current_span(
        "handle_conversation_turn", attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_HANDLE_CONVERSATION_TURN}
    ):
        with handler.invoke_local_agent(agent_name="researcher"):
            _chat(handler, "I will look it up.")
            with tracer.start_as_current_span(
                "chat gpt-4o", kind=SpanKind.CLIENT, attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT}
            ):
                logger.emit(
                    LogRecord(
                        event_name=sc.EVENT_CLIENT_OPERATION_EXCEPTION,
                        severity_number=SeverityNumber.WARN,
                        attributes={
                            sc.EXCEPTION_TYPE: "RateLimitError",
                            sc.EXCEPTION_MESSAGE: "quota exceeded",
                        },
                    )
                )
        with handler.invoke_local_agent(agent_name="writer"):
            with tracer.start_as_current_span(
                "chat gpt-4o", kind=SpanKind.CLIENT, attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT}
            ) as failed:
                failed.add_event(
                    sc.EVENT_CLIENT_OPERATION_EXCEPTION,
                    {sc.EXCEPTION_TYPE: "APITimeoutError", sc.EXCEPTION_MESSAGE: "timed out"},
                )
    spans = capture.spans()
    (record,) = records.get_finished_logs()
    built = build_trajectory(sdk_spans_to_proto(spans), sdk_logs_to_proto([record]))
    steps = [(s.agent, s.content, s.is_error) for s in built.trajectory.steps]
    assert steps == [
        ("researcher", "I will look it up.", False),
        ("researcher", "RateLimitError: quota exceeded", True),
        ("writer", "APITimeoutError: timed out", True),
    ]
    assert built.trajectory.task.name == "handle_conversation_turn"  # the turn is the root, no step
    # without its log record, the first failure is not known from the span alone
    alone = build_trajectory(sdk_spans_to_proto(spans)).trajectory
    assert [s.is_error for s in alone.steps] == [False, False, True]


def test_a_plan_span_alone_is_no_step(capture) -> None:  # noqa: ANN001
    tracer = capture.provider.get_tracer("app")
    with tracer.start_as_current_span(
        "invoke_agent solver",
        attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT, sc.GEN_AI_AGENT_NAME: "solver"},
    ) as agent:
        with tracer.start_as_current_span(
            "plan solver", attributes={sc.GEN_AI_OPERATION_NAME: sc.OP_PLAN, sc.GEN_AI_AGENT_NAME: "solver"}
        ):
            pass
        agent.set_attribute(
            sc.GEN_AI_OUTPUT_MESSAGES, '[{"role": "assistant", "parts": [{"type": "text", "content": "42"}]}]'
        )
    trajectory = build_trajectory(sdk_spans_to_proto(capture.spans())).trajectory
    assert [(s.agent, s.content) for s in trajectory.steps] == [("solver", "42")]
