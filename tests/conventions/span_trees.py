"""Span trees shaped like the real smolagents runs that OpenInference records (TRAIL's layout: children
nested in ``child_spans``, OpenInference attributes as strings), built here so each shape is explicit.

``gaia_run`` is a manager ``CodeAgent`` that plans, then calls its managed ``search_agent`` (a
``ToolCallingAgent``) from code; the searcher's page-down fails twice on an argument the tool does not
take, and it answers; the manager's code run prints the answer, it calls ``final_answer`` (which
records no output), and an LLM call outside both agents formats the answer. The service and host
names are those of a deployment, never an agent; the question mentions a person.
"""

from __future__ import annotations

import json
from itertools import count
from typing import Any

SERVICE = "gaia-annotations/app:GAIA-Samples"
HOST = "c09a5098c122"
TRACE_ID = "01c5727165fc43899b3b594b9bef5f19"
QUESTION = "How many accepted papers have an author named Yuri?"
TASK = f"You have one question to answer.\nHere is the task:\nYou are Van Helsing, a hunter.\n{QUESTION}"
MANAGER_PLAN = "1. Ask the search agent for the accepted papers.\n2. Count the authors named Yuri."
SEARCH_REPORT = "### 1. Task outcome (short version):\nThere are 0 accepted papers with an author named Yuri."
HANDED_BACK = "Here is the final answer from your managed agent 'search_agent':"
PAGE_DOWN_ERROR = "PageDownTool.forward() got an unexpected keyword argument ''"


class Tree:
    """Builds spans with increasing ids; :func:`stamp` times them once the tree is whole."""

    def __init__(self) -> None:
        self._ids = count(1)

    def span(
        self,
        name: str,
        kind: str | None,
        *children: dict[str, Any],
        status: str | None = None,
        message: str = "",
        events: list[dict[str, Any]] | None = None,
        **attributes: Any,
    ) -> dict[str, Any]:
        number = next(self._ids)
        attrs = {
            "pat.app": "GAIA-Samples",
            **{key.replace("__", "."): value for key, value in attributes.items()},
        }
        if kind is not None:
            attrs["openinference.span.kind"] = kind
        span = {
            "timestamp": None,
            "duration": None,
            "trace_id": TRACE_ID,
            "span_id": f"{number:016x}",
            "parent_span_id": None,
            "span_name": name,
            "span_kind": "Internal",
            "service_name": SERVICE,
            "resource_attributes": {"service.name": SERVICE, "host.name": HOST},
            "scope_name": "openinference.instrumentation.smolagents",
            "scope_version": "0.1.6",
            "span_attributes": attrs,
            "status_code": status or ("Ok" if kind else "Unset"),  # OpenInference sets OK on its spans
            "status_message": message,
            "events": events or [],
            "links": [],
            "child_spans": [],
        }
        for child in children:
            child["parent_span_id"] = span["span_id"]
            span["child_spans"].append(child)
        return span

    def llm(
        self, content: str | None = None, *, calls: list[tuple[str, dict]] = (), system: str = ""
    ) -> dict:
        attrs: dict[str, Any] = {
            "llm.model_name": "o3-mini",
            "llm.output_messages.0.message.role": "assistant",
            "llm.input_messages.0.message.role": "system",
            "llm.input_messages.0.message.content": system or "You are an expert assistant.",
        }
        if content is not None:
            attrs["llm.output_messages.0.message.content"] = content
        for number, (name, arguments) in enumerate(calls):
            prefix = f"llm.output_messages.0.message.tool_calls.{number}.tool_call."
            attrs[prefix + "function.name"] = name
            attrs[prefix + "function.arguments"] = json.dumps(arguments)
        return self.span("LiteLLMModel.__call__", "LLM", **_dotted(attrs))

    def tool(self, cls: str, name: str, kwargs: dict, output: str | None = None, error: str = "") -> dict:
        attrs: dict[str, Any] = {
            "tool.name": name,
            "input.value": json.dumps({"args": [], "sanitize_inputs_outputs": True, "kwargs": kwargs}),
        }
        if output is not None:
            attrs["output.value"] = output
        if not error:
            return self.span(cls, "TOOL", **_dotted(attrs))
        event = {
            "Timestamp": "2025-03-19T17:34:38.917156",
            "Name": "exception",
            "Attributes": {"exception.type": "TypeError", "exception.message": error},
        }
        return self.span(
            cls, "TOOL", status="Error", message=f"TypeError: {error}", events=[event], **_dotted(attrs)
        )


def _dotted(attributes: dict[str, Any]) -> dict[str, Any]:
    return {key.replace(".", "__"): value for key, value in attributes.items()}


def gaia_run() -> dict[str, Any]:
    """The whole trace, as ``{"trace_id", "spans": [root]}``."""
    t = Tree()
    search_steps = [
        t.span(
            "Step 1",
            "CHAIN",
            t.llm(calls=[("web_search", {"query": "NeurIPS 2022 Yuri"})]),
            t.tool(
                "SearchInformationTool",
                "web_search",
                {"query": "NeurIPS 2022 Yuri"},
                "Results: openreview.net",
            ),
            output__value="Results: openreview.net",
        ),
        t.span(
            "Step 2",
            "CHAIN",
            t.llm(calls=[("page_down", {"": ""})]),
            t.tool("PageDownTool", "page_down", {"": ""}, error=PAGE_DOWN_ERROR),
            status="Error",
            message=f"AgentExecutionError: Error when executing tool page_down: TypeError: {PAGE_DOWN_ERROR}",
        ),
        t.span("Step 3", "CHAIN", t.llm(calls=[("final_answer", {"answer": SEARCH_REPORT})])),
    ]
    searcher = t.span(
        "ToolCallingAgent.run",
        "AGENT",
        t.llm("1. Search openreview. 2. Page down. 3. Answer."),
        *search_steps,
        input__value=json.dumps({"task": "You're a helpful agent named 'search_agent'. Find the papers."}),
        output__value=SEARCH_REPORT,
        smolagents__tools_names='["web_search", "page_down", "final_answer"]',
    )
    manager_step_1 = t.span(
        "Step 1",
        "CHAIN",
        t.llm("Thought: ask the searcher.\nCode:\n```py\nprint(search_agent(task='Find the papers.'))\n```"),
        searcher,
        output__value=f"Execution logs:\n{HANDED_BACK}\n{SEARCH_REPORT}",
    )
    manager_step_2 = t.span(
        "Step 2",
        "CHAIN",
        t.llm("Thought: the answer is 0.\nCode:\n```py\nfinal_answer(0)\n```"),
        t.tool("FinalAnswerTool", "final_answer", {}, None),
        output__value="Execution logs:\nLast output from code snippet:\n0",
    )
    manager_step_2["child_spans"][1]["span_attributes"]["input.value"] = json.dumps(
        {"args": ["0"], "sanitize_inputs_outputs": False, "kwargs": {}}
    )
    manager = t.span(
        "CodeAgent.run",
        "AGENT",
        t.llm("### 1. Facts given in the task\n- an author named Yuri"),
        t.llm(MANAGER_PLAN),
        manager_step_1,
        manager_step_2,
        input__value=json.dumps({"task": TASK}),
        output__value="0",
        smolagents__managed_agents__0__name="search_agent",
        smolagents__managed_agents__0__description="A team member that will search the internet.",
        smolagents__tools_names='["visualizer", "inspect_file_as_text", "final_answer"]',
    )
    formatter = t.llm("FINAL ANSWER: 0", system=f"Earlier you were asked the following:\n\n{TASK}")
    answer = t.span("answer_single_question", None, manager, formatter)
    root = t.span("main", None, answer)
    stamp(root, count(0))
    return {"trace_id": TRACE_ID, "spans": [root]}


def stamp(span: dict[str, Any], seconds: count) -> None:
    """Start times in depth-first order, each span ending after its last child."""
    start = next(seconds)
    for child in span["child_spans"]:
        stamp(child, seconds)
    end = next(seconds)
    span["timestamp"] = f"2025-03-19T17:{start // 60:02d}:{start % 60:02d}.000000"
    span["duration"] = f"PT{end - start - 0.5}S"


def spans_of(tree: dict[str, Any]) -> list[dict[str, Any]]:
    """Every span of a tree, depth first."""
    out, stack = [], list(reversed(tree["spans"]))
    while stack:
        span = stack.pop()
        out.append(span)
        stack.extend(reversed(span["child_spans"]))
    return out
