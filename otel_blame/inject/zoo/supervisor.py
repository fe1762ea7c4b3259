"""Zoo app ``supervisor``: a LangGraph supervisor graph over an internal knowledge base.

A colleague's question about the (fictional) company's services, prices or capacity needs several
figures from the knowledge base and a computation. The ``supervisor`` node plans which figures are
needed and sends the ``researcher`` after them one at a time (what to search for, which entity the
quoted sentence must name, the unit); the researcher calls ``search_knowledge_base`` (a ``ToolNode``,
node ``retriever``) and reports each finding with its evidence. With every figure in, the
supervisor briefs the ``writer`` (numbered computation lines with the figures filled in); the
writer works through them with the ``calculator`` tool (node ``calculator``) and drafts the answer;
the supervisor recomputes the brief itself and sends a draft that disagrees back once. Every node
asks LangChain's ``ChatOpenAI``, pointed at the scripted LLM, whose replies
(:class:`SupervisorScript`) are computed from the messages each node is shown: a wrong figure, a
dropped plan line or a changed search query really changes what follows. The review catches a
writer's or a calculator's slip (the run is then ``masked``); the supervisor trusts the
researcher, so a bad finding or search result goes through to the answer.

A clean run is 20 to 24 steps; the task and every figure in the corpus are drawn from the seed.
Not in :data:`FAULTS`: ``terminate`` (the graph routes on a node's output before the message path
sees it, so a stop word added there changes no route), ``skipped_policy_step`` (dropping the
researcher's entity check does not change which sentence it quotes here) and
``ignored_tool_error`` (no tool fails in a clean run).
"""

from __future__ import annotations

import ast
import json
import math
import operator
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from otel_blame.demo.scripted_llm import Reply
from otel_blame.inject.demo_app import apply_corrections
from otel_blame.inject.zoo._knowledge_base import Document, Facts, draw_facts, search
from otel_blame.inject.zoo._resources import AppResources

FAULTS: tuple[str, ...] = (
    "number",
    "drop_instruction",
    "contradict_instruction",
    "tool_error",
    "wrong_tool_result",
    "wrong_tool_argument",
    "wrong_tool",
    "fabricated_fact",
    "premature_handoff",
    "lost_context",
)
TOOL_NAME = "search_knowledge_base"
CALCULATOR = "calculator"
RECURSION_LIMIT = 80
MAX_SUPERVISOR_TURNS = 14
REVIEW_POLICY = (
    "Finance policy: I recompute every bill myself and check the draft against it before it goes out."
)

PROMPTS = {
    "supervisor": (
        "You are the supervisor of a small research desk that answers colleagues' questions from the "
        "internal knowledge base. Plan which figures are needed, send the researcher after them one "
        "at a time, then brief the writer with the computation. Review the writer's draft against "
        "your brief before you finish. End every message with NEXT: researcher, NEXT: writer or "
        "NEXT: FINISH."
    ),
    "researcher": (
        "You are the researcher. For the research task you are given, search the knowledge base "
        "with the search_knowledge_base tool, then report the figure as 'Finding (key): value unit' "
        "with the sentence that states it. Never guess a figure the sources do not state."
    ),
    "writer": (
        "You are the writer. Turn the supervisor's brief into a short answer for the colleague who "
        "asked: compute each numbered line in order, state each reported figure with its unit, and "
        "cite the sources."
    ),
}


# --- tasks ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FactSpec:
    """One figure the answer needs: what it is, how to search for it, how to recognise it."""

    key: str
    description: str
    query: str
    terms: tuple[str, ...]
    unit: str


@dataclass(frozen=True)
class Reported:
    name: str
    label: str
    unit: str
    decimals: int


@dataclass(frozen=True)
class Task:
    kind: str
    question: str
    expected: dict[str, float]  # reported variable -> its right value
    reported: tuple[Reported, ...]

    def formatted(self, name: str, value: float) -> str:
        decimals = next(r.decimals for r in self.reported if r.name == name)
        return _format(value, decimals)

    @property
    def expected_output(self) -> str:
        return "; ".join(
            f"{r.label}: {self.formatted(r.name, self.expected[r.name])} {r.unit}" for r in self.reported
        )

    def is_right(self, answer: str | None) -> bool:
        text = answer or ""
        return all(
            re.search(rf"(?<![\d.-]){re.escape(self.formatted(name, value))}(?![\d])", text)
            for name, value in self.expected.items()
        )


def _format(value: float, decimals: int) -> str:
    text = f"{value:.{decimals}f}"
    return "0" if decimals == 0 and text in ("-0", "0") else text


def _downtime_task(rng: random.Random, facts: Facts) -> Task:
    service = "checkout-api"
    incidents = [i for i in facts.incidents if i.service == service]
    ids = (
        " and ".join(i.incident_id for i in incidents)
        if len(incidents) == 2
        else (", ".join(i.incident_id for i in incidents[:-1]) + f" and {incidents[-1].incident_id}")
    )
    question = (
        f"We are preparing the {facts.month} reliability review. How many minutes of customer-facing "
        f"downtime did {service} have across {ids}, and how many minutes of its monthly error budget "
        "are left after them? A negative figure is fine if the budget is overspent."
    )
    total = sum(i.minutes for i in incidents)
    return Task(
        "downtime",
        question,
        {"total_downtime": total, "budget_left": round(facts.budget_minutes(service) - total, 1)},
        (
            Reported("total_downtime", "Total customer-facing downtime", "minutes", 0),
            Reported("budget_left", "Error budget left", "minutes", 1),
        ),
    )


def _bill_task(rng: random.Random, facts: Facts) -> Task:
    seats = rng.choice((12, 25, 40, 60, 85))
    included = seats * facts.included_calls["Growth"]
    calls = included + rng.randrange(-5, 40) * 10000
    question = (
        f"A customer on the Growth plan has {seats} seats and made {calls} API calls in {facts.month}. "
        "What will their bill for the month be in dollars, before tax? Finance wants the overage "
        "shown separately."
    )
    overage = max(0, calls - included) / 1000 * facts.overage_per_thousand
    bill = seats * facts.seat_price["Growth"] + overage
    return Task(
        "bill",
        question,
        {"overage": round(overage, 2), "bill": round(bill, 2)},
        (
            Reported("overage", "Overage charge", "dollars", 2),
            Reported("bill", "Monthly bill before tax", "dollars", 2),
        ),
    )


def _capacity_task(rng: random.Random, facts: Facts) -> Task:
    growth = rng.choice((15, 20, 35, 50))
    question = (
        f"Finance forecasts that peak traffic on ledger-sync grows by {growth}% next quarter. How many "
        "ledger-sync nodes do we need next quarter to keep the headroom the capacity policy requires?"
    )
    required = facts.peak_rps * (1 + growth / 100) * (1 + facts.headroom / 100)
    return Task(
        "capacity",
        question,
        {"nodes": math.ceil(round(required / facts.node_rps, 6))},
        (Reported("nodes", "ledger-sync nodes needed", "nodes", 0),),
    )


TASK_KINDS: tuple[Callable[[random.Random, Facts], Task], ...] = (_downtime_task, _bill_task, _capacity_task)


def task_for(seed: int) -> tuple[Task, Facts]:
    rng = random.Random(seed)
    facts = draw_facts(rng)
    make = TASK_KINDS[rng.randrange(len(TASK_KINDS))]
    return make(rng, facts), facts


# --- the agents' scripted minds -------------------------------------------------------------------

_INCIDENT = re.compile(r"\bINC-\d+\b")
_NUMBER = r"-?\d+(?:\.\d+)?"
_UNIT_PATTERNS = {
    "minutes": rf"({_NUMBER}) minutes",
    "percent": rf"({_NUMBER})%",
    "dollars per seat": rf"\$({_NUMBER}) per seat",
    "API calls per seat": rf"({_NUMBER}) API calls per seat",
    "dollars per 1000 calls": rf"\$({_NUMBER}) per 1000 calls",
    "requests per second": rf"({_NUMBER}) requests per second",
}
_PLAN_LINE = re.compile(r"^\s*(\d+)\.\s+(?P<key>[^:\n]+):", re.MULTILINE)
_RESEARCH_TASK = re.compile(r"^Research task (?P<number>\d+): (?P<description>[^\n]+?)\.?\s*$", re.MULTILINE)
_SEARCH_FOR = re.compile(r"^Search for: (?P<value>[^\n]+?)\.?\s*$", re.MULTILINE)
_CHECK = re.compile(
    r"^Check: the sentence that states the figure must name (?P<value>[^\n]+?)\.?\s*$", re.MULTILINE
)
_UNIT = re.compile(r"^Unit: (?P<value>[^\n]+?)\.?\s*$", re.MULTILINE)
_FINDING = re.compile(rf"^Finding \((?P<key>[^)]+)\): (?P<value>{_NUMBER}|not found)", re.MULTILINE)
_FORMULA = re.compile(r"^\s*\d+[.)]\s+(?P<name>[a-z_]\w*)\s*=\s*(?P<expression>.+?)\s*$", re.MULTILINE)
_REPORT = re.compile(
    r"(?P<name>[a-z_]\w*) = (?P<label>[^(;\n]+?) \((?P<unit>[^,()]+), (?P<decimals>\d+) decimals?\)"
)
_TALLY = re.compile(rf"(?P<key>[^,=]+?) = (?P<value>{_NUMBER}|not found)")
_NEXT = re.compile(r"NEXT:\s*(researcher|writer|FINISH)")


def plan_facts(question: str) -> list[FactSpec]:
    """The figures a question needs (the supervisor's know-how of the knowledge base)."""
    if "downtime" in question:
        service = next((s for s in ("checkout-api", "ledger-sync", "notifications") if s in question), None)
        specs = [
            FactSpec(
                f"{incident} duration",
                f"the customer-facing duration of {incident}, in minutes",
                f"{incident} postmortem impact minutes",
                (incident,),
                "minutes",
            )
            for incident in dict.fromkeys(_INCIDENT.findall(question))
        ]
        if service:
            specs.append(
                FactSpec(
                    f"{service} error budget",
                    f"the monthly error budget of {service}, in minutes",
                    f"{service} error budget SLO",
                    (service, "error budget"),
                    "minutes",
                )
            )
        return specs
    if "Growth plan" in question:
        return [
            FactSpec(
                "Growth seat price",
                "the Growth plan's price per seat per month, in dollars",
                "Growth plan price per seat",
                ("Growth plan",),
                "dollars per seat",
            ),
            FactSpec(
                "Growth included calls",
                "the API calls included per Growth seat",
                "Growth plan included API calls per seat",
                ("Growth plan",),
                "API calls per seat",
            ),
            FactSpec(
                "Growth overage rate",
                "the Growth plan's overage rate, in dollars per 1000 calls",
                "Growth overage rate per 1000 calls",
                ("Growth", "overage"),
                "dollars per 1000 calls",
            ),
        ]
    if "nodes" in question and "ledger-sync" in question:
        return [
            FactSpec(
                "ledger-sync peak load",
                "last quarter's measured peak load of ledger-sync, in requests per second",
                "ledger-sync measured peak load requests per second",
                ("ledger-sync", "peak"),
                "requests per second",
            ),
            FactSpec(
                "ledger-sync node capacity",
                "the load one ledger-sync node sustains, in requests per second",
                "ledger-sync node sustains requests per second load tests",
                ("each ledger-sync node",),
                "requests per second",
            ),
            FactSpec(
                "ledger-sync headroom",
                "the headroom the capacity policy requires for ledger-sync, in percent",
                "ledger-sync headroom policy",
                ("headroom",),
                "percent",
            ),
        ]
    return []


def _brief_lines(question: str, values: dict[str, str]) -> tuple[list[str], list[str]]:
    """(computation lines, report entries) for the writer, figures filled in from ``values``."""
    if "downtime" in question:
        durations = [values[k] for k in values if k.endswith(" duration")]
        budget = next((values[k] for k in values if k.endswith(" error budget")), "[error budget: not found]")
        return (
            [
                f"total_downtime = {' + '.join(durations) or '[incident durations: not found]'}",
                f"budget_left = {budget} - total_downtime",
            ],
            [
                "total_downtime = Total customer-facing downtime (minutes, 0 decimals)",
                "budget_left = Error budget left (minutes, 1 decimal)",
            ],
        )
    if "Growth plan" in question:
        seats = re.search(r"has (\d+) seats", question)
        calls = re.search(r"made (\d+) API calls", question)
        price = values.get("Growth seat price", "[Growth seat price: not found]")
        included = values.get("Growth included calls", "[Growth included calls: not found]")
        rate = values.get("Growth overage rate", "[Growth overage rate: not found]")
        seats_text = seats.group(1) if seats else "[seat count: not given]"
        calls_text = calls.group(1) if calls else "[call count: not given]"
        return (
            [
                f"seat_charge = {seats_text} * {price}",
                f"allowance = {seats_text} * {included}",
                f"overage = max(0, {calls_text} - allowance) / 1000 * {rate}",
                "bill = seat_charge + overage",
            ],
            [
                "overage = Overage charge (dollars, 2 decimals)",
                "bill = Monthly bill before tax (dollars, 2 decimals)",
            ],
        )
    growth = re.search(r"grows by (\d+(?:\.\d+)?)%", question)
    peak = values.get("ledger-sync peak load", "[ledger-sync peak load: not found]")
    capacity = values.get("ledger-sync node capacity", "[ledger-sync node capacity: not found]")
    headroom = values.get("ledger-sync headroom", "[ledger-sync headroom: not found]")
    growth_text = growth.group(1) if growth else "[growth forecast: not given]"
    return (
        [
            f"forecast_peak = {peak} * (1 + {growth_text} / 100)",
            f"provisioned = forecast_peak * (1 + {headroom} / 100)",
            f"nodes = ceil(provisioned / {capacity})",
        ],
        ["nodes = ledger-sync nodes needed (nodes, 0 decimals)"],
    )


_OPERATORS: dict[type, Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., float]] = {
    "max": max,
    "min": min,
    "ceil": lambda x: math.ceil(round(x, 6)),
}


class CannotCompute(ValueError):
    """A computation line refers to a figure that is missing or is not arithmetic."""


def evaluate(expression: str, variables: dict[str, float]) -> float:
    """Arithmetic over numbers, earlier lines' variables, ``max``/``min``/``ceil``; nothing else."""

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in variables:
            return variables[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.operand))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
            return float(_FUNCTIONS[node.func.id](*(walk(a) for a in node.args)))
        raise CannotCompute(ast.unparse(node) if isinstance(node, ast.expr) else type(node).__name__)

    if "[" in expression:
        missing = re.search(r"\[([^\]]+)\]", expression)
        raise CannotCompute(missing.group(1) if missing else expression)
    try:
        return walk(ast.parse(expression, mode="eval"))
    except (SyntaxError, ZeroDivisionError) as error:
        raise CannotCompute(expression) from error


def compute_brief(brief: str) -> tuple[dict[str, float], list[tuple[str, str, str, int]]]:
    """The brief's variables (corrections honoured) and its report entries (name, label, unit, decimals)."""
    brief = apply_corrections(brief)
    variables: dict[str, float] = {}
    for line in _FORMULA.finditer(brief):
        variables[line["name"]] = evaluate(line["expression"], variables)
    reports = [
        (m["name"], m["label"].strip(), m["unit"].strip(), int(m["decimals"]))
        for m in _REPORT.finditer(brief)
    ]
    return variables, reports


@dataclass(frozen=True)
class Seen:
    """One message of the conversation as a node is shown it."""

    role: str
    name: str | None
    content: str
    tool_calls: tuple[dict[str, Any], ...] = ()


def _conversation(request: dict[str, Any]) -> list[Seen]:
    out = []
    for message in request.get("messages", []):
        if message.get("role") == "system":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        out.append(
            Seen(
                message.get("role", ""),
                message.get("name"),
                str(content or ""),
                tuple(message.get("tool_calls") or ()),
            )
        )
    return out


def _asking_node(request: dict[str, Any]) -> str | None:
    for message in request.get("messages", []):
        if message.get("role") == "system":
            found = re.match(r"You are the (\w+)", str(message.get("content") or ""))
            return found.group(1) if found else None
    return None


def _by(conversation: Sequence[Seen], name: str) -> list[Seen]:
    return [m for m in conversation if m.role == "assistant" and m.name == name]


def _findings(conversation: Sequence[Seen]) -> dict[str, str]:
    """key -> value ("not found" included): the supervisor's own latest tally of the figures, and
    the researcher's findings reported since (the tally is what the supervisor carries forward)."""
    found: dict[str, str] = {}
    since = 0
    for index, message in enumerate(conversation):
        if message.name == "supervisor" and "Figures so far:" in message.content:
            since = index
    if since:
        tally = apply_corrections(conversation[since].content).split("Figures so far:")[1].split("\n")[0]
        found.update((m["key"].strip(), m["value"]) for m in _TALLY.finditer(tally))
    for message in conversation[since:]:
        if message.role == "assistant" and message.name == "researcher":
            for match in _FINDING.finditer(apply_corrections(message.content)):
                found[match["key"].strip()] = match["value"]
    return found


def _dispatch(spec: FactSpec, number: int) -> str:
    return (
        f"Research task {number}: {spec.description}.\n"
        f"Search for: {spec.query}.\n"
        f"Check: the sentence that states the figure must name {' and '.join(spec.terms)}.\n"
        f"Unit: {spec.unit}.\n"
        "NEXT: researcher"
    )


def supervisor_reply(conversation: Sequence[Seen]) -> str:
    question = next((m.content for m in conversation if m.role == "user"), "")
    own = _by(conversation, "supervisor")
    if len(own) >= MAX_SUPERVISOR_TURNS:
        return "We are out of turns for this request; I am closing it with what we have.\nNEXT: FINISH"
    specs = plan_facts(question)
    if not specs:
        return (
            "The knowledge base does not cover this kind of question, so there is nothing for the desk "
            "to research. Please ask the owning team directly.\nNEXT: FINISH"
        )
    if not own:
        lines = "\n".join(f"{n}. {spec.key}: {spec.description}." for n, spec in enumerate(specs, 1))
        review = f"\n{REVIEW_POLICY}" if "Growth plan" in question else ""
        return (
            f"Plan: to answer this I need {len(specs)} figures from the knowledge base, then a short "
            f"computation.\n{lines}\nI will brief the writer once every figure is in.{review}\n"
            + _dispatch(specs[0], 1)
        )
    plan = apply_corrections(own[0].content)
    planned = {m["key"].strip(): int(m.group(1)) for m in _PLAN_LINE.finditer(plan)}
    findings = _findings(conversation)
    last = conversation[-1]
    if last.role == "assistant" and last.name == "writer":
        return _review(conversation, last.content, own, recompute=REVIEW_POLICY in plan)
    for spec in specs:
        if spec.key in planned and spec.key not in findings:
            done = ", ".join(f"{k} = {v}" for k, v in findings.items()) or "nothing yet"
            return f"Noted. Figures so far: {done}.\n{_dispatch(spec, planned[spec.key])}"
    values = {k: v for k, v in findings.items() if v != "not found"}
    computation, reports = _brief_lines(question, values)
    numbered = "\n".join(f"{n}. {line}" for n, line in enumerate(computation, 1))
    missing = [k for k, v in findings.items() if v == "not found"]
    gap = f" The researcher could not find: {', '.join(missing)}." if missing else ""
    return (
        f"All research is in ({len(values)} of {len(specs)} figures found).{gap} Writer, please draft the "
        f"answer for the colleague who asked. Compute, in order:\n{numbered}\n"
        f"Report: {'; '.join(reports)}\n"
        "Cite the knowledge-base pages the researcher quoted.\nNEXT: writer"
    )


def _last_brief(conversation: Sequence[Seen]) -> str | None:
    return next(
        (m.content for m in reversed(_by(conversation, "supervisor")) if "Compute, in order" in m.content),
        None,
    )


def _review(conversation: Sequence[Seen], draft: str, own: Sequence[Seen], *, recompute: bool) -> str:
    """Approve the draft, or send it back once; a bill's figures are recomputed (the finance
    policy), other answers only need every reported figure stated."""
    brief = _last_brief(conversation)
    if brief is None:
        return "The draft arrived without a brief; I am closing the request as it stands.\nNEXT: FINISH"
    try:
        variables, reports = compute_brief(brief)
    except CannotCompute as error:
        return (
            f"The answer cannot be completed: {error}, and the draft says so. "
            "I am closing the request so that the colleague can follow up with the owning team.\nNEXT: FINISH"
        )
    if not recompute:
        unstated = [label for _, label, _, _ in reports if not re.search(rf"{re.escape(label)}: -?\d", draft)]
        if unstated:
            return (
                f"The draft does not state {', '.join(unstated)}; I am closing the request with what we have."
                "\nNEXT: FINISH"
            )
        return "Approved: the draft states every figure the colleague asked for.\nNEXT: FINISH"
    wrong = [
        (label, _format(variables[name], decimals))
        for name, label, _, decimals in reports
        if name in variables
        and not re.search(rf"(?<![\d.-]){re.escape(_format(variables[name], decimals))}(?!\d)", draft)
    ]
    revised = any("Revision needed" in m.content for m in own)
    if wrong and not revised:
        issues = "; ".join(f"{label} should be {value}" for label, value in wrong)
        return (
            f"Revision needed: the draft does not match the brief's computation ({issues}). Writer, "
            "please recompute from the brief and send a corrected draft.\nNEXT: writer"
        )
    verdict = "Approved with reservations" if wrong else "Approved"
    return f"{verdict}: the draft states the figures computed from the researcher's findings.\nNEXT: FINISH"


@dataclass(frozen=True)
class ResearchTask:
    """What the researcher reads from the supervisor's dispatch (corrections honoured)."""

    number: int
    description: str
    query: str
    terms: tuple[str, ...]  # the entity check; empty when the dispatch asks for none
    unit: str | None


def _research_task(dispatch: str) -> ResearchTask | None:
    dispatch = apply_corrections(dispatch)
    task = _RESEARCH_TASK.search(dispatch)
    if task is None:
        return None
    search_for, check, unit = (pattern.search(dispatch) for pattern in (_SEARCH_FOR, _CHECK, _UNIT))
    return ResearchTask(
        int(task["number"]),
        task["description"].strip(),
        search_for["value"].strip() if search_for else task["description"].strip(),
        tuple(t.strip() for t in check["value"].split(" and ")) if check else (),
        unit["value"].strip() if unit else None,
    )


def researcher_reply(conversation: Sequence[Seen]) -> Reply:
    dispatch_at = max((i for i, m in enumerate(conversation) if m.name == "supervisor"), default=-1)
    task = _research_task(conversation[dispatch_at].content) if dispatch_at >= 0 else None
    if task is None:
        return Reply("I was not given a research task, so I have nothing to look up.")
    key = _key_of(conversation, task.number, task.description)
    results = [m.content for m in conversation[dispatch_at + 1 :] if m.role == "tool"]
    if not results:
        call = {
            "id": f"call_search_{task.number}_{len(conversation)}",
            "name": TOOL_NAME,
            "arguments": {"query": task.query},
        }
        return Reply("", tool_calls=[call])  # a tool call and nothing else, as models call tools
    return Reply(_finding(key, task, results[-1]))


def _key_of(conversation: Sequence[Seen], number: int, description: str) -> str:
    """The plan's key for research task ``number`` (the plan line of that number), else the description."""
    plan = next((m.content for m in conversation if m.name == "supervisor"), "")
    for match in _PLAN_LINE.finditer(plan):
        if int(match.group(1)) == number:
            return match["key"].strip()
    return description


def _finding(key: str, task: ResearchTask, result: str) -> str:
    try:
        passages = json.loads(result)["results"]
    except (ValueError, KeyError, TypeError):
        first = result.strip().splitlines()[-1] if result.strip() else "an empty reply"
        return (
            f"Finding ({key}): not found. The knowledge-base search failed ({first[:160]}), so I could not "
            "check the figure, and I will not guess it."
        )
    pattern = _UNIT_PATTERNS.get(task.unit or "", rf"({_NUMBER})")
    for passage in passages:
        for sentence in re.split(r"(?<=[.!?])\s+", str(passage.get("text", ""))):
            if all(t.lower() in sentence.lower() for t in task.terms):
                value = re.search(pattern, sentence)
                if value is not None:
                    return (
                        f"Finding ({key}): {value.group(1)} {task.unit or ''}".rstrip()
                        + f'.\nEvidence: "{sentence.strip()}" ({passage.get("doc_id")}, paragraph '
                        f"{passage.get('section')}).\nThe source states the figure directly, so no "
                        "estimate was needed."
                    )
    titles = "; ".join(str(p.get("title")) for p in passages) or "nothing"
    return (
        f"Finding ({key}): not found. The search returned {titles}, and none of those passages states "
        f"{task.description}."
    )


def _value_text(value: float) -> str:
    """A number as the writer types it into the calculator: no exponent, no float noise."""
    rounded = round(value, 6)
    return str(int(rounded)) if rounded == int(rounded) else repr(rounded)


def _calculator_result(content: str) -> float | str:
    """The calculator's result, or what went wrong."""
    try:
        answer = json.loads(content)
        return float(answer["result"])
    except (ValueError, KeyError, TypeError):
        try:
            return str(json.loads(content).get("error"))
        except (ValueError, AttributeError):
            lines = [line for line in content.strip().splitlines() if line.strip()]
            return lines[-1][:160] if lines else "no answer"


def writer_reply(conversation: Sequence[Seen]) -> Reply:
    """Compute the brief's lines one calculator call at a time, then draft the answer."""
    brief = _last_brief(conversation)
    if brief is None:
        return Reply("I have no brief to write from yet.")
    started = max(i for i, m in enumerate(conversation) if m.name == "supervisor")
    corrected = apply_corrections(brief)
    lines = [(m["name"], m["expression"]) for m in _FORMULA.finditer(corrected)]
    reports = [
        (m["name"], m["label"].strip(), m["unit"].strip(), int(m["decimals"]))
        for m in _REPORT.finditer(corrected)
    ]
    missing = next((re.search(r"\[([^\]]+)\]", e) for _, e in lines if "[" in e), None)
    if missing is not None:
        return Reply(
            f"Answer: I cannot give the full answer yet ({missing.group(1)}), so the computation the "
            "supervisor asked for cannot be completed. Please ask the owning team for the missing figure."
        )
    results = [m.content for m in conversation[started + 1 :] if m.role == "tool"]
    values: dict[str, float] = {}
    for number, (name, expression) in enumerate(lines, 1):
        if number > len(results):
            typed = re.sub(
                r"\b[a-z_]\w*\b",
                lambda word: _value_text(values[word.group()]) if word.group() in values else word.group(),
                expression,
            )
            call = {
                "id": f"call_calc_{number}_{len(conversation)}",
                "name": CALCULATOR,
                "arguments": {"expression": typed},
            }
            return Reply("", tool_calls=[call])
        result = _calculator_result(results[number - 1])
        if isinstance(result, str):
            return Reply(
                f"Answer: I could not finish the computation: the calculator failed on line {number} "
                f"({name}): {result}. I will not report figures I could not compute."
            )
        values[name] = result
    return Reply(_draft(conversation, values, reports))


def _draft(
    conversation: Sequence[Seen], values: dict[str, float], reports: list[tuple[str, str, str, int]]
) -> str:
    question = next((m.content for m in conversation if m.role == "user"), "")
    sources = sorted(
        set(
            re.findall(
                r"\(([a-z0-9-]+), paragraph \d+\)",
                "\n".join(m.content for m in _by(conversation, "researcher")),
            )
        )
    )
    lines = [
        f"- {label}: {_format(values[name], decimals)} {unit}."
        for name, label, unit, decimals in reports
        if name in values
    ]
    opening = question.split("?")[0].split(". ")[-1].strip()
    return (
        f'Answer: here is what the knowledge base gives for "{opening}?".\n' + "\n".join(lines) + "\n"
        "Each figure is computed from the quoted pages as the brief sets out. "
        f"Sources: {', '.join(sources) or 'none'}."
    )


class SupervisorScript:
    """The scripted LLM's answer for each node, computed from the messages the node is shown."""

    def __call__(self, request: dict[str, Any]) -> Reply:
        node = _asking_node(request)
        conversation = _conversation(request)
        if node == "supervisor":
            return Reply(supervisor_reply(conversation))
        if node == "researcher":
            return researcher_reply(conversation)
        if node == "writer":
            return writer_reply(conversation)
        return Reply("I do not know my role here.")


# --- the app --------------------------------------------------------------------------------------


_RESOURCES = AppResources(SupervisorScript(), prefix="otel-blame-zoo-supervisor-")


def _route(message: Any, default: str) -> str:
    """Where the graph goes after a node: its tools on a tool call, else the NEXT: it names."""
    text = str(getattr(message, "content", "") or "")
    if "TERMINATE" in text:
        return "end"
    if getattr(message, "tool_calls", None):
        return "tools"
    found = _NEXT.findall(text)
    return {"FINISH": "end"}.get(found[-1], found[-1]) if found else default


def build_graph(base_url: str, documents: list[Document]) -> Any:
    """supervisor -> researcher <-> retriever and supervisor -> writer <-> calculator, back to the
    supervisor after each finding and draft; END when the supervisor says NEXT: FINISH."""
    from langchain_core.messages import SystemMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    @tool(TOOL_NAME)
    def search_knowledge_base(query: str) -> str:
        """Search the internal knowledge base; returns the two best-matching passages as JSON."""
        passages = search(documents, query)
        found = [
            {"doc_id": p.doc_id, "title": p.title, "section": p.section, "text": p.text} for p in passages
        ]
        return json.dumps({"query": query, "results": found})

    @tool(CALCULATOR)
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression (+ - * /, parentheses, max, min, ceil); returns JSON."""
        try:
            return json.dumps({"expression": expression, "result": round(evaluate(expression, {}), 6)})
        except CannotCompute as error:
            return json.dumps({"expression": expression, "error": f"cannot evaluate {error}"})

    model = ChatOpenAI(
        model="scripted-model", base_url=base_url, api_key="offline", max_retries=0, temperature=0
    )

    def node(name: str, chat: Any) -> Callable[[MessagesState], dict[str, Any]]:
        def run(state: MessagesState) -> dict[str, Any]:
            reply = chat.invoke([SystemMessage(PROMPTS[name]), *state["messages"]])
            reply.name = name
            return {"messages": [reply]}

        return run

    def after(
        default: str, tools: str | None = None
    ) -> tuple[Callable[[MessagesState], str], dict[str, Any]]:
        targets: dict[str, Any] = {"researcher": "researcher", "writer": "writer", "supervisor": "supervisor"}
        if default != "end":  # a worker always reports back to the supervisor
            targets = dict.fromkeys(targets, "supervisor")
        targets |= {"end": END, "tools": tools or END}
        return (lambda state: _route(state["messages"][-1], default)), targets

    graph = StateGraph(MessagesState)
    graph.add_node("supervisor", node("supervisor", model))
    graph.add_node("researcher", node("researcher", model.bind_tools([search_knowledge_base])))
    graph.add_node("retriever", ToolNode([search_knowledge_base]))
    graph.add_node("writer", node("writer", model.bind_tools([calculator])))
    graph.add_node(CALCULATOR, ToolNode([calculator]))
    graph.add_edge(START, "supervisor")
    graph.add_conditional_edges("supervisor", *after("end"))
    graph.add_conditional_edges("researcher", *after("supervisor", "retriever"))
    graph.add_edge("retriever", "researcher")
    graph.add_conditional_edges("writer", *after("supervisor", CALCULATOR))
    graph.add_edge(CALCULATOR, "writer")
    return graph.compile(name="research_desk")


def final_answer(messages: Sequence[Any]) -> str | None:
    """The last writer draft (what the colleague receives), else the last message."""
    drafts = [m for m in messages if getattr(m, "name", None) == "writer"]
    chosen = drafts[-1] if drafts else (messages[-1] if messages else None)
    return None if chosen is None else str(chosen.content)


def run_task(seed: int = 0) -> bool:
    """Answer one knowledge-base question (drawn from ``seed``) with the graph; True when right."""
    from langchain_core.messages import HumanMessage

    from otel_blame.instrumentation import set_outcome, task

    _RESOURCES.forget_requests()  # the server keeps every request; a campaign makes thousands
    question, facts = task_for(seed)
    graph = build_graph(_RESOURCES.base_url, facts.documents)
    with task(
        f"research-desk-{question.kind}", input=question.question, expected_output=question.expected_output
    ):
        result = graph.invoke(
            {"messages": [HumanMessage(question.question)]}, config={"recursion_limit": RECURSION_LIMIT}
        )
        answer = final_answer(result["messages"])
        right = question.is_right(answer)
        set_outcome(
            right,
            final_output=answer,
            reason=None if right else f"expected {question.expected_output}; got {answer!r}",
        )
    return right
