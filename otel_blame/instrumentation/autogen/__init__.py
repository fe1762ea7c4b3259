"""otel-blame for the classic ``autogen`` package (AG2 0.x, module ``autogen``).

``AutogenInstrumentor().instrument()`` (or ``opentelemetry-instrument``, entry point
``otel_blame_autogen``) makes every agent turn an ``invoke_agent {agent}`` span and every sent
message a step; a chat started outside ``task()`` gets its own root.
"""

from __future__ import annotations

from otel_blame.instrumentation._base import FrameworkInstrumentor

_MODULE = "autogen.agentchat.conversable_agent"


class AutogenInstrumentor(FrameworkInstrumentor):
    """Hooks ``ConversableAgent``: turns (generate_reply), messages (send), chat roots (initiate_chat)."""

    name = "otel_blame_autogen"
    instruments = ("autogen >= 0.9, < 1",)

    def _patch(self) -> None:
        from otel_blame.instrumentation.autogen import _hooks

        self._wrap(
            _MODULE, "ConversableAgent._process_message_before_send", _hooks.process_message_before_send
        )
        self._wrap(_MODULE, "ConversableAgent.generate_reply", _hooks.generate_reply)
        self._wrap(_MODULE, "ConversableAgent.a_generate_reply", _hooks.a_generate_reply)
        self._wrap(_MODULE, "ConversableAgent.initiate_chat", _hooks.initiate_chat)
        self._wrap(_MODULE, "ConversableAgent.a_initiate_chat", _hooks.a_initiate_chat)
        self._wrap(_MODULE, "ConversableAgent.run", _hooks.thread_starter)
        self._wrap(_MODULE, "ConversableAgent.run_iter", _hooks.thread_starter)

    def _after_unpatch(self) -> None:
        from otel_blame.instrumentation.autogen import _hooks

        _hooks.forget()


__all__ = ["AutogenInstrumentor"]
