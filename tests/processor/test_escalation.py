"""``attribution.escalation`` in the processor: validated config, the runner's verdicts, the spans."""

from __future__ import annotations

import json
import time

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame import semconv as sc
from otel_blame.attribution.calibration import Calibration, CalibrationPoint
from otel_blame.attribution.llm_settings import LLMSettings
from otel_blame.conventions import attributes_to_dict, sdk_spans_to_proto, trajectory_from_spans
from otel_blame.processor.attributor import AttributionRunner, uses_llm
from otel_blame.processor.config import AttributionConfig, ConfigError, load_config
from otel_blame.processor.pipeline import BlameProcessor
from otel_blame.redaction import Redactor
from tests.ports import reserve_port
from tests.support import Reply, ScriptedLLM
from tests.support.decided import ALWAYS_DECIDED, NEVER_DECIDED, set_decided_threshold

from .conftest import processor_overrides
from .spans import record_agent_run

SECRET = "Ab3_dE-fGh1_jK2-lMn3_oP4-qRs5"
CONFIRM = json.dumps({"decisive": True, "confidence": 0.9, "reason": "the made-up value"})


def _llm(base_url: str) -> dict:
    return {"base_url": base_url, "api_key": "sk-test-000000000000000000000", "model": "m",
            "max_retries": 1, "backoff_seconds": 0.0}  # fmt: skip


def _failed_run():  # noqa: ANN202
    steps = [("Planner", "Plan: look it up."), ("Solver", f"Six times seven is 41 (key sk-proj-{SECRET})")]
    return trajectory_from_spans(sdk_spans_to_proto(record_agent_run(steps, failed=True)))


def test_the_setting_is_validated_read_from_yaml_and_env(tmp_path) -> None:  # noqa: ANN001
    assert load_config(environ={}).attribution.escalation == "undecided"
    environ = {"OTEL_BLAME_ATTRIBUTION__ESCALATION": "never"}
    assert load_config(environ=environ).attribution.escalation == "never"
    path = tmp_path / "config.yaml"
    path.write_text("attribution:\n  escalation: always\n")
    assert load_config(path, environ={}).attribution.escalation == "always"
    with pytest.raises(ConfigError, match="attribution.escalation: Input should be 'never', 'undecided'"):
        load_config(environ={"OTEL_BLAME_ATTRIBUTION__ESCALATION": "sometimes"})


def test_always_without_an_endpoint_stops_the_start() -> None:
    with pytest.raises(ConfigError, match="attribution.escalation: always: no LLM configured"):
        AttributionRunner(AttributionConfig(method="heuristic", escalation="always"))
    runner = AttributionRunner(AttributionConfig(method="heuristic"))  # undecided: nothing changes
    assert runner.method.name == "heuristic"


def test_what_sends_content_to_an_llm() -> None:
    endpoint = LLMSettings(base_url="http://127.0.0.1:9/v1")
    assert not uses_llm(AttributionConfig())
    assert uses_llm(AttributionConfig(llm=endpoint))
    assert not uses_llm(AttributionConfig(llm=endpoint, escalation="never"))
    assert uses_llm(AttributionConfig(method="all_at_once", escalation="never"))


def test_an_undecided_verdict_is_escalated_with_redacted_content(monkeypatch) -> None:  # noqa: ANN001
    set_decided_threshold(monkeypatch, NEVER_DECIDED)
    with ScriptedLLM([], default=CONFIRM) as server:
        runner = AttributionRunner(AttributionConfig(method="heuristic", llm=_llm(server.base_url)))
        outcome = runner.attribute(_failed_run())
    answer = outcome.attribution
    assert answer is not None and not outcome.fell_back
    assert answer.method == "heuristic+guided_check" and answer.decided and answer.cost.llm_calls == 1
    assert server.calls == 1
    sent = json.dumps(server.requests)
    assert SECRET not in sent and "[REDACTED:api_key]" in sent


def test_a_decided_verdict_spends_nothing(monkeypatch) -> None:  # noqa: ANN001
    set_decided_threshold(monkeypatch, ALWAYS_DECIDED)
    with ScriptedLLM([], default=CONFIRM) as server:
        runner = AttributionRunner(AttributionConfig(method="heuristic", llm=_llm(server.base_url)))
        answer = runner.attribute(_failed_run()).attribution
    assert server.calls == 0 and answer is not None and answer.method == "heuristic" and answer.decided


def test_a_down_endpoint_keeps_the_offline_verdict_as_a_counted_fallback(monkeypatch) -> None:  # noqa: ANN001
    set_decided_threshold(monkeypatch, NEVER_DECIDED)
    config = AttributionConfig(method="heuristic", llm=_llm(f"http://127.0.0.1:{reserve_port()}/v1"))
    outcome = AttributionRunner(config).attribute(_failed_run())
    assert outcome.fell_back and outcome.attribution is not None
    assert outcome.attribution.method == "heuristic(fallback:guided_check)"
    assert "APIConnectionError" in (outcome.problem or "") and not outcome.attribution.decided


def test_an_llm_past_the_deadline_keeps_the_offline_verdict(monkeypatch) -> None:  # noqa: ANN001
    set_decided_threshold(monkeypatch, NEVER_DECIDED)
    with ScriptedLLM([], default=Reply(content=CONFIRM, delay_seconds=30.0)) as server:
        config = AttributionConfig(method="heuristic", llm=_llm(server.base_url), timeout=0.5)
        started = time.monotonic()
        outcome = AttributionRunner(config).attribute(_failed_run())
        waited = time.monotonic() - started
    assert outcome.fell_back and outcome.attribution is not None
    assert outcome.attribution.method == "heuristic(fallback:guided_check)"
    assert "deadline" in outcome.attribution.reason and server.calls == 1
    assert waited < 15  # cut short by the 0.5 s deadline, not the 30 s answer (a margin for load)


def test_the_calibration_maps_offline_verdicts_only(monkeypatch, tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "calibration.json"
    points = [CalibrationPoint(raw=0.5, calibrated=0.01, runs=10, low=0.0, high=1.0)]
    Calibration(method="heuristic", target="agent", runs=10, points=points).save(path)
    set_decided_threshold(monkeypatch, NEVER_DECIDED)
    with ScriptedLLM([], default=CONFIRM) as server:
        config = AttributionConfig(method="heuristic", llm=_llm(server.base_url), calibration=path)
        escalated = AttributionRunner(config).attribute(_failed_run()).attribution
        offline = AttributionRunner(config.model_copy(update={"escalation": "never"})).attribute(
            _failed_run()
        )
    assert escalated is not None and escalated.confidence == 0.9  # the LLM's, not mapped
    assert offline.attribution is not None and offline.attribution.confidence == 0.01


def _hide_codename(text: str) -> str:
    """The deployment's own redaction hook (module level: it goes to the worker processes)."""
    return text.replace("Project Zeus", "[codename]")


def test_the_processor_writes_the_escalated_verdict_on_the_spans(sink, tmp_path) -> None:  # noqa: ANN001
    # worker processes: the threshold cannot be patched there, so "always" escalates every verdict;
    # the deployment's redactor must reach them although the method is an offline one
    with ScriptedLLM([], default=CONFIRM) as server:
        attribution = {"method": "heuristic", "escalation": "always", "llm": _llm(server.base_url)}
        overrides = processor_overrides(sink.endpoint, tmp_path / "wal", attribution=attribution)
        processor = BlameProcessor(
            load_config(overrides=overrides, environ={}), redactor=Redactor(_hide_codename)
        )
        processor.start()
        try:
            spans = record_agent_run(
                [("Planner", "Plan: look it up for Project Zeus."), ("Solver", f"41, key sk-proj-{SECRET}")],
                failed=True,
            )
            exporter = OTLPSpanExporter(endpoint=processor.grpc_endpoint, insecure=True)
            assert exporter.export(spans) == SpanExportResult.SUCCESS
            exporter.shutdown()
            arrived = sink.wait_for_spans(len(spans), timeout=20)
            stats = processor.stats()
        finally:
            processor.stop(timeout=5)
    root = attributes_to_dict(next(r.span for r in arrived if not r.span.parent_span_id).attributes)
    assert root[sc.BLAME_METHOD] == "heuristic+guided_check" and root[sc.BLAME_MODEL] == "m"
    assert server.calls == 1 and stats["fallback_attributions"] == 0
    sent = json.dumps(server.requests)
    assert SECRET not in sent and "Project Zeus" not in sent and "[codename]" in sent
