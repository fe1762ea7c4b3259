"""otel-blame's own instrumentation: numbered steps (``otel_blame.step.*``) and task attributes.

The same attributes sit on a turn's ``invoke_agent`` span whether it is a leaf message or an
envelope around the turn's chat and tool spans, so both shapes read the same here. A step declares
its kind only for code execution: a tool step is the ``execute_tool`` operation (the GenAI
convention's vote, which outranks an index), anything else a message; its role is in
``gen_ai.output.messages`` unless ``otel_blame.step.role`` gives another label; the conversation id
is on the root (docs/semconv.md, "Moved off the step spans").
"""

from __future__ import annotations

from otel_blame import semconv as sc
from otel_blame.trajectory import StepKind

from .model import Convention, Kind, Rank, SpanView, Vote


class Ours(Convention):
    name = "otel-blame"

    def vote(self, view: SpanView) -> Vote | None:
        declared = view.attributes.get(sc.STEP_KIND)
        if declared == StepKind.TOOL:
            return Rank.DECLARED, Kind.TOOL
        if declared == StepKind.CODE_EXECUTION:
            return Rank.DECLARED, Kind.CODE
        if sc.STEP_INDEX in view.attributes:
            return Rank.INDEXED, Kind.AGENT
        return None


def is_declared_step(view: SpanView) -> bool:
    """A span our instrumentation numbered: with any in a trace, they alone are the steps."""
    return sc.STEP_INDEX in view.attributes
