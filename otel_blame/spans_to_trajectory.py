"""Deprecated: import from :mod:`otel_blame.conventions` instead (where spans become a Trajectory).

Kept importable for code written against it; importing it warns (``DeprecationWarning``).
Nothing inside otel-blame imports it.
"""

import warnings

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

warnings.warn(
    "otel_blame.spans_to_trajectory is deprecated; import from otel_blame.conventions instead",
    DeprecationWarning,
    stacklevel=2,
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
