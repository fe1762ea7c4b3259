"""otel-blame for the OpenAI Agents SDK (``openai-agents``, module ``agents``).

``OpenAIAgentsInstrumentor().instrument()`` (or ``opentelemetry-instrument``, entry point
``otel_blame_openai_agents``) puts run hooks of ours in front of the app's on every run: each model
response, tool result and handoff is a step; each turn of the runner loop (a model call and the
tools it asks for) is an ``invoke_agent {agent}`` envelope span carrying the model's response; each
function tool call is an ``execute_tool {tool}`` envelope inside it, from the tool's start to its
return; a run outside ``task()`` gets its own root.
"""

from __future__ import annotations

import importlib
import inspect

from otel_blame.instrumentation._base import FrameworkInstrumentor

_RUNNER = "agents.run"


class OpenAIAgentsInstrumentor(FrameworkInstrumentor):
    """Wraps ``AgentRunner.run`` / ``run_streamed`` and the SDK's tool failure formatter."""

    name = "otel_blame_openai_agents"
    instruments = ("openai-agents >= 0.24, < 1",)

    def _patch(self) -> None:
        from otel_blame.instrumentation.openai_agents import _hooks

        self._wrap(_RUNNER, "AgentRunner.run", _hooks.run)
        self._wrap(_RUNNER, "AgentRunner.run_streamed", _hooks.run_streamed)
        self._wrap(_RUNNER, "run_single_turn", _hooks.single_turn)  # imported by name into agents.run
        self._wrap("agents.run_internal.run_loop", "run_single_turn_streamed", _hooks.single_turn)
        # the model's response before the runner acts on it (imported by name into the run loop)
        self._wrap("agents.run_internal.run_loop", "get_new_response", _hooks.model_response)
        try:  # private in the SDK: without it, tool results are still steps (point spans in the turn)
            self._wrap(*_hooks.TOOL_EXECUTOR, _hooks.tool_run)
        except (AttributeError, ImportError):
            pass
        for module_name in _hooks.FAILURE_FORMATTER_MODULES:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
            if inspect.iscoroutinefunction(module.__dict__.get(_hooks.FAILURE_FORMATTER)):
                self._wrap(module_name, _hooks.FAILURE_FORMATTER, _hooks.failure_formatter)


__all__ = ["OpenAIAgentsInstrumentor"]
