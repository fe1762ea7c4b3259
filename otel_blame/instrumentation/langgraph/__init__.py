"""otel-blame for LangGraph (``langgraph`` 1.x on ``langchain-core`` 1.x), through a callback handler.

``LangGraphInstrumentor().instrument()`` (or ``opentelemetry-instrument``, entry point
``otel_blame_langgraph``) adds a callback handler to every graph run: each node's new messages
and each tool result are steps; each node's run is an ``invoke_agent {node}`` envelope span (the
node's LLM and tool spans nest under it) carrying the node's message; a graph run outside
``task()`` gets its own root.
"""

from __future__ import annotations

from otel_blame.instrumentation._base import FrameworkInstrumentor

_PREGEL = "langgraph.pregel.main"
_RUNNER = "langgraph.pregel._runner"


class LangGraphInstrumentor(FrameworkInstrumentor):
    """Wraps ``Pregel.invoke`` / ``ainvoke`` / ``stream`` / ``astream`` and the runner's node runs."""

    name = "otel_blame_langgraph"
    instruments = ("langgraph >= 1.0, < 2",)

    def _patch(self) -> None:
        from otel_blame.instrumentation.langgraph import _handler

        for method in ("invoke", "ainvoke", "stream", "astream"):
            self._wrap(_PREGEL, f"Pregel.{method}", getattr(_handler, method))
        # each node's run (imported by name into the runner): the node's turn, an envelope span
        self._wrap(_RUNNER, "run_with_retry", _handler.node_run)
        self._wrap(_RUNNER, "arun_with_retry", _handler.anode_run)


__all__ = ["LangGraphInstrumentor"]
