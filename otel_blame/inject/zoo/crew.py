"""Zoo app ``crew``: a hierarchical CrewAI crew that writes a quarterly revenue brief.

The ``Head of Sales Operations`` manages the crew (CrewAI's hierarchical process with a custom
manager agent). It delegates the figures to the ``Revenue Analyst`` through CrewAI's own
``Delegate work to coworker`` tool, passing the finance policy (net revenue is gross sales minus
refunds; intercompany recharges are not revenue); the analyst queries the sales ledger and the
refunds register (two CrewAI tools over local data) for the quarter and the one before, and
reports net revenue, the change and the top product line. The manager then delegates the brief to
the ``Report Writer`` with the analyst's figures, checks the brief against those figures (sending
it back once when they disagree: a writer's slip is caught and the run is ``masked``) and returns
it. Every reply of the scripted LLM (:class:`CrewScript`) is computed from the prompt and the history
CrewAI builds for that agent, so a planted fault really changes what the crew does next. The manager
and the analyst have tools, so they ask for them by function calling (native tool calls) and answer
in plain text; the writer has none and answers in CrewAI's ReAct text (``Final Answer:``).

What the message path offers here: each agent's final answer (a coworker's answer is what the
delegation tool returns to the manager), each tool call before it runs (the manager's delegations
included: a changed coworker, task or context), and each tool result. Not in :data:`FAULTS`: ``terminate``
(CrewAI has no stop word), ``skipped_policy_step`` (the policy travels in the manager's delegation
arguments, which only ``wrong_tool_argument`` changes), ``fabricated_fact`` (no identifiers or
dates in the messages), ``ignored_tool_error`` (no tool fails in a clean run) and ``wrong_tool``
(a changed call is the one in the agent's history, as CrewAI keeps it: the agent sees that it asked
the wrong tool, which is not its own or does not have the figures it needs, and asks the right one,
so the run is always masked).

CrewAI lives in its own environment (``.venv-crewai``); telemetry is switched off before import.
A clean run is 15 steps; region, quarter and every ledger figure are drawn from the seed.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from otel_blame.demo.scripted_llm import Reply
from otel_blame.inject.demo_app import apply_corrections
from otel_blame.inject.zoo._resources import AppResources
from otel_blame.inject.zoo._sales_ledger import (
    INTERCOMPANY,
    QUARTERS,
    REGIONS,
    Ledger,
    draw_ledger,
    previous_quarter,
)

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

FAULTS: tuple[str, ...] = (
    "number",
    "drop_instruction",
    "contradict_instruction",
    "tool_error",
    "wrong_tool_result",
    "wrong_tool_argument",
    "premature_handoff",
    "lost_context",
)
MANAGER = "Head of Sales Operations"
ANALYST = "Revenue Analyst"
WRITER = "Report Writer"
DELEGATE = "Delegate work to coworker"
# the function names the model calls CrewAI's tools by, where they differ from the tools' names
_TOOL_OF_FUNCTION = {"delegate_work_to_coworker": DELEGATE}
_FUNCTION_OF_TOOL = {tool: function for function, tool in _TOOL_OF_FUNCTION.items()}
POLICY = (
    "Finance policy: net revenue is gross sales minus refunds. "
    "Intercompany recharges are not revenue and must be excluded."
)


# --- tasks ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Brief:
    region: str
    quarter: str
    ledger: Ledger

    @property
    def previous(self) -> str:
        return previous_quarter(self.quarter)

    @property
    def request(self) -> str:
        return (
            f"Prepare the {self.region} revenue brief for {self.quarter} for Monday's leadership meeting. "
            f"It must state {self.region}'s net revenue for {self.quarter}, the change on {self.previous} "
            "in percent, and the product line that earned the most. The figures must follow the finance "
            "policy and come from the ledger close."
        )

    @property
    def net(self) -> float:
        return self.ledger.net_revenue(self.region, self.quarter)

    @property
    def change(self) -> float:
        before = self.ledger.net_revenue(self.region, self.previous)
        return round((self.net - before) / before * 100, 1)

    @property
    def top_line(self) -> str:
        return self.ledger.top_line(self.region, self.quarter)

    @property
    def expected_output(self) -> str:
        return f"net revenue ${self.net:.2f}; change {self.change:+.1f}%; top product line {self.top_line}"

    def is_right(self, answer: str | None) -> bool:
        text = answer or ""
        return f"${self.net:.2f}" in text and f"{self.change:+.1f}%" in text and self.top_line in text


def brief_for(seed: int) -> Brief:
    rng = random.Random(seed)
    region, quarter = rng.choice(REGIONS), rng.choice(QUARTERS)
    return Brief(region, quarter, draw_ledger(rng, region, quarter))


# --- reading CrewAI's prompts ---------------------------------------------------------------------

_ROLE = re.compile(r"You are ([^.\n]+)\.")
_QUARTER = re.compile(r"\b\d{4}-Q[1-4]\b")
_MONEY = r"\$(-?\d+(?:\.\d+)?)"
# where CrewAI's task prompt ends: a native tool-calling agent's ends with its context, a ReAct one's
# with its call to begin or to respond
_PROMPT_ENDS = ("Begin!", "Provide your complete response:")


@dataclass(frozen=True)
class Used:
    """One tool use the agent's history shows: the tool, its input and what it observed."""

    tool: str
    arguments: dict[str, Any]
    observation: str


def _role(request: dict[str, Any]) -> str | None:
    for message in request.get("messages", []):
        if message.get("role") == "system":
            found = _ROLE.match(str(message.get("content") or ""))
            return found.group(1).strip() if found else None
    return None


def _task_and_history(request: dict[str, Any]) -> tuple[str, list[Used]]:
    """The agent's task text (the first user message) and its tool uses: each tool call of its
    history with the tool message that answered it."""
    task_text, history = "", []
    asked: dict[Any, tuple[str, dict[str, Any]]] = {}
    for message in request.get("messages", []):
        content = str(message.get("content") or "")
        if message.get("role") == "user" and not task_text:
            task_text = content
        elif message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    arguments = {}
                name = str(function.get("name"))
                asked[call.get("id")] = (
                    _TOOL_OF_FUNCTION.get(name, name),
                    arguments if isinstance(arguments, dict) else {},
                )
        elif message.get("role") == "tool" and message.get("tool_call_id") in asked:
            tool, arguments = asked.pop(message["tool_call_id"])
            history.append(Used(tool, arguments, content.strip()))
    return task_text, history


def _section(task_text: str, start: str, *ends: str) -> str:
    """The text after ``start`` (up to the first of ``ends`` there) in CrewAI's task prompt."""
    _, _, rest = task_text.partition(start)
    for end in ends:
        rest = rest.split(end)[0]
    return rest.strip()


def _call(thought: str, tool: str, arguments: dict[str, Any], history: Sequence[Used]) -> Reply:
    """A tool call by function calling (the thought as the reply's text, which CrewAI does not keep);
    call ids count the agent's tool uses, so a run's history is the same every time."""
    call = {
        "id": f"call_{len(history) + 1}",
        "name": _FUNCTION_OF_TOOL.get(tool, tool),
        "arguments": arguments,
    }
    return Reply(content=thought, tool_calls=[call])


def _final(text: str) -> str:
    """The final answer in CrewAI's ReAct text (the writer, who has no tools)."""
    return f"Thought: I now know the final answer\nFinal Answer: {text}"


# --- the manager --------------------------------------------------------------------------------


def manager_reply(task_text: str, history: Sequence[Used]) -> Reply:
    request = _section(task_text, "Current Task:", "This is the expected criteria")
    region = next((r for r in REGIONS if r in request), None)
    quarters = list(dict.fromkeys(_QUARTER.findall(request)))
    if region is None or len(quarters) < 2:
        return Reply("The request does not name a region and two quarters, so there is no brief to prepare.")
    quarter, previous = quarters[0], quarters[1]
    analyst = [u for u in history if u.tool == DELEGATE and u.arguments.get("coworker") == ANALYST]
    writer = [u for u in history if u.tool == DELEGATE and u.arguments.get("coworker") == WRITER]
    if not analyst:
        return _call(
            "The leadership brief needs audited figures first, so the Revenue Analyst should compute them "
            "from the ledger before anyone writes.",
            DELEGATE,
            {
                "task": (
                    f"Compute {region}'s net revenue for {quarter} and for {previous}, the "
                    f"quarter-over-quarter change in percent, and the product line with the highest net "
                    f"revenue in {quarter}."
                ),
                "context": (
                    f"Use the sales ledger and the refunds register for {region}, quarters {quarter} and "
                    f"{previous}. {POLICY} Report amounts in USD with two decimals and the change in percent "
                    "with one decimal and its sign."
                ),
                "coworker": ANALYST,
            },
            history,
        )
    figures = analyst[-1].observation
    if not writer:
        return _delegate_brief(region, quarter, previous, figures, None, history)
    draft = writer[-1].observation
    wrong = _disagreements(figures, draft)
    if wrong and len(writer) == 1:
        return _delegate_brief(region, quarter, previous, figures, "; ".join(wrong), history)
    return Reply(draft)


def _delegate_brief(
    region: str, quarter: str, previous: str, figures: str, correction: str | None, history: Sequence[Used]
) -> Reply:
    task = (
        f"Write the {region} revenue brief for {quarter} for the leadership meeting: three to five "
        f"sentences stating net revenue, the change on {previous} and the top product line."
    )
    thought = "The analyst's figures are in. The Report Writer should turn them into the brief."
    if correction:
        task = (
            f"Revise the {region} {quarter} revenue brief: {correction}. Use the analyst's figures exactly."
        )
        thought = "The brief does not match the analyst's figures; it goes back to the writer once."
    arguments = {"task": task, "context": f"Analyst's figures: {figures}", "coworker": WRITER}
    return _call(thought, DELEGATE, arguments, history)


def _disagreements(figures: str, draft: str) -> list[str]:
    """What the draft states differently from the analyst's figures (net revenue, change, top line)."""
    wrong = []
    net = re.search(rf"net revenue, \d{{4}}-Q\d: {_MONEY}", figures)
    if net and f"${net.group(1)}" not in draft:
        wrong.append(f"net revenue should be ${net.group(1)}")
    change = re.search(r"Quarter-over-quarter change: ([+-]\d+(?:\.\d+)?%)", figures)
    if change and change.group(1) not in draft:
        wrong.append(f"the change should be {change.group(1)}")
    top = re.search(r"Top product line in \d{4}-Q\d: ([A-Za-z ]+?) with", figures)
    if top and top.group(1) not in draft:
        wrong.append(f"the top product line should be {top.group(1)}")
    return wrong


# --- the analyst --------------------------------------------------------------------------------


def analyst_reply(task_text: str, history: Sequence[Used]) -> Reply:
    task_text = apply_corrections(task_text)
    request = _section(task_text, "Current Task:", "This is the expected criteria")
    context = _section(task_text, "This is the context you're working with:", *_PROMPT_ENDS)
    region = next((r for r in REGIONS if r in request), None)
    quarters = list(dict.fromkeys(_QUARTER.findall(request)))
    if region is None or not quarters:
        return Reply("The task names no region and quarter, so there is nothing to compute.")
    needed = [(tool, q) for q in quarters for tool in ("query_ledger", "query_refunds")]
    seen = {
        (u.tool, u.arguments.get("quarter")): u.observation
        for u in history
        if u.arguments.get("region") == region
    }
    for tool, quarter in needed:
        if (tool, quarter) not in seen:
            what = "gross sales by product line" if tool == "query_ledger" else "refunds by product line"
            arguments = {"region": region, "quarter": quarter}
            return _call(f"I need the {what} for {region} in {quarter}.", tool, arguments, history)
    exclude = "intercompany" in context.lower() and "excluded" in context.lower()
    nets: dict[str, float | str] = {}
    tops: dict[str, tuple[str, float]] = {}
    notes: dict[str, str] = {}
    for quarter in quarters:
        computed = _net_of(seen[("query_ledger", quarter)], seen[("query_refunds", quarter)], exclude)
        if isinstance(computed, str):
            nets[quarter] = computed
            continue
        net, per_line, gross, refunds, recharge = computed
        nets[quarter] = net
        tops[quarter] = max(per_line.items(), key=lambda item: item[1])
        left_out = (
            f"; intercompany recharges of ${recharge:.2f} excluded per policy" if exclude and recharge else ""
        )
        notes[quarter] = f"gross sales ${gross:.2f} minus refunds ${refunds:.2f}{left_out}"
    lines = []
    for quarter in quarters:
        value = nets[quarter]
        if isinstance(value, str):
            lines.append(f"{region} net revenue, {quarter}: not available ({value}).")
        else:
            lines.append(f"{region} net revenue, {quarter}: ${value:.2f} ({notes[quarter]}).")
    current, *earlier = quarters
    if earlier and all(isinstance(nets[q], float) for q in (current, earlier[0])) and nets[earlier[0]]:
        change = (float(nets[current]) - float(nets[earlier[0]])) / float(nets[earlier[0]]) * 100
        lines.append(f"Quarter-over-quarter change: {change:+.1f}%.")
    else:
        lines.append("Quarter-over-quarter change: not available, one of the quarters has no figure.")
    if current in tops:
        name, value = tops[current]
        lines.append(f"Top product line in {current}: {name} with ${value:.2f} net revenue.")
    lines.append("All amounts in USD, from the finance ledger close and the refunds register.")
    return Reply("\n".join(lines))


def _net_of(
    ledger: str, refunds: str, exclude_intercompany: bool
) -> tuple[float, dict[str, float], float, float, float] | str:
    """(net, net per product line, gross, refunds, intercompany excluded), or why it cannot be computed."""
    for observation in (ledger, refunds):
        if _json_of(observation) is None or "lines" not in (_json_of(observation) or {}):
            return f"the finance data service failed: {_first_line(observation)}"
    try:
        sales = {r["product_line"]: float(r["gross_sales"]) for r in _json_of(ledger)["lines"]}  # type: ignore[index]
        returned = {r["product_line"]: float(r["refunds"]) for r in _json_of(refunds)["lines"]}  # type: ignore[index]
    except (ValueError, KeyError, TypeError) as error:
        return f"the finance data had an unexpected shape ({error})"
    recharge = sales.get(INTERCOMPANY, 0.0) if exclude_intercompany else 0.0
    lines = {
        line: round(gross - returned.get(line, 0.0), 2)
        for line, gross in sales.items()
        if not (exclude_intercompany and line == INTERCOMPANY)
    }
    gross = sum(v for k, v in sales.items() if not (exclude_intercompany and k == INTERCOMPANY))
    refund_total = sum(v for k, v in returned.items() if not (exclude_intercompany and k == INTERCOMPANY))
    products = {k: v for k, v in lines.items() if k != INTERCOMPANY}
    return round(sum(lines.values()), 2), products, round(gross, 2), round(refund_total, 2), recharge


def _json_of(observation: str) -> dict[str, Any] | None:
    """The JSON object an observation starts with (what follows it is not read)."""
    text = observation.strip()
    if not text.startswith("{"):
        return None
    try:
        found, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _first_line(observation: str) -> str:
    found = _json_of(observation)
    if found is not None and "error" in found:
        return str(found["error"])[:160]
    lines = [line for line in observation.strip().splitlines() if line.strip()]
    return " ".join(lines[:3])[:200] if lines else "no answer"


# --- the writer -----------------------------------------------------------------------------------


def _net_stated(net: re.Match[str], context: str) -> str:
    """The net revenue the writer states: gross minus refunds when the analyst's line gives both
    (the writer checks the subtraction, as the line defines it), else the figure as given."""
    parts = re.match(rf" \(gross sales {_MONEY} minus refunds {_MONEY}", context[net.end() :])
    if parts is None:
        return net.group(1)
    return f"{float(parts.group(1)) - float(parts.group(2)):.2f}"


def writer_reply(task_text: str) -> str:
    task_text = apply_corrections(task_text)
    request = _section(task_text, "Current Task:", "This is the expected criteria")
    context = _section(task_text, "This is the context you're working with:", *_PROMPT_ENDS)
    region = next((r for r in REGIONS if r in request), "the region")
    quarters = _QUARTER.findall(request)
    quarter = quarters[0] if quarters else "the quarter"
    net = re.search(rf"net revenue, {re.escape(quarter)}: {_MONEY}", context)
    before = re.search(rf"net revenue, (\d{{4}}-Q\d): {_MONEY}", context[net.end() :] if net else context)
    change = re.search(r"Quarter-over-quarter change: ([+-]\d+(?:\.\d+)?%)", context)
    top = re.search(r"Top product line in \d{4}-Q\d: ([A-Za-z ]+?) with " + _MONEY, context)
    sentences = [f"{region} revenue brief, {quarter}."]
    if net:
        sentences.append(f"{region} closed {quarter} with net revenue of ${_net_stated(net, context)}.")
    else:
        sentences.append(f"Net revenue for {quarter} is not available yet: the analyst could not compute it.")
    if change and before:
        direction = "up" if change.group(1).startswith("+") else "down"
        sentences.append(
            f"That is {direction} on {before.group(1)} (${before.group(2)}), a change of {change.group(1)}."
        )
    else:
        sentences.append(
            "The change on the previous quarter could not be computed from the figures provided."
        )
    if top:
        sentences.append(f"{top.group(1)} was the largest product line with ${top.group(2)} in net revenue.")
    sentences.append(
        "Figures are net of refunds, exclude intercompany recharges and come from the ledger close."
    )
    return _final(" ".join(sentences))


class CrewScript:
    """The scripted LLM's answer for each crew member, computed from the prompt CrewAI built for it."""

    def __call__(self, request: dict[str, Any]) -> Reply:
        role = _role(request)
        task_text, history = _task_and_history(request)
        if role == MANAGER:
            return manager_reply(task_text, history)
        if role == ANALYST:
            return analyst_reply(task_text, history)
        if role == WRITER:
            return Reply(writer_reply(task_text))
        return Reply(_final("I am not part of this crew."))


# --- the app --------------------------------------------------------------------------------------


_RESOURCES = AppResources(CrewScript(), prefix="otel-blame-zoo-crew-")


def build_crew(base_url: str, brief: Brief) -> Any:
    """The manager, the analyst (with the ledger and refunds tools) and the writer, one task."""
    import crewai
    from crewai.tools import BaseTool

    ledger = brief.ledger

    class QueryLedger(BaseTool):
        name: str = "query_ledger"
        description: str = "Gross sales and order counts by product line for a region and quarter (JSON)."

        def _run(self, region: str, quarter: str) -> str:
            return ledger.ledger_json(region, quarter)

    class QueryRefunds(BaseTool):
        name: str = "query_refunds"
        description: str = "Refunds by product line for a region and quarter (JSON)."

        def _run(self, region: str, quarter: str) -> str:
            return ledger.refunds_json(region, quarter)

    model = crewai.LLM(
        model="scripted-model", provider="openai", base_url=base_url, api_key="offline", max_retries=0
    )
    common = {"llm": model, "verbose": False, "max_iter": 12}
    manager = crewai.Agent(
        role=MANAGER,
        goal="Deliver an accurate quarterly revenue brief for the leadership meeting.",
        backstory="You run sales operations and own the numbers leadership sees every quarter.",
        allow_delegation=True,
        **common,
    )
    analyst = crewai.Agent(
        role=ANALYST,
        goal="Compute revenue figures from the ledger exactly as the finance policy defines them.",
        backstory="You are the finance team's analyst; you never estimate a figure the ledger can give.",
        tools=[QueryLedger(), QueryRefunds()],
        allow_delegation=False,
        cache=False,
        **common,
    )
    writer = crewai.Agent(
        role=WRITER,
        goal="Write short, exact briefs for leadership from the figures you are given.",
        backstory="You write the leadership team's briefs; you never change a figure.",
        allow_delegation=False,
        **common,
    )
    job = crewai.Task(
        description=brief.request,
        expected_output="A three-to-five sentence brief with net revenue, the change on the previous quarter "
        "and the top product line.",
        name="quarterly revenue brief",
    )
    return crewai.Crew(
        agents=[analyst, writer],
        tasks=[job],
        process=crewai.Process.hierarchical,
        manager_agent=manager,
        name="revenue_brief_crew",
        verbose=False,
    )


def run_task(seed: int = 0) -> bool:
    """Prepare one revenue brief (region and quarter drawn from ``seed``); True when its figures are right."""
    from otel_blame.instrumentation import set_outcome, task

    _RESOURCES.forget_requests()  # the server keeps every request; a campaign makes thousands
    brief = brief_for(seed)
    crew = build_crew(_RESOURCES.base_url, brief)
    with task(
        f"revenue-brief-{brief.region.lower().replace(' ', '-')}",
        input=brief.request,
        expected_output=brief.expected_output,
    ):
        answer = str(crew.kickoff().raw)
        right = brief.is_right(answer)
        set_outcome(
            right,
            final_output=answer,
            reason=None if right else f"expected {brief.expected_output}; got {answer!r}",
        )
    return right
