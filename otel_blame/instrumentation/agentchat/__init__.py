"""otel-blame for Microsoft AutoGen AgentChat (``autogen-agentchat`` 0.4+, module ``autogen_agentchat``).

``AgentChatInstrumentor().instrument()`` (or ``opentelemetry-instrument``, entry point
``otel_blame_agentchat``) makes every agent turn an ``invoke_agent {agent}`` envelope span (the
turn's model calls and tool runs nest under it), every tool run (Swarm handoffs included) an
``execute_tool {tool}`` span under the turn, and a team or agent run outside ``task()`` a root
``invoke_workflow {name}``.
"""

from __future__ import annotations

from otel_blame.instrumentation._base import FrameworkInstrumentor

_AGENTS = "autogen_agentchat.agents"
# classes whose ``on_messages_stream`` is one agent turn (BaseChatAgent's default covers agents of
# the app's own that implement only ``on_messages``)
TURN_CLASSES = (
    "BaseChatAgent",
    "AssistantAgent",
    "CodeExecutorAgent",
    "UserProxyAgent",
    "SocietyOfMindAgent",
)


class AgentChatInstrumentor(FrameworkInstrumentor):
    """Wraps team and agent runs, agent turns (``on_messages_stream``) and ``BaseTool.run_json``."""

    name = "otel_blame_agentchat"
    instruments = ("autogen-agentchat >= 0.4, < 0.8",)

    def _patch(self) -> None:
        import autogen_agentchat.agents as agents

        from otel_blame.instrumentation.agentchat import _hooks

        self._wrap("autogen_agentchat.teams", "BaseGroupChat.run_stream", _hooks.team_run_stream)
        self._wrap(_AGENTS, "BaseChatAgent.run", _hooks.agent_run)
        self._wrap(_AGENTS, "BaseChatAgent.run_stream", _hooks.agent_run_stream)
        for class_name in TURN_CLASSES:
            owner = getattr(agents, class_name, None)
            if owner is not None and "on_messages_stream" in vars(owner):
                self._wrap(_AGENTS, f"{class_name}.on_messages_stream", _hooks.turn)
        self._wrap("autogen_core.tools", "BaseTool.run_json", _hooks.tool_run)


__all__ = ["AgentChatInstrumentor"]
