"""otel-blame: which agent broke your multi-agent LLM run, and at which step, on OpenTelemetry traces."""

__version__ = "0.1.0"
