"""Test doubles shared by the test suites.

Only the LLM is scripted (no model is reachable here); everything else in the tests is real. The
scripted OpenAI-compatible server and the recording OTLP/gRPC sink are also what the offline demo
runs on, so their code lives in the package's demo support; tests import them from here only.
"""

from otel_blame.demo.scripted_llm import Reply, ScriptedLLM
from otel_blame.demo.span_recorder import RecordedSpan, RecordingOTLPSink

__all__ = ["RecordedSpan", "RecordingOTLPSink", "Reply", "ScriptedLLM"]
