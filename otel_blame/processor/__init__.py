"""The blame processor: OTLP in, failed traces attributed, blame written back, OTLP out, nothing lost."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from otel_blame.processor.config import ConfigError, ProcessorConfig, load_config

if TYPE_CHECKING:
    from otel_blame.processor.pipeline import BlameProcessor

__all__ = ["BlameProcessor", "ConfigError", "ProcessorConfig", "load_config"]


def __getattr__(name: str) -> Any:
    # imported on first use, so that `otel-blame serve` (otel_blame.commands.serve) can say which
    # extra is missing instead of failing while its own package is imported
    if name == "BlameProcessor":
        from otel_blame.processor.pipeline import BlameProcessor

        return BlameProcessor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
