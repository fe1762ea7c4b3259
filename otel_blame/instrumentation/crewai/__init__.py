"""otel-blame for CrewAI (``crewai`` 1.x, module ``crewai``).

``CrewAIInstrumentor().instrument()`` (or ``opentelemetry-instrument``, entry point
``otel_blame_crewai``) makes every task an agent works on an ``invoke_agent {role}`` envelope span
(the agent's model calls and tool runs nest under it), every action the agent decides on a step
with its tool call, every tool run (delegation to a coworker included) an ``execute_tool {tool}``
span under the turn, and a crew kickoff outside ``task()`` a root ``invoke_workflow {crew}``.
"""

from __future__ import annotations

from otel_blame.instrumentation._base import FrameworkInstrumentor


class CrewAIInstrumentor(FrameworkInstrumentor):
    """Wraps ``Crew.kickoff``, ``Agent.execute_task``, the executor's tool step and tool invocation."""

    name = "otel_blame_crewai"
    instruments = ("crewai >= 1.0, < 2",)

    def _patch(self) -> None:
        from otel_blame.instrumentation.crewai import _hooks

        self._wrap("crewai.crew", "Crew.kickoff", _hooks.kickoff)
        self._wrap("crewai.agent.core", "Agent.execute_task", _hooks.execute_task)
        self._wrap(
            "crewai.agents.crew_agent_executor", "execute_tool_and_check_finality", _hooks.agent_action
        )
        self._wrap("crewai.tools.structured_tool", "CrewStructuredTool.invoke", _hooks.tool_invoke)
        self._wrap("crewai.tools.structured_tool", "CrewStructuredTool.ainvoke", _hooks.tool_ainvoke)


__all__ = ["CrewAIInstrumentor"]
