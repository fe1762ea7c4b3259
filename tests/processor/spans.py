"""Small builders of real OpenTelemetry SDK spans for the processor tests."""

from __future__ import annotations

import json
from collections.abc import Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from otel_blame import semconv as sc


def output_messages(text: str, role: str = "assistant") -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def record_agent_run(
    steps: Sequence[tuple[str, str]],
    *,
    failed: bool,
    provider: TracerProvider | None = None,
    task_name: str = "solve",
    expected: str | None = "42",
    tool_after: int | None = None,
) -> list[ReadableSpan]:
    """One task: a workflow root with one ``invoke_agent`` span per (agent, text) step.

    With ``tool_after=i`` an ``execute_tool`` span follows step i. Returns the finished spans
    (from an in-memory exporter unless a provider is given)."""
    memory = InMemorySpanExporter()
    if provider is None:
        provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: "agents-under-test"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span(sc.workflow_span_name(task_name)) as root:
        root.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_WORKFLOW)
        root.set_attribute(sc.TASK_NAME, task_name)
        root.set_attribute(sc.TASK_INPUT, "What is six times seven?")
        if expected is not None:
            root.set_attribute(sc.TASK_EXPECTED_OUTPUT, expected)
        for position, (agent, text) in enumerate(steps):
            with tracer.start_as_current_span(sc.agent_span_name(agent)) as span:
                span.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_AGENT)
                span.set_attribute(sc.GEN_AI_AGENT_NAME, agent)
                span.set_attribute(sc.GEN_AI_OUTPUT_MESSAGES, output_messages(text))
            if tool_after == position:
                with tracer.start_as_current_span(sc.tool_span_name("calculator")) as tool:
                    tool.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_EXECUTE_TOOL)
                    tool.set_attribute(sc.GEN_AI_TOOL_NAME, "calculator")
                    tool.set_attribute(sc.GEN_AI_TOOL_CALL_RESULT, "Error: division by zero")
                    tool.set_status(Status(StatusCode.ERROR, "division by zero"))
        root.set_attribute(sc.TASK_OUTCOME, sc.OUTCOME_FAILURE if failed else sc.OUTCOME_SUCCESS)
        if failed:
            root.set_status(Status(StatusCode.ERROR, "wrong answer"))
    return list(memory.get_finished_spans())


def failing_search_run(status_code: int = 503) -> list[ReadableSpan]:
    """Planner plans; Researcher's web_search tool calls an HTTP API that answers ``status_code``;
    Researcher reports the failed search; Writer answers wrongly without the facts."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: "research-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")

    def agent(name: str, text: str) -> None:
        with tracer.start_as_current_span(sc.agent_span_name(name)) as span:
            span.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_AGENT)
            span.set_attribute(sc.GEN_AI_AGENT_NAME, name)
            span.set_attribute(sc.GEN_AI_OUTPUT_MESSAGES, output_messages(text))

    result = f"Error: HTTPError: {status_code} Service Unavailable from search.example.com"
    with tracer.start_as_current_span(sc.workflow_span_name("population")) as root:
        root.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_WORKFLOW)
        root.set_attribute(sc.TASK_NAME, "population")
        root.set_attribute(sc.TASK_INPUT, "What was the population of Lyon in 2020?")
        root.set_attribute(sc.TASK_EXPECTED_OUTPUT, "522250")
        agent("Planner", "Plan: Researcher searches the 2020 census figure for Lyon, Writer reports it.")
        with tracer.start_as_current_span(sc.agent_span_name("Researcher")) as researcher:
            researcher.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_AGENT)
            researcher.set_attribute(sc.GEN_AI_AGENT_NAME, "Researcher")
            with tracer.start_as_current_span(sc.tool_span_name("web_search")) as tool:
                tool.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_EXECUTE_TOOL)
                tool.set_attribute(sc.GEN_AI_TOOL_NAME, "web_search")
                with tracer.start_as_current_span("GET", kind=SpanKind.CLIENT) as http:
                    http.set_attribute("http.request.method", "GET")
                    http.set_attribute(sc.SERVER_ADDRESS, "search.example.com")
                    http.set_attribute(sc.URL_FULL, "https://search.example.com/q?lyon+population")
                    http.set_attribute(sc.HTTP_RESPONSE_STATUS_CODE, status_code)
                    http.set_status(Status(StatusCode.ERROR))
                tool.set_attribute(sc.GEN_AI_TOOL_CALL_RESULT, result)
                tool.set_status(Status(StatusCode.ERROR, f"HTTP {status_code}"))
            researcher.set_attribute(
                sc.GEN_AI_OUTPUT_MESSAGES, output_messages(f"The search failed: {result}. No figure found.")
            )
        agent("Writer", "The population of Lyon in 2020 was about 500000.")
        root.set_attribute(sc.TASK_OUTCOME, sc.OUTCOME_FAILURE)
        root.set_status(Status(StatusCode.ERROR, "wrong answer"))
    return list(memory.get_finished_spans())
