"""otel-blame for CrewAI (``crewai`` 1.15.29 and later 1.x, module ``crewai``).

``CrewAIInstrumentor().instrument()`` (or ``opentelemetry-instrument``, entry point
``otel_blame_crewai``) makes every task an agent works on an ``invoke_agent {role}`` envelope span
(the agent's model calls and tool runs nest under it), every set of tool calls the model asks for a
step with those calls, every tool run (delegation to a coworker included) an ``execute_tool {tool}``
span under the turn, and a crew kickoff outside ``task()`` a root ``invoke_workflow {crew}``.

CrewAI 1.15.29 moved its agent executor to ``crewai.agents.agent_executor`` (``AgentExecutor``, native
tool calls; ``CrewAgentExecutor`` is gone): earlier releases run an executor these hooks do not see, so
they are skipped with one warning.
"""

from __future__ import annotations

from otel_blame.instrumentation._base import FrameworkInstrumentor


class CrewAIInstrumentor(FrameworkInstrumentor):
    """Wraps ``Crew.kickoff``, ``Agent.execute_task``, the executor's two tool-call steps (native and
    ReAct text) and the tool runs of each."""

    name = "otel_blame_crewai"
    instruments = ("crewai >= 1.15.29, < 2",)

    def _patch(self) -> None:
        from otel_blame.instrumentation.crewai import _hooks

        executor = "crewai.agents.agent_executor"
        self._wrap("crewai.crew", "Crew.kickoff", _hooks.kickoff)
        self._wrap("crewai.agent.core", "Agent.execute_task", _hooks.execute_task)
        # the model's tool calls: function calling, and ReAct text for a model without it
        self._wrap(executor, "AgentExecutor.execute_native_tool", _hooks.native_tool_calls)
        self._wrap(executor, "execute_tool_and_check_finality", _hooks.agent_action)
        # the tool runs: the tool itself for a native call, its structured wrapper for a ReAct action
        self._wrap("crewai.tools.base_tool", "BaseTool.run", _hooks.tool_run)
        self._wrap("crewai.tools.base_tool", "Tool.run", _hooks.tool_run)
        self._wrap("crewai.tools.structured_tool", "CrewStructuredTool.invoke", _hooks.tool_invoke)
        self._wrap("crewai.tools.structured_tool", "CrewStructuredTool.ainvoke", _hooks.tool_ainvoke)


__all__ = ["CrewAIInstrumentor"]
