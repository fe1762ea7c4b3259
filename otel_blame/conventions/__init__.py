"""Spans of every common instrumentation as a :class:`~otel_blame.trajectory.Trajectory`.

One adapter per dialect (:mod:`.genai`, :mod:`.openinference`, :mod:`.traceloop`, :mod:`.ag2`,
:mod:`.logfire`, :mod:`.ours`), what two of them record of LlamaIndex's workflows (:mod:`.llamaindex`),
the agent resolution they share (:mod:`.agents`) and the builder
(:mod:`.builder`). ``docs/semconv.md`` tabulates what each instrumentation gives.
"""

from .builder import (
    BuildNotes,
    Built,
    NoTrajectory,
    build_trajectory,
    trajectories_from_spans,
    trajectory_from_spans,
)
from .otlp import any_value_to_python, attributes_to_dict, sdk_logs_to_proto, sdk_spans_to_proto, trace_ids
from .text import messages_text

__all__ = [
    "BuildNotes",
    "Built",
    "NoTrajectory",
    "any_value_to_python",
    "attributes_to_dict",
    "build_trajectory",
    "messages_text",
    "sdk_logs_to_proto",
    "sdk_spans_to_proto",
    "trace_ids",
    "trajectories_from_spans",
    "trajectory_from_spans",
]
