"""GenAI content recorded as span events, as Strands Agents records it by default (``gen_ai.choice``
with the reply's content blocks, ``gen_ai.tool.message`` with a tool's arguments) or under
``gen_ai_latest_experimental`` (``gen_ai.client.inference.operation.details``)."""

from __future__ import annotations

import json

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otel_blame import semconv as sc
from otel_blame.conventions.genai import GenAI, GenAIEvents
from otel_blame.conventions.model import Kind, SpanView


def _span(name: str, *events: tuple[str, dict[str, str]]) -> Span:
    span = Span(name=name, span_id=b"\x01" * 8, trace_id=b"\x02" * 16)
    for event_name, attributes in events:
        event = span.events.add(name=event_name)
        event.attributes.extend(
            KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attributes.items()
        )
    return span


def test_a_choice_event_of_content_blocks_is_the_model_calls_output() -> None:
    blocks = [
        {"text": "Let me search."},
        {"toolUse": {"toolUseId": "c1", "name": "web_search", "input": {"q": "x"}}},
    ]
    span = _span("chat", (sc.EVENT_CHOICE, {"message": json.dumps(blocks), "finish_reason": "tool_use"}))
    view = SpanView(span=span, attributes={}, kind=Kind.LLM)
    assert GenAIEvents().output(view) == ('Let me search.\ntool_call web_search({"q": "x"})', "assistant")


def test_a_tool_spans_events_give_its_result_and_its_arguments() -> None:
    span = _span(
        "execute_tool web_search",
        (sc.EVENT_TOOL_MESSAGE, {"role": "tool", "content": '{"q": "x"}', "id": "c1"}),
        (sc.EVENT_CHOICE, {"message": json.dumps([{"text": "Error: ConnectionError - down"}]), "id": "c1"}),
    )
    view = SpanView(span=span, attributes={}, kind=Kind.TOOL)
    assert GenAIEvents().output(view) == ("Error: ConnectionError - down", "tool")
    assert GenAI().tool_arguments(view) == '{"q": "x"}'


def test_the_latest_conventions_operation_details_event() -> None:
    messages = [{"role": "assistant", "parts": [{"type": "text", "content": "About 1 million."}]}]
    span = _span("chat", (sc.EVENT_INFERENCE_DETAILS, {sc.GEN_AI_OUTPUT_MESSAGES: json.dumps(messages)}))
    assert GenAIEvents().output(SpanView(span=span, attributes={}, kind=Kind.LLM)) == (
        "About 1 million.",
        "assistant",
    )
