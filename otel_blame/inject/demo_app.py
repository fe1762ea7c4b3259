"""The app ``otel-blame inject --app demo`` runs: a real AG2 group chat whose agents react to what
they are told, on the scripted offline LLM.

It is the demo's group chat (``user`` asks, ``planner`` plans, ``coder`` writes Python,
``executor`` runs it for real, ``reviewer`` gives the final answer), but the scripted replies are
computed from the conversation instead of fixed per task: the planner plans from the numbers in
the question, the coder implements the planner's numbered steps (and honours ``Correction:``
lines), the reviewer reports what the executor printed. So a fault planted in any message changes
what the later agents do, as it would with a real model, and the run fails (or, when the fault
does not matter, passes) for real. Tasks are small arithmetic word problems drawn from the seed.
"""

from __future__ import annotations

import atexit
import math
import random
import re
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_blame.demo.scenario import SYSTEM_MESSAGES, final_answer
from otel_blame.demo.scripted_llm import Reply, ScriptedLLM

# the kinds a campaign plants by default: the six the recorded demo figures were measured with
FAULTS: tuple[str, ...] = (
    "number",
    "drop_instruction",
    "contradict_instruction",
    "tool_error",
    "wrong_tool_result",
    "terminate",
)

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_CORRECTION_VALUE = re.compile(r"^Correction:\s*(\d+(?:\.\d+)?)\s+should be\s+(\d+(?:\.\d+)?)", re.MULTILINE)
_CORRECTION_SKIP = re.compile(r"^Correction:\s*skip step\s+(\d+)", re.MULTILINE)
_PLAN_ASSIGNMENT = re.compile(r"^\s*(\d+)[.)]\s+([A-Za-z_]\w*)\s*=\s*(.+?)\s*$", re.MULTILINE)
_PLAN_PRINT = re.compile(
    r"^\s*(\d+)[.)]\s+Print\s+([A-Za-z_]\w*)\s+rounded to\s+(\d+)\s+decimals", re.MULTILINE
)
_RESULT = re.compile(r"Result:\s*(-?\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class Template:
    """One kind of word problem: how to draw it, which word identifies it, how to plan it."""

    keyword: str
    arity: int  # how many numbers the question states
    decimals: int
    unit: str  # "$" before the answer, or a unit after it
    draw: Callable[[random.Random], list[float]]
    question: Callable[[Sequence[float]], str]
    plan: Callable[[Sequence[str]], list[str]]  # numbers as written -> "name = expression" lines
    result: str  # the variable the plan prints
    solve: Callable[[Sequence[float]], float]


def _money(value: float) -> str:
    return f"{value:.2f}"


TEMPLATES: tuple[Template, ...] = (
    Template(
        keyword="notebooks",
        arity=5,
        decimals=2,
        unit="$",
        draw=lambda r: [
            r.randint(2, 9),
            r.choice([12.99, 19.99, 7.49, 3.25]),
            r.randint(2, 9),
            4.5,
            r.choice([5, 7, 8, 10]),
        ],
        question=lambda n: (
            f"An order has {n[0]:g} notebooks at ${_money(n[1])} each and {n[2]:g} pens at ${_money(n[3])} "
            f"each. Sales tax is {n[4]:g}%. What is the order total in dollars, rounded to cents?"
        ),
        plan=lambda n: [
            f"subtotal = {n[0]} * {n[1]} + {n[2]} * {n[3]}",
            f"total = subtotal * (1 + {n[4]} / 100)",
        ],
        result="total",
        solve=lambda n: (n[0] * n[1] + n[2] * n[3]) * (1 + n[4] / 100),
    ),
    Template(
        keyword="miles",
        arity=2,
        decimals=2,
        unit=" km",
        draw=lambda r: [r.randint(2, 15), r.randint(2, 15)],
        question=lambda n: (
            f"A runner covers {n[0]:g} miles on Monday and {n[1]:g} miles on Tuesday. How many kilometres "
            "is that in total, rounded to two decimals?"
        ),
        plan=lambda n: [
            f"miles = {n[0]} + {n[1]}",
            "km_per_mile = 1.609344",
            "distance = miles * km_per_mile",
        ],
        result="distance",
        solve=lambda n: (n[0] + n[1]) * 1.609344,
    ),
    Template(
        keyword="scores",
        arity=4,
        decimals=1,
        unit="",
        draw=lambda r: [r.randint(55, 99) for _ in range(4)],
        question=lambda n: (
            f"The test scores are {n[0]:g}, {n[1]:g}, {n[2]:g} and {n[3]:g}. What is their mean, rounded "
            "to one decimal place?"
        ),
        plan=lambda n: [f"total = {n[0]} + {n[1]} + {n[2]} + {n[3]}", "count = 4", "mean = total / count"],
        result="mean",
        solve=lambda n: sum(n[:4]) / 4,
    ),
    Template(
        keyword="jacket",
        arity=3,
        decimals=2,
        unit="$",
        draw=lambda r: [
            r.choice([59.99, 89.5, 120.0, 74.25]),
            r.choice([10, 15, 20, 25]),
            r.choice([4.99, 6.5, 9.0]),
        ],
        question=lambda n: (
            f"A jacket costs ${_money(n[0])}. It is discounted by {n[1]:g}% and then a ${_money(n[2])} "
            "shipping fee is added. What is the final price in dollars, rounded to cents?"
        ),
        plan=lambda n: [f"discounted = {n[0]} * (1 - {n[1]} / 100)", f"final = discounted + {n[2]}"],
        result="final",
        solve=lambda n: n[0] * (1 - n[1] / 100) + n[2],
    ),
)


@dataclass(frozen=True)
class Problem:
    template: Template
    numbers: list[float]

    @property
    def question(self) -> str:
        return self.template.question(self.numbers)

    @property
    def expected(self) -> float:
        return round(self.template.solve(self.numbers), self.template.decimals)

    def formatted(self, value: float) -> str:
        text = f"{value:.{self.template.decimals}f}"
        return f"${text}" if self.template.unit == "$" else f"{text}{self.template.unit}"

    def is_right(self, answer: str | None) -> bool:
        found = _NUMBER.search((answer or "").replace(",", ""))
        if found is None:
            return False
        return math.isclose(float(found.group()), self.expected, abs_tol=0.5 * 10**-self.template.decimals)


def problem_for(seed: int) -> Problem:
    rng = random.Random(seed)
    template = TEMPLATES[rng.randrange(len(TEMPLATES))]
    return Problem(template, [float(x) for x in template.draw(rng)])


# --- the agents' scripted minds -------------------------------------------------------------------


def apply_corrections(text: str) -> str:
    """Honour ``Correction: X should be Y`` (replace the number) and ``Correction: skip step K``."""
    for old, new in _CORRECTION_VALUE.findall(text):
        text = re.sub(rf"(?<![\d.]){re.escape(old)}(?![\d]|\.\d)", new, text.split("\nCorrection:")[0]) + (
            "\n" + "\n".join(line for line in text.splitlines() if line.startswith("Correction:"))
        )
    for step in _CORRECTION_SKIP.findall(text):
        text = re.sub(rf"^\s*{step}[.)]\s+.*$\n?", "", text, flags=re.MULTILINE)
    return text


def _template_of(question: str) -> Template | None:
    return next((t for t in TEMPLATES if t.keyword in question), None)


def plan_reply(question: str) -> str:
    question = apply_corrections(question)
    template = _template_of(question)
    body = question.split("\nCorrection:")[0]
    numbers = _NUMBER.findall(body)
    if template is None or len(numbers) < template.arity:
        return "Plan: the task does not give the numbers I need, so there is nothing to compute. TERMINATE"
    lines = template.plan(numbers[: template.arity])
    lines.append(f"Print {template.result} rounded to {template.decimals} decimals.")
    numbered = "\n".join(f"{position}. {line}" for position, line in enumerate(lines, 1))
    return f"Plan:\n{numbered}\nCoder, please implement this plan in Python."


def code_reply(plan: str) -> str:
    plan = apply_corrections(plan)
    assignments = [(name, expression) for _, name, expression in _PLAN_ASSIGNMENT.findall(plan)]
    printed = _PLAN_PRINT.search(plan)
    if not assignments:
        return "I do not see a plan with steps to implement."
    lines = [f"{name} = {expression}" for name, expression in assignments]
    if printed is not None:
        lines.append(f'print(f"Result: {{round({printed.group(2)}, {printed.group(3)})}}")')
    body = "\n".join(lines)
    return f"```python\n{body}\n```"


def review_reply(execution: str | None) -> str:
    if execution is None or not execution.startswith("exitcode: 0"):
        return "The code did not run successfully, so there is no verified result. TERMINATE"
    found = _RESULT.search(execution)
    if found is None:
        return "The code ran but printed no result, so there is no verified result. TERMINATE"
    return f"The executor printed {found.group(1)}. Final answer: {found.group(1)} TERMINATE"


def _asking_agent(request: dict[str, Any]) -> str | None:
    for message in request.get("messages", []):
        if message.get("role") == "system":
            match = re.match(r"You are (\w+)\b", str(message.get("content") or ""))
            return match.group(1) if match else None
    return None


def _contents(request: dict[str, Any]) -> list[str]:
    return [str(m.get("content") or "") for m in request.get("messages", []) if m.get("role") != "system"]


class ReactiveScript:
    """The scripted LLM's answer: each agent's reply computed from the messages it is shown."""

    def __call__(self, request: dict[str, Any]) -> Reply:
        agent = _asking_agent(request)
        contents = _contents(request)
        if agent == "planner":
            return Reply(plan_reply(contents[0] if contents else ""))
        if agent == "coder":
            plan = next((c for c in reversed(contents) if _PLAN_ASSIGNMENT.search(c)), "")
            return Reply(code_reply(plan))
        if agent == "reviewer":
            execution = next((c for c in reversed(contents) if c.startswith("exitcode:")), None)
            return Reply(review_reply(execution))
        return Reply("I have nothing to add. TERMINATE")


# --- the app --------------------------------------------------------------------------------------


class _Resources:
    """One scripted LLM server and code directory per process, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.llm: ScriptedLLM | None = None
        self.work_dir: Path | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def get(self) -> tuple[str, Path]:
        with self._lock:
            if self.llm is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="otel-blame-inject-app-")
                self.work_dir = Path(self._tmp.name)
                self.llm = ScriptedLLM(ReactiveScript()).__enter__()
                atexit.register(self.close)
            assert self.work_dir is not None
            return self.llm.base_url, self.work_dir

    def close(self) -> None:
        with self._lock:
            if self.llm is not None:
                self.llm.__exit__(None, None, None)
                self.llm = None
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None


_RESOURCES = _Resources()


def run_task(seed: int = 0) -> bool:
    """Run one word problem (drawn from ``seed``) through the group chat; True when answered right.

    The app contract of ``otel-blame inject``: one task in ``otel_blame.instrumentation.task``, its
    outcome set with ``set_outcome``.
    """
    from otel_blame.demo.scenario import build_group_chat, mismatch_reason
    from otel_blame.instrumentation import set_outcome, task

    problem = problem_for(seed)
    base_url, work_dir = _RESOURCES.get()
    user, manager = build_group_chat(base_url, work_dir)
    expected = problem.formatted(problem.expected)
    with task(f"word-problem-{problem.template.keyword}", input=problem.question, expected_output=expected):
        result = user.initiate_chat(manager, message=problem.question, summary_method="last_msg")
        answer = final_answer(result.chat_history)
        right = problem.is_right(answer)
        set_outcome(right, final_output=answer, reason=None if right else mismatch_reason(expected, answer))
    return right


__all__ = ["FAULTS", "SYSTEM_MESSAGES", "TEMPLATES", "ReactiveScript", "problem_for", "run_task"]
