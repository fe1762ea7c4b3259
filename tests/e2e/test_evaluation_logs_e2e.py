"""The verdict as the GenAI conventions want it, through real Collectors: ``gen_ai.evaluation.result``
as an OTLP log record in the culprit span's context, carried by a Collector's logs pipeline; and a
downstream that takes no logs (Jaeger, a Collector without a logs pipeline) losing no span and no
verdict for it.

The chain: an app instrumented by otel-blame (the latest GenAI conventions) -> ``otel-blame serve``
(log records on, the default) -> a Collector running ``collector_config/tail_sampling.yaml``, whose
traces go to Jaeger and whose logs pipeline exports over OTLP/HTTP to a second Collector, whose debug
exporter prints each record it receives (the Collector deploy/build_components.sh builds has it).
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
import yaml
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_blame import semconv as sc
from otel_blame.instrumentation import configure, record_message, reset_configuration, task

from .harness import (
    COLLECTOR_BIN,
    COLLECTOR_CONFIG_DIR,
    JAEGER_BIN,
    BlameServer,
    Collector,
    Jaeger,
    ProcessGroup,
    http_get,
    iter_spans,
    jaeger_tags,
    missing_binary_reason,
    wait_until,
)

_missing = missing_binary_reason(COLLECTOR_BIN) or missing_binary_reason(JAEGER_BIN)
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(_missing is not None, reason=str(_missing)),
]

# a Collector that receives OTLP and prints every log record (its env: the harness's Collector ports)
PRINTING_LOGS = {
    "extensions": {"health_check": {"endpoint": "127.0.0.1:${env:OTELCOL_HEALTH_PORT}"}},
    "receivers": {
        "otlp": {
            "protocols": {
                "grpc": {"endpoint": "127.0.0.1:${env:OTELCOL_OTLP_GRPC_PORT}"},
                "http": {"endpoint": "127.0.0.1:${env:OTELCOL_OTLP_HTTP_PORT}"},
            }
        }
    },
    "exporters": {"debug": {"verbosity": "detailed"}},
    "service": {
        "extensions": ["health_check"],
        "telemetry": {"metrics": {"level": "none"}},
        "pipelines": {"logs": {"receivers": ["otlp"], "exporters": ["debug"]}},
    },
}
# a Collector with a traces pipeline only: its OTLP receiver has no logs service (gRPC UNIMPLEMENTED,
# HTTP 404), as a Collector set up for traces alone answers
TRACES_ONLY = {
    "extensions": {"health_check": {"endpoint": "127.0.0.1:${env:OTELCOL_HEALTH_PORT}"}},
    "receivers": PRINTING_LOGS["receivers"],
    "exporters": {"otlp/jaeger": {"endpoint": "${env:JAEGER_OTLP_ENDPOINT}", "tls": {"insecure": True}}},
    "service": {
        "extensions": ["health_check"],
        "telemetry": {"metrics": {"level": "none"}},
        "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["otlp/jaeger"]}},
    },
}


def _write(group: ProcessGroup, name: str, config: dict) -> Path:
    path = group.log_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def explain(group: ProcessGroup) -> str:
    return f"\n{group.logs()}"


def _failed_run(endpoint: str, service: str, answer: str) -> str:
    """One failed run of a small team, instrumented by otel-blame in the latest GenAI conventions and
    exported over OTLP/gRPC; its trace id."""
    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: service}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True)))
    configure(tracer_provider=provider, latest_genai_conventions=True)
    try:
        with task("multiply", input="What is 6*7?", expected_output="42") as run:
            record_message("user", "What is 6*7?", role="user")
            record_message("planner", "Plan: the solver multiplies 6 by 7.")
            record_message("solver", f"6*7 = {answer}.")
            run.set_outcome(False, final_output=f"6*7 = {answer}.", reason="wrong product")
        return run.trace_id_hex
    finally:
        reset_configuration()
        provider.shutdown()


def _blamed_trace(jaeger: Jaeger, trace_id: str) -> dict | None:
    trace = jaeger.trace(trace_id)
    if trace is None:
        return None
    spans = list(iter_spans(trace))
    culprits = [s for s in spans if jaeger_tags(s).get(sc.BLAME_CULPRIT) is True]
    roots = [s for s in spans if sc.BLAME_AGENT in jaeger_tags(s) and not s.get("references")]
    return {"culprit": culprits[0], "root": roots[0]} if culprits and roots else None


def _printed_records(collector: Collector) -> list[dict]:
    """The log records the debug exporter printed (detailed verbosity), as their fields."""
    text = collector.proc.log_path.read_text(errors="replace")
    records = []
    for chunk in text.split("LogRecord #")[1:]:
        fields: dict = {"attributes": {}}
        for line in chunk.splitlines():
            attribute = re.match(r"\s*-> ([\w.]+): (\w+)\((.*)\)$", line)
            if attribute:
                fields["attributes"][attribute.group(1)] = (attribute.group(2), attribute.group(3))
                continue
            field = re.match(r"(EventName|Trace ID|Span ID|SeverityText): ?(.*)$", line.strip())
            if field:
                fields[field.group(1)] = field.group(2).strip()
        records.append(fields)
    return records


def test_the_verdict_reaches_a_logs_backend_through_a_collectors_logs_pipeline(group: ProcessGroup, tmp_path):
    jaeger = Jaeger(group)
    printer = Collector(group, _write(group, "printing-logs", PRINTING_LOGS), "otelcol-printing-logs", {})
    collector = Collector(
        group,
        COLLECTOR_CONFIG_DIR / "tail_sampling.yaml",
        "otelcol-tail-sampling",
        {
            "JAEGER_OTLP_ENDPOINT": jaeger.otlp_grpc_endpoint,
            "LOGS_OTLP_ENDPOINT": f"http://127.0.0.1:{printer.http_port}",
            "OTELCOL_DECISION_WAIT": "1s",
        },
    )
    blame = BlameServer(
        group, "otel-blame", downstream=collector.otlp_grpc_endpoint, wal_dir=tmp_path / "wal"
    )
    trace_id = _failed_run(blame.otlp_grpc_endpoint, f"e2e-evaluation-{uuid.uuid4().hex[:8]}", "41")

    try:
        blamed = wait_until(
            lambda: _blamed_trace(jaeger, trace_id), timeout=90, what="the blamed trace in Jaeger"
        )
        (record,) = wait_until(
            lambda: [r for r in _printed_records(printer) if r.get("Trace ID") == trace_id],
            timeout=60,
            what="the evaluation log record at the end of the logs pipeline",
        )
    except TimeoutError as error:
        raise AssertionError(f"{error}{explain(group)}") from None
    culprit, root = blamed["culprit"], jaeger_tags(blamed["root"])
    assert jaeger_tags(culprit)[sc.GEN_AI_AGENT_NAME] == root[sc.BLAME_AGENT]
    # the conventions' event: named, in the context of the span it judges, with its four attributes
    assert record["EventName"] == sc.GEN_AI_EVALUATION_RESULT_EVENT
    assert record["Span ID"] == culprit["spanID"]
    attributes = record["attributes"]
    assert attributes[sc.GEN_AI_EVALUATION_NAME] == ("Str", sc.EVALUATION_FAILURE_ATTRIBUTION)
    assert attributes[sc.GEN_AI_EVALUATION_SCORE_LABEL] == ("Str", sc.EVALUATION_LABEL_CULPRIT)
    kind, score = attributes[sc.GEN_AI_EVALUATION_SCORE_VALUE]
    assert kind == "Double" and float(score) == pytest.approx(root[sc.BLAME_CONFIDENCE])
    assert attributes[sc.GEN_AI_EVALUATION_EXPLANATION] == ("Str", root[sc.BLAME_REASON])
    # and the span event stays on the culprit, for backends that show no logs (Jaeger)
    events = [
        log
        for log in culprit.get("logs", [])
        if any(f.get("value") == sc.GEN_AI_EVALUATION_RESULT_EVENT for f in log["fields"])
    ]
    assert len(events) == 1


def _metric(blame: BlameServer, name: str) -> float:
    status, body = http_get(f"http://127.0.0.1:{blame.http_port}/metrics")
    assert status == 200
    match = re.search(rf"^otel_blame_processor_{name}(?:_total)? (\S+)$", body.decode(), re.MULTILINE)
    return float(match.group(1)) if match else 0.0


@pytest.mark.parametrize("downstream", ["jaeger", "collector-without-logs-pipeline"])
def test_a_downstream_that_takes_no_logs_loses_no_span_and_no_verdict(
    group: ProcessGroup, tmp_path, downstream
):
    jaeger = Jaeger(group)
    env = {}
    endpoint = jaeger.otlp_grpc_endpoint
    if downstream != "jaeger":  # over OTLP/HTTP here: the refusal is a 404, not gRPC UNIMPLEMENTED
        collector = Collector(
            group,
            _write(group, "traces-only", TRACES_ONLY),
            "otelcol-traces-only",
            {"JAEGER_OTLP_ENDPOINT": jaeger.otlp_grpc_endpoint},
        )
        endpoint = f"http://127.0.0.1:{collector.http_port}"
        env = {"OTEL_BLAME_EXPORTER__PROTOCOL": "http"}
    blame = BlameServer(group, "otel-blame", downstream=endpoint, wal_dir=tmp_path / "wal", extra_env=env)
    service = f"e2e-no-logs-{uuid.uuid4().hex[:8]}"
    try:
        first = _failed_run(blame.otlp_grpc_endpoint, service, "41")
        wait_until(lambda: _blamed_trace(jaeger, first), timeout=90, what="the first blamed trace")
        wait_until(
            lambda: _metric(blame, "export_refused_log_records") == 1,
            timeout=30,
            what="the log record refused",
        )
        second = _failed_run(blame.otlp_grpc_endpoint, service, "43")
        wait_until(lambda: _blamed_trace(jaeger, second), timeout=90, what="the second blamed trace")
        wait_until(lambda: _metric(blame, "attributed_traces") == 2, timeout=30, what="both verdicts")
        wait_until(lambda: _metric(blame, "wal_pending_rows") == 0, timeout=30, what="the log emptied")
    except TimeoutError as error:
        raise AssertionError(f"{error}{explain(group)}") from None
    # the second verdict's record was not even written: the downstream had said it takes no logs
    assert _metric(blame, "evaluation_logs_refused") == 1
    assert _metric(blame, "export_refused_log_records") == 1
    assert _metric(blame, "export_rejected_items") == 0
    for trace_id in (first, second):  # every span of both runs, the blame on them
        spans = list(iter_spans(jaeger.trace(trace_id)))
        assert len(spans) == 4 and sum(jaeger_tags(s).get(sc.BLAME_CULPRIT) is True for s in spans) == 1
