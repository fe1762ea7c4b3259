"""The CrewAI hooks: a root per kickoff, an envelope per agent task, steps for tool calls and tools.

- ``Crew.kickoff`` (``kickoff_async`` and ``kickoff_for_each`` go through it): outside any task, a
  root ``invoke_workflow {crew name}`` with the kickoff's inputs as input and ``CrewOutput.raw`` as
  final output; the app's exception fails the root and passes through unchanged.
- ``Agent.execute_task``: one agent turn, an :class:`~otel_blame.instrumentation.core.AgentTurn`
  ``invoke_agent {role}`` current for the whole task execution (the agent's model calls and tools
  nest under it) and answered with the agent's final answer. A coworker asked through delegation
  runs ``execute_task`` too: its turn nests under the delegation tool's span.
- ``AgentExecutor.execute_native_tool`` (the executor's step for the tool calls a model asked for
  through function calling, before they run): the agent's message with its tool calls, under the turn.
- ``execute_tool_and_check_finality`` as the executor imports it (its step for an ``Action:`` of a
  model without function calling, ReAct text): the agent's message with the model's text and its
  tool call, under the turn.
- ``BaseTool.run`` / ``Tool.run`` (a tool run for a native tool call) and ``CrewStructuredTool.invoke``
  / ``ainvoke`` (for a ReAct action): one ``execute_tool {tool}`` envelope per tool run; a tool that
  raises is an error step with ``error.type`` (CrewAI tells the model), and so is one that returns
  CrewAI's ``ToolFailure`` (``error.type`` its code, else its reason).
"""

from __future__ import annotations

import contextvars
import json
from typing import Any

from otel_blame import semconv
from otel_blame.instrumentation._messages import StepKind, to_text
from otel_blame.instrumentation._safety import HOOK_ERRORS
from otel_blame.instrumentation._wrapping import Around
from otel_blame.instrumentation.core import AgentTurn, current_task, offer_tool_call, record_message, task

SOURCE = "crewai"
TASK_ATTRIBUTE = "otel_blame.crewai.task"

# the agent turn (agent task execution) the running code belongs to
_current_turn: contextvars.ContextVar[AgentTurn | None] = contextvars.ContextVar(
    "otel_blame_crewai_turn", default=None
)
# (agent, task) of the running turn: CrewAI retries a failed task by calling execute_task again
_retry_of: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "otel_blame_crewai_retry_of", default=None
)


def _name(value: Any, *attributes: str) -> str | None:
    for attribute in attributes:
        found = getattr(value, attribute, None)
        if isinstance(found, str) and found.strip():
            return found
    return None


# -- the crew ---------------------------------------------------------------------------------------


def kickoff(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    if current_task() is not None:
        return wrapped(*args, **kwargs)
    inputs = kwargs.get("inputs", args[0] if args else None)
    try:
        root = task(
            _name(instance, "name") or "crew",
            input=to_text(inputs) if inputs else _task_descriptions(instance),
            attributes={semconv.INSTRUMENTATION_SOURCE: SOURCE},
        )
    except Exception:
        HOOK_ERRORS.record("crewai.root")
        return wrapped(*args, **kwargs)
    with root as run:
        result = wrapped(*args, **kwargs)
        if run is not None:
            raw = getattr(result, "raw", None)
            run.note_final_output(raw if isinstance(raw, str) else None)
        return result


def _task_descriptions(crew: Any) -> str | None:
    try:
        return "\n".join(t.description for t in getattr(crew, "tasks", None) or ()) or None
    except Exception:
        return None


# -- agent turns ------------------------------------------------------------------------------------


def execute_task(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    run = current_task()
    crew_task = kwargs.get("task", args[0] if args else None)
    outer = _current_turn.get()
    if run is None or (outer is not None and _retry_of.get() == (id(instance), id(crew_task))):
        return wrapped(*args, **kwargs)  # outside a task, or CrewAI retrying the task: one turn
    try:
        attributes: dict[str, Any] = {}
        goal = _name(instance, "goal")
        if goal:
            attributes[semconv.GEN_AI_AGENT_DESCRIPTION] = goal
        task_name = _name(crew_task, "name", "description")
        if task_name:
            attributes[TASK_ATTRIBUTE] = task_name[:256]
        turn = AgentTurn(_name(instance, "role") or "agent", task=run, source=SOURCE, attributes=attributes)
    except Exception:
        HOOK_ERRORS.record("crewai.turn")
        return wrapped(*args, **kwargs)
    token = _current_turn.set(turn)
    retry_token = _retry_of.set((id(instance), id(crew_task)))
    turn.activate()
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as error:
        turn.deactivate()
        _fail_turn(turn, error)
        raise
    finally:
        for variable, reset in ((_current_turn, token), (_retry_of, retry_token)):
            try:
                variable.reset(reset)  # type: ignore[arg-type]
            except ValueError:
                pass
        turn.deactivate()
    text = to_text(result)
    sent = turn.answer(text, message=result, intercept=isinstance(result, str))
    turn.close()
    return sent if isinstance(result, str) and sent != text else result  # the task's output, as it goes on


def _fail_turn(turn: AgentTurn, error: BaseException) -> None:
    """A turn that raised is an error step of its agent (``AgentTurn.fail``: the one rule for every
    framework), so a run that fails before any message still has the step that failed."""
    turn.fail(error)
    turn.close()


# -- tool calls --------------------------------------------------------------------------------------


def native_tool_calls(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    turn = _current_turn.get()
    if turn is not None:
        _record_native_calls(turn, instance)
    return wrapped(*args, **kwargs)


def _record_native_calls(turn: AgentTurn, executor: Any) -> None:
    """The tool calls the model asked for (function calling) as the agent's message. Each call is
    offered on the message path first; a changed call replaces the pending one, which is what CrewAI
    both writes into the agent's history and runs. Calls name the CrewAI tool (``Delegate work to
    coworker``), as the tool's run does, not the function name the model sees."""
    try:
        from crewai.utilities.agent_utils import extract_tool_call_info

        pending = executor.state.pending_tool_calls
        tools = _tool_names(executor)
        calls = []
        for position, call in enumerate(list(pending)):
            info = extract_tool_call_info(call)
            if info is None:
                continue  # CrewAI skips it too
            call_id, function, arguments = info
            tool = tools.get(function, function)
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            changed = offer_tool_call(turn.agent, text, tool, message=call, source=SOURCE, task=turn.run)
            if changed is not None:
                tool, text = changed.tool_name or tool, changed.text
                pending[position] = {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": _function_name(tools, tool), "arguments": text},
                }
            calls.append({"id": call_id, "function": {"name": tool, "arguments": text}})
        if calls:
            record_message(
                turn.agent,
                None,
                "assistant",
                tool_calls=calls,
                source=SOURCE,
                task=turn.run,
                intercept=False,  # what the message does is its tool calls, offered above
            )
    except Exception:
        HOOK_ERRORS.record("crewai.tool_calls")


def _tool_names(executor: Any) -> dict[str, str]:
    """Function name (what the model calls) -> the CrewAI tool's name, for the executor's tools."""
    mapping = getattr(executor, "_tool_name_mapping", None) or {}
    return {function: _name(tool, "name") or function for function, tool in mapping.items()}


def _function_name(tools: dict[str, str], tool: str) -> str:
    """The function name CrewAI runs for a CrewAI tool name (an unknown tool: CrewAI's own spelling)."""
    from crewai.utilities.string_utils import sanitize_tool_name

    found = [function for function, name in tools.items() if name == tool]
    return found[0] if found else sanitize_tool_name(tool)


def agent_action(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    turn = _current_turn.get()
    if turn is not None:
        action = kwargs.get("agent_action", args[0] if args else None)
        _record_action(turn, action)
    return wrapped(*args, **kwargs)


def _record_action(turn: AgentTurn, action: Any) -> None:
    """The model's ``Action:`` as the agent's message: its text and the tool call it asks for; the
    call is offered on the message path first, and a change is made on the action CrewAI runs."""
    try:
        tool = getattr(action, "tool", None)
        if tool:
            changed = offer_tool_call(
                turn.agent,
                to_text(getattr(action, "tool_input", "")),
                tool,
                message=action,
                source=SOURCE,
                task=turn.run,
            )
            if changed is not None:
                action.tool_input = changed.text
                action.tool = tool = changed.tool_name or tool
        calls = None
        if tool:
            calls = [{"function": {"name": to_text(tool), "arguments": getattr(action, "tool_input", "")}}]
        record_message(
            turn.agent,
            getattr(action, "text", None),
            "assistant",
            tool_calls=calls,
            source=SOURCE,
            task=turn.run,
            intercept=False,  # what the action does is its tool call, offered above
        )
    except Exception:
        HOOK_ERRORS.record("crewai.action")


# -- tool runs ---------------------------------------------------------------------------------------


def _enter_tool(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    turn = _current_turn.get()
    if turn is None:
        return None
    tool_name = _name(instance, "name") or "tool"
    step = AgentTurn(
        turn.agent, task=turn.run, source=SOURCE, attributes={semconv.GEN_AI_TOOL_NAME: tool_name}
    ).as_tool(tool_name)
    step.activate()
    return (step, tool_name), args, kwargs


def _leave_tool(state: Any, result: Any, error: BaseException | None) -> Any:
    """The tool's result as its envelope's step, on the message path: a changed result is what the
    agent gets back. A reported failure (``ToolFailure``) is an error step, and goes back unchanged:
    CrewAI's failure policy reads it."""
    step, tool_name = state
    step.deactivate()
    try:
        if error is not None:
            step.fail(error)  # a tool step with the error (AgentTurn.fail: the one rule for failed turns)
            return None
        failure = _reported_failure(result)
        if failure is not None:
            reason = getattr(failure, "reason", None)
            step.answer(
                failure.as_agent_message(),
                "tool",
                kind=StepKind.TOOL,
                tool_name=tool_name,
                is_error=True,
                attributes={semconv.ERROR_TYPE: failure.code or to_text(getattr(reason, "value", reason))},
                message=result,
                intercept=False,
            )
            return result
        text = to_text(result)
        sent = step.answer(text, "tool", kind=StepKind.TOOL, tool_name=tool_name, message=result)
        return result if sent == text else sent
    finally:
        step.close()


def _reported_failure(result: Any) -> Any:
    """CrewAI's ``ToolFailure``: a tool's own report that it did not do what it was asked."""
    from crewai.tools.tool_failure import ToolFailure

    return result if isinstance(result, ToolFailure) else None


#: ``BaseTool.run`` / ``Tool.run`` and ``CrewStructuredTool.invoke`` / ``ainvoke``: one
#: ``execute_tool {tool}`` envelope per tool run
_tool = Around("crewai.tool", _enter_tool, _leave_tool)
tool_run = _tool.sync
tool_invoke = _tool.sync
tool_ainvoke = _tool.coroutine
