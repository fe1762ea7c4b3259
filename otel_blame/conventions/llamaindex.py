"""LlamaIndex's workflow events, as the instrumentations that trace its ``AgentWorkflow`` record them.

Neither OpenInference nor OpenLLMetry gives a LlamaIndex agent a span of its own: an ``AgentWorkflow``
is a flat run of workflow steps (``setup_agent``, ``run_agent_step``, ``parse_agent_output``,
``call_tool``, ``aggregate_tool_results``), and the agent a step works for is named only in the
events those steps take and return (``AgentInput``, ``AgentSetup``, ``AgentOutput``), as their
``current_agent_name``: in a Python repr (OpenInference's ``input.value``/``output.value``,
``current_agent_name='researcher'``) or in JSON (OpenLLMetry's ``traceloop.entity.*``,
``"current_agent_name": "researcher"``). A ``call_tool`` step returns a ``ToolCallResult`` whose
``tool_output`` says what the tool returned and whether it failed (``is_error``).
"""

from __future__ import annotations

import re
from typing import Any

from .text import maybe_json, text

# current_agent_name='x' (a repr), current_agent_name=\'x\' (a repr inside JSON), "current_agent_name": "x"
_CURRENT_AGENT = re.compile(r"""current_agent_name(?:=\\?['"]|"\s*:\s*")(?P<name>[^'"\\]+)""")


def current_agent(value: Any) -> str | None:
    """The agent a workflow event names as current, in the first place it does."""
    if not isinstance(value, str) or "current_agent_name" not in value:
        return None
    match = _CURRENT_AGENT.search(value)
    if match is None:
        return None
    return match.group("name").strip() or None


def tool_call_result(value: Any) -> dict[str, Any] | None:
    """The ``tool_output`` of a ``ToolCallResult`` recorded as JSON, else None."""
    found = maybe_json(value)
    if not isinstance(found, dict) or "tool_name" not in found or "tool_id" not in found:
        return None
    output = found.get("tool_output")
    return output if isinstance(output, dict) else None


def tool_output_text(output: dict[str, Any]) -> str:
    """A ``ToolOutput``'s text: its text blocks, else its ``content`` or ``raw_output``."""
    blocks = output.get("blocks")
    if isinstance(blocks, list):
        texts = [text(block.get("text")) for block in blocks if isinstance(block, dict) and block.get("text")]
        if texts:
            return "\n".join(texts)
    return text(output.get("content") or output.get("raw_output"))
