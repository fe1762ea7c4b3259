"""CrewAI under OpenInference, from spans recorded on a real run.

CrewAI cannot be installed beside this project's pins (``crewai`` 1.15.30 needs ``openai<3`` and
``mcp<2``; the project pins ``openai`` 3.54.0 and ``mcp`` 2.3.0), so ``data/crewai_openinference.json``
was recorded in a separate virtualenv: ``crewai`` 1.15.30, ``openinference-instrumentation-crewai``
1.1.21, ``opentelemetry-sdk`` 1.45.2, a two-agent crew (Researcher, Writer) against the scripted
LLM, spans from the SDK's InMemorySpanExporter encoded by the SDK's OTLP encoder. The agents' spans
are named ``Researcher._execute_core``: the agent is ``Researcher``, never the method name."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_blame.conventions import build_trajectory

from . import apps

RECORDED = Path(__file__).parent / "data" / "crewai_openinference.json"


def test_crewai_agents_are_roles_not_method_names_and_the_researcher_is_blamed(sink, make_processor) -> None:  # noqa: ANN001
    request = json_format.Parse(RECORDED.read_text(), ExportTraceServiceRequest())
    built = build_trajectory(list(request.resource_spans))
    trajectory = built.trajectory
    assert [(s.agent, s.content) for s in trajectory.steps] == [
        ("Researcher", apps.FABRICATED),
        ("Writer", apps.ANSWER),
    ]
    assert built.notes.agent_unnamed == 0

    # through the real processor: the recorded request as the Collector would send it, then a late verdict
    import grpc
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

    processor = make_processor()
    with grpc.insecure_channel(processor.grpc_endpoint) as channel:
        TraceServiceStub(channel).Export(request, timeout=10)
    sink.wait_for_spans(3, timeout=20)
    answer = processor.submit_verdict(
        trajectory.trace_id, "failure", expected_output="about 2.1 million people"
    )
    assert answer["status"] == "attributed"
    assert answer["agent"] == "Researcher" and answer["step"] == 0
