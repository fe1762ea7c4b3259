"""Zero-code: ``opentelemetry-instrument python app.py`` finds OtelBlameInstrumentor by its entry point."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_blame import semconv
from tests.support import RecordingOTLPSink, ScriptedLLM

APP = Path(__file__).parent / "apps" / "group_chat_app.py"
INSTRUMENT = Path(sys.executable).parent / "opentelemetry-instrument"

pytestmark = pytest.mark.slow


def _run_app(tmp_path: Path, sink: RecordingOTLPSink, llm: ScriptedLLM, **extra_env: str) -> str:
    return _run(tmp_path, sink, llm, **extra_env).stdout


def _run(tmp_path: Path, sink: RecordingOTLPSink, llm: ScriptedLLM, **extra_env: str) -> Any:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("OTEL_") and key != semconv.ENV_CAPTURE_MESSAGE_CONTENT
    }
    env.update(
        SCRIPTED_LLM_URL=llm.base_url,
        APP_WORK_DIR=str(tmp_path),
        OTEL_SERVICE_NAME="group-chat-app",
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://{sink.endpoint}",
        OTEL_EXPORTER_OTLP_INSECURE="true",
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    env.update(extra_env)
    done = subprocess.run(
        [str(INSTRUMENT), sys.executable, str(APP)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_opentelemetry_instrument_exports_one_step_per_message(tmp_path):
    script = ["```python\nprint(6 * 7)\n```", "Done: 42"]
    with ScriptedLLM(script) as llm, RecordingOTLPSink() as sink:
        stdout = _run_app(tmp_path, sink, llm)
        assert "MESSAGES=4" in stdout
        received = sink.wait_for_spans(5, timeout=30)
    steps = sorted(
        (r for r in received if any(kv.key == semconv.STEP_INDEX for kv in r.span.attributes)),
        key=lambda r: next(kv.value.int_value for kv in r.span.attributes if kv.key == semconv.STEP_INDEX),
    )
    assert [r.span.name for r in steps] == [
        "invoke_agent planner",
        "invoke_agent coder",
        "invoke_agent executor",
        "invoke_agent planner",
    ]
    roots = [r for r in received if r.span.name.startswith("invoke_workflow")]
    (manager,) = [r for r in received if r.span.name == "invoke_agent chat_manager"]
    assert len(roots) == 1 and manager.span.parent_span_id == roots[0].span.span_id
    assert steps[0].span.parent_span_id == roots[0].span.span_id
    assert all(r.span.parent_span_id == manager.span.span_id for r in steps[1:])
    service = {kv.key: kv.value.string_value for kv in roots[0].resource.attributes}["service.name"]
    assert service == "group-chat-app"


def test_disabled_by_environment(tmp_path):
    script = ["```python\nprint(6 * 7)\n```", "Done: 42"]
    with ScriptedLLM(script) as llm, RecordingOTLPSink() as sink:
        stdout = _run_app(tmp_path, sink, llm, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="otel_blame")
        assert "MESSAGES=4" in stdout
        spans = sink.spans()
    assert [r.span.name for r in spans if r.span.name.startswith(("invoke_agent", "invoke_workflow"))] == []


def test_zero_code_run_tells_its_trace_id_for_a_late_verdict(tmp_path):
    script = ["```python\nprint(6 * 7)\n```", "Done: 42"]
    with ScriptedLLM(script) as llm, RecordingOTLPSink() as sink:
        done = _run(tmp_path, sink, llm, OTEL_BLAME_TRACE_ID_LOG_LEVEL="WARNING")
        received = sink.wait_for_spans(5, timeout=30)
    (line,) = [line for line in done.stderr.splitlines() if "trace_id=" in line]
    trace_id = re.search(r"trace_id=([0-9a-f]{32})", line).group(1)
    assert f"otel-blame verdict {trace_id} --failed" in line
    (root,) = [r for r in received if r.span.name.startswith("invoke_workflow")]
    assert root.span.trace_id.hex() == trace_id
