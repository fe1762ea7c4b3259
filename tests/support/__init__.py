"""Test doubles shared by the test suites.

Only the LLM is scripted (no model is reachable here); everything else in the tests is real. The
scripted OpenAI-compatible server and the recording OTLP/gRPC sink are also what the offline demo
runs on, so their code lives in the package's demo support; tests import them from here only.
"""

from otel_blame.otlp_sink import RecordedSpan, RecordingOTLPSink
from otel_blame.scripted_llm import Reply, ScriptedLLM

__all__ = ["RecordedSpan", "RecordingOTLPSink", "Reply", "ScriptedLLM"]
