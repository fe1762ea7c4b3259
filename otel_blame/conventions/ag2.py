"""AG2's built-in tracing (``autogen.opentelemetry``): ``ag2.span.type`` beside the GenAI names,
code execution output and exit code in ``ag2.code_execution.*``."""

from __future__ import annotations

from otel_blame import semconv as sc

from .model import Convention, Kind, Rank, SpanView, Vote
from .text import text

_TYPES: dict[str, Vote] = {
    sc.AG2_TYPE_AGENT: (Rank.AGENT, Kind.AGENT),
    sc.AG2_TYPE_TOOL: (Rank.TOOL, Kind.TOOL),
    sc.AG2_TYPE_CODE_EXECUTION: (Rank.CODE, Kind.CODE),
    sc.AG2_TYPE_LLM: (Rank.LLM, Kind.LLM),
    sc.AG2_TYPE_CONVERSATION: (Rank.WORKFLOW, Kind.WORKFLOW),
}


class AG2(Convention):
    name = "ag2"

    def vote(self, view: SpanView) -> Vote | None:
        found = _TYPES.get(text(view.attributes.get(sc.AG2_SPAN_TYPE)))
        if found is not None:
            return found
        operation = view.attributes.get(sc.GEN_AI_OPERATION_NAME)
        if operation == sc.OP_EXECUTE_CODE:
            return Rank.CODE, Kind.CODE
        if operation == sc.OP_CONVERSATION:
            return Rank.WORKFLOW, Kind.WORKFLOW
        return None

    def tool_output(self, view: SpanView) -> tuple[str, str] | None:
        if view.kind == Kind.CODE and sc.AG2_CODE_EXECUTION_OUTPUT in view.attributes:
            return text(view.attributes[sc.AG2_CODE_EXECUTION_OUTPUT]), "code_execution"
        return None

    def is_error(self, view: SpanView) -> bool:
        exit_code = view.attributes.get(sc.AG2_CODE_EXECUTION_EXIT_CODE)
        return isinstance(exit_code, int) and exit_code != 0
