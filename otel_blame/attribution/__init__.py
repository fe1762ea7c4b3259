"""Attribution methods over a Trajectory: the offline default, the LLM methods and their client."""

from otel_blame.attribution.base import AttributionError, AttributionMethod
from otel_blame.attribution.result import Attribution, Candidate, Cost

__all__ = ["Attribution", "AttributionError", "AttributionMethod", "Candidate", "Cost"]
