"""Hooks for LangGraph (``langgraph`` 1.x on ``langchain-core`` 1.x), through a callback handler.

``Pregel.invoke`` / ``ainvoke`` / ``stream`` / ``astream`` are wrapped to add one
:class:`OtelBlameCallbackHandler` to the run's ``config["callbacks"]`` (a graph run that already
carries one, e.g. a subgraph called from a node, is left alone: the outer handler sees its nodes).
The handler turns each node's output into steps: every message the node returns is a step
(agent = the message's ``name``, else the node name), an output without messages is one step with
the output as content. Tool results (``on_tool_end``) are steps of kind ``tool``. The graph's
input messages are ``user`` steps. A graph run outside any task gets its own task root, named
after the graph.
"""

from __future__ import annotations

import contextvars
import functools
import json
import threading
import time
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from otel_blame import semconv
from otel_blame.instrumentation._messages import LANGCHAIN_ROLES, StepKind, to_text
from otel_blame.instrumentation._safety import HOOK_ERRORS, guarded
from otel_blame.instrumentation._wrapping import Around
from otel_blame.instrumentation.core import (
    AgentTurn,
    TaskRun,
    current_task,
    offer_tool_call,
    record_message,
    task,
)

SOURCE = "langgraph"
_ROLES = LANGCHAIN_ROLES


# the turn of the graph node the running code is inside (its envelope span)
_node_turn: contextvars.ContextVar[AgentTurn | None] = contextvars.ContextVar(
    "otel_blame_langgraph_node_turn", default=None
)


def _open_node_turn(pregel_task: Any) -> AgentTurn | None:
    run = current_task()
    name = getattr(pregel_task, "name", None)
    if run is None or not isinstance(name, str) or not name or name.startswith("__"):
        return None
    try:
        return AgentTurn(name, task=run, source=SOURCE)
    except Exception:
        HOOK_ERRORS.record("langgraph.node_turn")
        return None


def _end_node_turn(turn: AgentTurn, error: BaseException | None) -> None:
    if error is not None and not _is_control_flow(error):
        turn.fail(error)
    turn.close()


def _enter_node(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    turn = _open_node_turn(args[0] if args else kwargs.get("task"))
    if turn is None:
        return None
    token = _node_turn.set(turn)
    turn.activate()
    return (turn, token), args, kwargs


def _leave_node(state: Any, result: Any, error: BaseException | None) -> Any:
    turn, token = state
    try:
        _node_turn.reset(token)
    except ValueError:
        pass  # reset in another context than set: nothing to restore
    turn.deactivate()
    _end_node_turn(turn, error)
    return result


#: ``run_with_retry`` / ``arun_with_retry``: one node's run is a turn, an ``invoke_agent {node}``
#: envelope span current while the node runs (so the LLM and tool spans of the node nest under it);
#: the node's message becomes the turn's step
_node = Around("langgraph.node_turn", _enter_node, _leave_node)
node_run = _node.sync
anode_run = _node.coroutine


# -- the wrappers: one handler per graph run, a task root when none is open ---------------------


class _Scope:
    """What one instrumented graph run opened: the handler and, maybe, its own task."""

    def __init__(self, graph: Any, graph_input: Any) -> None:
        self.task_scope: task | None = None
        run = current_task()
        if run is None:
            self.task_scope = task(
                to_text(getattr(graph, "name", None)) or "LangGraph",
                input=_input_text(graph_input),
                attributes={semconv.INSTRUMENTATION_SOURCE: SOURCE},
            )
            run = self.task_scope.__enter__()
        try:
            self.handler = OtelBlameCallbackHandler(run, owns_task=self.task_scope is not None)
        except Exception:
            self.close(None)
            raise
        self.handler.record_input(graph_input)

    def close(self, exc: BaseException | None) -> None:
        if self.task_scope is not None:
            self.task_scope.__exit__(type(exc) if exc else None, exc, None)


@guarded("langgraph.open")
def _open(graph: Any, graph_input: Any, config: Any) -> tuple[_Scope, Any] | None:
    """A scope and the config with our handler, or None when this run is already traced."""
    if _has_handler(config):
        return None
    scope = _Scope(graph, graph_input)
    try:
        return scope, _with_handler(config, scope.handler)
    except Exception:
        _close(scope, None)
        raise


def _close(scope: _Scope, exc: BaseException | None) -> None:
    try:
        scope.close(exc)
    except Exception:  # pragma: no cover - task.__exit__ guards itself
        pass


def _has_handler(config: Any) -> bool:
    from langchain_core.callbacks import BaseCallbackManager
    from langchain_core.runnables.config import ensure_config

    callbacks = ensure_config(config).get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        handlers = callbacks.handlers
    else:
        handlers = callbacks or []
    return any(isinstance(handler, OtelBlameCallbackHandler) for handler in handlers)


def _with_handler(config: Any, handler: OtelBlameCallbackHandler) -> dict[str, Any]:
    """The config with our handler added to its callbacks (or to the enclosing runnable's, which
    LangGraph would inherit: replacing them would cut the app's own tracing off its parent run)."""
    from langchain_core.callbacks import BaseCallbackManager
    from langchain_core.runnables.config import ensure_config

    merged = dict(config or {})
    callbacks = merged.get("callbacks")
    if callbacks is None:
        callbacks = ensure_config(config).get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        manager = callbacks.copy()
        manager.add_handler(handler, inherit=True)
        merged["callbacks"] = manager
    else:
        merged["callbacks"] = [*(callbacks or []), handler]
    return merged


def _split_config(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """``(input, config)`` from a call ``(input, config=None, ...)``."""
    graph_input = args[0] if args else kwargs.get("input")
    config = args[1] if len(args) > 1 else kwargs.get("config")
    return graph_input, config


def _replace_config(args: tuple[Any, ...], kwargs: dict[str, Any], config: Any) -> tuple[tuple, dict]:
    if len(args) > 1:
        return (args[0], config, *args[2:]), kwargs
    return args, {**kwargs, "config": config}


def _enter_run(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    opened = _open(instance, *_split_config(args, kwargs))
    if opened is None:
        return None
    scope, config = opened
    args, kwargs = _replace_config(args, kwargs, config)
    return scope, args, kwargs


def _leave_run(scope: _Scope, result: Any, error: BaseException | None) -> Any:
    _close(scope, error)
    return result


#: ``Pregel.invoke`` / ``ainvoke`` / ``stream`` / ``astream``: one handler per graph run
_run = Around("langgraph.run", _enter_run, _leave_run)
invoke = _run.sync
ainvoke = _run.coroutine
stream = _run.generator
astream = _run.async_generator


# -- the callback handler: node outputs and tool results become steps -------------------------


def _handler_base() -> type:
    from langchain_core.callbacks import BaseCallbackHandler

    return BaseCallbackHandler


class _Node:
    __slots__ = ("name", "started_ns", "has_child_nodes")

    def __init__(self, name: str) -> None:
        self.name = name
        self.started_ns = time.time_ns()
        self.has_child_nodes = False


class _HandlerMixin:
    """The callbacks; mixed into langchain-core's ``BaseCallbackHandler`` lazily."""

    run_inline = True  # called in order, in the node's own thread / task
    raise_error = False

    def __init__(self, run: TaskRun | None, *, owns_task: bool) -> None:
        self.run = run
        self.owns_task = owns_task
        self._lock = threading.Lock()
        self._parents: dict[UUID, UUID | None] = {}
        self._nodes: dict[UUID, _Node] = {}
        self._tools: dict[UUID, tuple[str, int]] = {}
        self._root: UUID | None = None
        self._recorded_tool_calls: set[str] = set()
        self._recorded_objects: dict[int, Any] = {}
        self._recorded_ids: set[str] = set()

    # graph input ------------------------------------------------------------------------------
    @guarded("langgraph.input")
    def record_input(self, graph_input: Any) -> None:
        for message in _messages_in(graph_input):
            self._record(message, "user", default_role="user")

    # chains -------------------------------------------------------------------------------------
    def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._chain_start(run_id, parent_run_id, metadata, kwargs.get("name"))

    @guarded("langgraph.chain_start")
    def _chain_start(self, run_id: UUID, parent: UUID | None, metadata: Any, name: Any) -> None:
        with self._lock:
            self._parents[run_id] = parent
            if self._root is None:
                self._root = run_id
            node_name = (metadata or {}).get("langgraph_node")
            if not node_name or name != node_name:
                return
            enclosing = self._enclosing_node(parent)
            if enclosing is not None and enclosing.name == node_name and parent in self._nodes:
                return  # the node's own inner runnable of the same name
            if enclosing is not None:
                enclosing.has_child_nodes = True  # e.g. a subgraph: its inner nodes make the steps
            self._nodes[run_id] = _Node(node_name)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._chain_end(run_id, outputs)

    @guarded("langgraph.chain_end")
    def _chain_end(self, run_id: UUID, outputs: Any) -> None:
        with self._lock:
            self._parents.pop(run_id, None)
            node = self._nodes.pop(run_id, None)
            is_root = run_id == self._root
        if is_root:
            self._note_final_output(outputs)
        if node is None:
            return
        messages = _messages_in(outputs)
        if messages:
            # only the new ones: a subgraph or a node may return messages recorded already
            for message in messages:
                self._record(message, node.name, started=node.started_ns)
        elif not node.has_child_nodes and _has_content(outputs):
            self._step(
                node.name,
                _plain(outputs),
                "assistant",
                start_time_ns=node.started_ns,
                source=SOURCE,
                task=self.run,
                intercept=False,  # a state update of its own shape: recorded as it is
            )

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._chain_error(run_id, error)

    @guarded("langgraph.chain_error")
    def _chain_error(self, run_id: UUID, error: BaseException) -> None:
        with self._lock:
            self._parents.pop(run_id, None)
            node = self._nodes.pop(run_id, None)
        if node is None or node.has_child_nodes or _is_control_flow(error):
            return
        self._step(
            node.name,
            f"{type(error).__name__}: {error}",
            "assistant",
            is_error=True,
            start_time_ns=node.started_ns,
            source=SOURCE,
            task=self.run,
            intercept=False,
        )

    # tools --------------------------------------------------------------------------------------
    def on_tool_start(
        self,
        serialized: Any,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._tool_start(run_id, parent_run_id, serialized, kwargs.get("name"))

    @guarded("langgraph.tool_start")
    def _tool_start(self, run_id: UUID, parent: UUID | None, serialized: Any, name: Any) -> None:
        tool = name or (serialized or {}).get("name") or "tool"
        with self._lock:
            self._parents[run_id] = parent
            self._tools[run_id] = (to_text(tool), time.time_ns())

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._tool_end(run_id, output)

    @guarded("langgraph.tool_end")
    def _tool_end(self, run_id: UUID, output: Any) -> None:
        with self._lock:
            parent = self._parents.pop(run_id, None)
            tool_name, started = self._tools.pop(run_id, ("tool", None))
            node = self._enclosing_node(parent)
        call_id = getattr(output, "tool_call_id", None)
        if call_id:
            with self._lock:
                self._recorded_tool_calls.add(call_id)
            self._remember(output)
        text = _text(output)
        applicable = isinstance(getattr(output, "content", None), str) and text == output.content
        sent = self._step(
            node.name if node is not None else tool_name,
            text,
            "tool",
            kind=StepKind.TOOL,
            tool_name=getattr(output, "name", None) or tool_name,
            tool_call_id=call_id,
            is_error=getattr(output, "status", None) == "error",
            start_time_ns=started,
            source=SOURCE,
            task=self.run,
            message=output,
            intercept=applicable,  # a ToolMessage the ToolNode passes on: changed in place
        )
        if applicable and sent != text:
            output.content = sent

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        # The error reaches the node: ToolNode turns it into an error ToolMessage (a step from the
        # node's output), anything else fails the node (an error step from on_chain_error).
        with self._lock:
            self._parents.pop(run_id, None)
            self._tools.pop(run_id, None)

    # internals ----------------------------------------------------------------------------------
    def _step(self, agent: str, content: Any, role: str = "assistant", **fields: Any) -> str:
        """A step: the answer of the running node's turn when it is this agent's, else a span of its
        own; returns its text as it goes out (the message path)."""
        turn = _node_turn.get()
        if turn is not None and not turn.answered and turn.run is self.run:
            fields.pop("start_time_ns", None)
            fields.pop("source", None)
            fields.pop("task", None)
            return turn.answer(content, role, agent=agent, **fields)
        return record_message(agent, content, role, **fields)

    def _offer_tool_calls(self, agent: str, message: Any) -> None:
        """An AI message's tool calls on the message path before the ToolNode runs them: the node's
        message objects are what the graph's state keeps, so a change made on them reaches the tool."""
        for call in getattr(message, "tool_calls", None) or ():
            if not isinstance(call, dict):
                continue
            changed = offer_tool_call(
                agent,
                _plain(call.get("args", {})),
                call.get("name"),
                message=message,
                source=SOURCE,
                task=self.run,
            )
            if changed is None:
                continue
            try:
                arguments = json.loads(changed.text)
            except ValueError:
                arguments = None
            if isinstance(arguments, dict):
                call["args"] = arguments
            call["name"] = changed.tool_name or call.get("name")

    def _enclosing_node(self, run_id: UUID | None) -> _Node | None:
        """The nearest node run at or above ``run_id`` (caller holds the lock)."""
        seen = 0
        while run_id is not None and seen < 256:
            node = self._nodes.get(run_id)
            if node is not None:
                return node
            run_id = self._parents.get(run_id)
            seen += 1
        return None

    def _remember(self, message: Any) -> bool:
        """Note a message as recorded; False when it was already (same object, or same message id).

        The message objects are kept for the run so that ``id()`` is not reused; LangGraph's
        ``add_messages`` gives a message its id after the node returned it, in place.
        """
        message_id = getattr(message, "id", None)
        with self._lock:
            if id(message) in self._recorded_objects or (message_id and message_id in self._recorded_ids):
                return False
            self._recorded_objects[id(message)] = message
            if message_id:
                self._recorded_ids.add(message_id)
            return True

    def _record(
        self, message: Any, node_name: str, *, default_role: str = "assistant", started: int | None = None
    ) -> None:
        message_type = getattr(message, "type", None)
        if message_type == "remove":
            return
        role = _ROLES.get(message_type, default_role)
        if role == "tool":
            call_id = getattr(message, "tool_call_id", None)
            with self._lock:
                if call_id and call_id in self._recorded_tool_calls:
                    return  # already a step from on_tool_end
        if not self._remember(message):
            return
        name = getattr(message, "name", None)
        agent = name if isinstance(name, str) and name and role != "tool" else node_name
        outgoing = default_role == "assistant"  # a node's output; the graph's input is already in
        if outgoing:
            self._offer_tool_calls(agent, message)
        calls = _tool_calls(message)
        text = _text(message)
        applicable = (
            outgoing and isinstance(getattr(message, "content", None), str) and text == message.content
        )
        sent = self._step(
            agent,
            text if text or not calls else None,
            role,
            kind=StepKind.TOOL if role == "tool" else StepKind.MESSAGE,
            tool_name=name if role == "tool" else None,
            tool_call_id=getattr(message, "tool_call_id", None) if role == "tool" else None,
            tool_calls=calls or None,
            is_error=getattr(message, "status", None) == "error",
            start_time_ns=started,
            source=SOURCE,
            task=self.run,
            message=message,
            intercept=applicable,
        )
        if applicable and text and sent != text:
            message.content = sent  # the next node reads the graph's state: the same message object

    def _note_final_output(self, outputs: Any) -> None:
        run = self.run
        if not self.owns_task or run is None or not run.settings.capture_content or outputs is None:
            return  # (capture checked first: the text of the outputs is not made for nothing)
        messages = _messages_in(outputs)
        run.note_final_output(_text(messages[-1]) if messages else _plain(outputs))


@functools.cache
def _handler_class() -> type:
    return type("OtelBlameCallbackHandler", (_HandlerMixin, _handler_base()), {"__module__": __name__})


class _HandlerMeta(type):
    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, _HandlerMixin)


class OtelBlameCallbackHandler(metaclass=_HandlerMeta):
    """A langchain-core callback handler that records one graph run's steps into ``run``."""

    def __new__(cls, run: TaskRun | None, *, owns_task: bool = False) -> Any:  # type: ignore[misc]
        return _handler_class()(run, owns_task=owns_task)


# -- reading LangChain messages ---------------------------------------------------------------


def _is_message(value: Any) -> bool:
    return isinstance(getattr(value, "type", None), str) and hasattr(value, "content")


def _messages_in(value: Any) -> list[Any]:
    """The messages in a node output / graph input: a message, a list, a dict's values, a Command."""
    update = getattr(value, "update", None) if type(value).__name__ == "Command" else None
    if update is not None:
        value = update
    if _is_message(value):
        return [value]
    if isinstance(value, Mapping):
        found = []
        for item in value.values():
            found.extend(_messages_in_sequence(item))
        return found
    return _messages_in_sequence(value)


def _messages_in_sequence(value: Any) -> list[Any]:
    if _is_message(value):
        return [value]
    if isinstance(value, list | tuple):
        return [item for item in value if _is_message(item)]
    return []


def _has_content(value: Any) -> bool:
    """A node output worth a step: not None, not an update whose values are all empty."""
    if value is None:
        return False
    if isinstance(value, Mapping):
        return any(item is not None and item != [] and item != {} and item != "" for item in value.values())
    return True


def _text(message: Any) -> str:
    text = getattr(message, "text", None)
    if isinstance(text, str):  # langchain-core 1.x: a str property (also callable, deprecated)
        return str(text)
    if callable(text):  # older langchain-core: a method
        try:
            text = text()
        except Exception:
            text = None
    if isinstance(text, str):
        return text
    content = getattr(message, "content", message)
    return content if isinstance(content, str) else to_text(content)


def _plain(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return to_text(value)


def _tool_calls(message: Any) -> list[dict[str, Any]]:
    calls = getattr(message, "tool_calls", None) or ()
    out = []
    for call in calls:
        if isinstance(call, Mapping):
            arguments = _plain(call.get("args", {}))
            out.append({"id": call.get("id"), "function": {"name": call.get("name"), "arguments": arguments}})
    return out


def _is_control_flow(error: BaseException) -> bool:
    """LangGraph's interrupts and parent commands travel as exceptions; they are not failures."""
    return any(cls.__name__ == "GraphBubbleUp" for cls in type(error).__mro__)


def _input_text(graph_input: Any) -> str:
    messages = _messages_in(graph_input)
    if messages:
        return "\n".join(_text(message) for message in messages)
    return _plain(graph_input) if graph_input is not None else ""
