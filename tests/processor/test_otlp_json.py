"""OTLP/JSON round trips with hex ids, several documents, and clear errors."""

from __future__ import annotations

import json

import pytest

from otel_blame.conventions import sdk_spans_to_proto
from otel_blame.otlp_json import OTLPJSONError, parse_otlp_json, parse_traces_json, traces_to_json

from .spans import record_agent_run


def test_round_trip_keeps_hex_ids_and_all_fields() -> None:
    resource_spans = sdk_spans_to_proto(record_agent_run([("A", "x"), ("B", "y")], failed=True))
    text = traces_to_json(resource_spans)
    document = json.loads(text)
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32 and int(span["traceId"], 16)
    assert len(span["spanId"]) == 16
    parsed = parse_traces_json(text)
    assert list(parsed.resource_spans) == resource_spans


def test_many_documents_as_json_lines_and_logs() -> None:
    first = traces_to_json(sdk_spans_to_proto(record_agent_run([("A", "x")], failed=False)))
    second = traces_to_json(sdk_spans_to_proto(record_agent_run([("B", "y")], failed=False)))
    logs = json.dumps(
        {
            "resourceLogs": [
                {
                    "scopeLogs": [
                        {
                            "logRecords": [
                                {
                                    "traceId": "0af7651916cd43dd8448eb211c80319c",
                                    "spanId": "b7ad6b7169203331",
                                    "eventName": "e",
                                    "body": {"stringValue": "hello"},
                                }
                            ]
                        }
                    ]
                }
            ]
        }
    )
    spans, records = parse_otlp_json(f"{first}\n{second}\n{logs}\n".encode())
    assert len(spans) == 2
    record = records[0].scope_logs[0].log_records[0]
    assert record.span_id.hex() == "b7ad6b7169203331" and record.body.string_value == "hello"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "invalid JSON at line 1"),
        ("[1, 2]", "expected a JSON object"),
        ('{"foo": 1}', "neither resourceSpans nor resourceLogs"),
        ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "xyz"}]}]}]}', "is not a hex id"),
        ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "abcd"}]}]}]}', "expected 16 hex digits"),
        ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"kind": "NOPE"}]}]}]}', "document 1"),
    ],
)
def test_malformed_json_names_the_problem(text: str, message: str) -> None:
    with pytest.raises(OTLPJSONError, match=message):
        parse_otlp_json(text)
