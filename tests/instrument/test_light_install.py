"""``pip install otel-blame`` alone: the instrumentation works, none of the processor's dependencies
come along, and the command line says which extra it needs instead of a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROCESSOR_ONLY = {"grpcio", "openai", "pydantic", "click", "pyyaml", "rich", "opentelemetry-exporter-otlp"}

pytestmark = pytest.mark.slow

APP = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_blame.instrumentation import OtelBlameInstrumentor, agent_turn, last_trace_id, record_message
from otel_blame.instrumentation import set_outcome, task

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
OtelBlameInstrumentor().instrument()  # no framework installed: nothing to hook, nothing breaks
with task("light", input="q"):
    record_message("user", "q", role="user")
    with agent_turn("solver") as turn:
        turn.answer("a")
    set_outcome(True, final_output="a")
print(sorted(s.name for s in exporter.get_finished_spans()), len(last_trace_id()))
"""


def test_the_base_install_instruments_and_the_cli_asks_for_the_processor_extra(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "-c", str(ROOT / "constraints.txt"), str(ROOT)],
        check=True,
        timeout=600,
    )
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], check=True, capture_output=True, text=True
    ).stdout
    installed = {line.split("==")[0].lower() for line in listed.split()}
    assert not installed & PROCESSOR_ONLY, installed & PROCESSOR_ONLY
    assert {"opentelemetry-api", "opentelemetry-sdk", "opentelemetry-instrumentation", "wrapt"} <= installed

    ran = subprocess.run([str(python), "-c", APP], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "['invoke_agent solver', 'invoke_agent user', 'invoke_workflow light'] 32"

    cli = subprocess.run([str(venv / "bin" / "otel-blame"), "serve"], capture_output=True, text=True)
    assert cli.returncode == 2
    assert "pip install 'otel-blame[processor]'" in cli.stderr
    assert "Traceback" not in cli.stderr
