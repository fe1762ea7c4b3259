"""Components on their own: configuration, wire-level splitting, the write-ahead log, detection."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from otel_blame import semconv as sc
from otel_blame.processor.config import ConfigError, DetectionConfig, load_config
from otel_blame.processor.decision import FailureDetector
from otel_blame.processor.wal import WALFull, WriteAheadLog
from otel_blame.processor.wire import DecodeError, split_traces


def test_yaml_then_environment_then_flags(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "assembly:\n  quiet_period: 3\n  max_traces: 50\nexporter:\n  endpoint: down:4317\n"
        "receivers:\n  auth_token: from-file\n"
    )
    environ = {
        "OTEL_BLAME_ASSEMBLY__MAX_TRACES": "70",
        "OTEL_BLAME_RECEIVERS__AUTH_TOKEN": "12345",
        "OTEL_BLAME_MODEL": "ignored: belongs to the LLM client",
        "OTEL_BLAME_ATTRIBUTION__LLM__MODEL": "gpt-x",
    }
    config = load_config(path, environ=environ, overrides={"assembly": {"quiet_period": 0.5}})
    assert config.assembly.quiet_period == 0.5
    assert config.assembly.max_traces == 70
    assert config.exporter.endpoint == "down:4317"
    assert (
        config.receivers.auth_token is not None and config.receivers.auth_token.get_secret_value() == "12345"
    )
    assert "12345" not in repr(config) and "12345" not in config.model_dump_json()
    assert config.attribution.llm is not None and config.attribution.llm.model == "gpt-x"


@pytest.mark.parametrize(
    ("yaml_text", "environ", "message"),
    [
        ("assembly:\n  quiet_perod: 1\n", {}, "assembly.quiet_perod: unknown key"),
        ("", {"OTEL_BLAME_WAL__MAX_BYTES": "lots"}, "wal.max_bytes"),
        (
            "receivers:\n  grpc_endpoint: nowhere\n",
            {},
            "receivers.grpc_endpoint: Value error, expected HOST:PORT",
        ),
        ("exporter:\n  protocol: carrier-pigeon\n", {}, "exporter.protocol"),
        ("- a list\n", {}, "expected a mapping"),
        ("a: [unclosed\n", {}, "not valid YAML"),
    ],
)
def test_bad_configuration_names_the_key(tmp_path: Path, yaml_text: str, environ: dict, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(path, environ=environ)


def _span(trace: bytes, span_id: int, parent: bytes = b"", **attrs: str) -> Span:
    return Span(
        trace_id=trace,
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent,
        name=f"s{span_id}",
        attributes=[
            KeyValue(key=k.replace("__", "."), value=AnyValue(string_value=v)) for k, v in attrs.items()
        ],
    )


def test_split_by_trace_keeps_resources_scopes_and_every_span() -> None:
    t1, t2 = os.urandom(16), os.urandom(16)
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(
                    attributes=[KeyValue(key="service.name", value=AnyValue(string_value="a"))]
                ),
                schema_url="https://schema/1",
                scope_spans=[
                    ScopeSpans(
                        scope=InstrumentationScope(name="s1"),
                        spans=[
                            _span(t1, 1),
                            _span(t2, 2, b"\0" * 7 + b"\x09", gen_ai__agent__name="x"),
                            _span(t1, 3, b"\0" * 7 + b"\1"),
                        ],
                    ),
                    ScopeSpans(
                        scope=InstrumentationScope(name="s2"), spans=[_span(t2, 4, b"\0" * 7 + b"\2")]
                    ),
                ],
            ),
            ResourceSpans(scope_spans=[ScopeSpans(spans=[_span(t1, 5, b"\0" * 7 + b"\1")])]),
        ]
    )
    groups = {g.trace_id: g for g in split_traces(request.SerializeToString(), lambda span: "failed")}
    assert set(groups) == {t1, t2}
    one = ExportTraceServiceRequest.FromString(groups[t1].payload)
    assert [[[s.span_id[-1] for s in ss.spans] for ss in rs.scope_spans] for rs in one.resource_spans] == [
        [[1, 3]],
        [[5]],
    ]
    assert one.resource_spans[0].resource == request.resource_spans[0].resource
    assert one.resource_spans[0].schema_url == "https://schema/1"
    assert one.resource_spans[0].scope_spans[0].scope.name == "s1"
    assert groups[t1].items == 3 and groups[t1].has_root and groups[t1].root_failure == "failed"
    assert not groups[t1].has_agent and groups[t2].has_agent and not groups[t2].has_root
    # payloads concatenate into one valid request holding everything
    merged = ExportTraceServiceRequest.FromString(groups[t1].payload + groups[t2].payload)
    assert sum(len(ss.spans) for rs in merged.resource_spans for ss in rs.scope_spans) == 5
    with pytest.raises(DecodeError):
        split_traces(b"\xff\xff", lambda span: None)


def test_wal_durable_bounded_and_recovered(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, max_bytes=1000)
    first = wal.append("traces", b"a" * 400, parts=2)
    second = wal.append("logs", b"b" * 400, parts=1)
    with pytest.raises(WALFull):
        wal.append("traces", b"c" * 400, parts=1)
    wal.release([second])
    wal.release([first])  # one of two parts
    wal.close()
    reopened = WriteAheadLog(tmp_path, max_bytes=1000)
    rows = list(reopened.recovered())
    assert [(r.row_id, r.kind, r.body) for r in rows] == [(first, "traces", b"a" * 400)]
    assert reopened.size_bytes == 400
    reopened.adopt(rows[0], 1)
    reopened.release([first])
    reopened.close()
    assert list(WriteAheadLog(tmp_path, max_bytes=1000).recovered()) == []


def test_failure_signals_are_configurable() -> None:
    def root(**attrs: object) -> Span:
        span = Span(name="root")
        for key, value in attrs.items():
            kv = span.attributes.add(key=key.replace("__", "."))
            if isinstance(value, float):
                kv.value.double_value = value
            else:
                kv.value.string_value = str(value)
        return span

    detector = FailureDetector(DetectionConfig(evaluation_score_threshold=0.5))
    assert detector.failure_reason(root()) is None
    assert detector.failure_reason(root(otel_blame__task__outcome="failure")) is not None
    assert detector.failure_reason(root(otel_blame__task__outcome="success")) is None
    assert detector.failure_reason(root(gen_ai__evaluation__score__value=0.2)) is not None
    assert detector.failure_reason(root(gen_ai__evaluation__score__value=0.9)) is None
    errored = root()
    errored.status.code = Status.STATUS_CODE_ERROR
    assert detector.failure_reason(errored) is not None
    excepted = root()
    excepted.events.add(name=sc.EXCEPTION_EVENT)
    assert detector.failure_reason(excepted) is not None
    scored = root()
    event = scored.events.add(name=sc.GEN_AI_EVALUATION_RESULT_EVENT)
    event.attributes.add(key=sc.GEN_AI_EVALUATION_SCORE_VALUE).value.double_value = 0.1
    assert detector.failure_reason(scored) is not None
    lenient = FailureDetector(DetectionConfig(root_error=False, root_exception_event=False))
    assert lenient.failure_reason(errored) is None and lenient.failure_reason(excepted) is None


def test_workflow_span_with_a_remote_parent_is_a_root() -> None:
    trace = os.urandom(16)
    workflow = _span(trace, 1, b"\1" * 8, gen_ai__operation__name="invoke_workflow")
    workflow.flags = 0x300  # the parent came from another service
    plain_remote = _span(trace, 2, b"\2" * 8)
    plain_remote.flags = 0x300
    local = _span(trace, 3, b"\3" * 8)
    local.flags = 0x100
    for spans, is_root in (([workflow], True), ([plain_remote], False), ([local], False)):
        body = ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
        ).SerializeToString()
        assert split_traces(body, lambda span: None)[0].has_root is is_root
