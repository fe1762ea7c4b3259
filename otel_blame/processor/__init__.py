"""The blame processor: OTLP in, failed traces attributed, blame written back, OTLP out, nothing lost."""

from otel_blame.processor.config import ConfigError, ProcessorConfig, load_config
from otel_blame.processor.pipeline import BlameProcessor

__all__ = ["BlameProcessor", "ConfigError", "ProcessorConfig", "load_config"]
