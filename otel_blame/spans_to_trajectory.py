"""Where spans become a Trajectory: kept importable here; the code lives in :mod:`otel_blame.conventions`."""

from otel_blame.conventions import (
    BuildNotes,
    Built,
    NoTrajectory,
    any_value_to_python,
    attributes_to_dict,
    build_trajectory,
    messages_text,
    sdk_logs_to_proto,
    sdk_spans_to_proto,
    trace_ids,
    trajectories_from_spans,
    trajectory_from_spans,
)

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
