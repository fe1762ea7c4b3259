"""A real AG2 (classic ``autogen``) group chat on a scripted LLM, instrumented by otel-blame.

Five agents solve small arithmetic tasks: ``user`` states the task, ``planner`` plans, ``coder``
writes Python, ``executor`` runs it for real, ``reviewer`` gives the final answer. The LLM replies
are scripted per task, and some tasks carry a deliberate, known mistake (a wrong constant from the
planner, a typo in the coder's code), so the run fails at a known step. The offline demo and the
end-to-end tests both run this app; only where its spans go differs.
"""

from __future__ import annotations

import re
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from otel_blame.demo.scripted_llm import Reply, ScriptedLLM

AGENTS = ("user", "planner", "coder", "executor", "reviewer")
LLM_AGENTS = ("planner", "coder", "reviewer")
FINAL_ANSWER = re.compile(r"Final answer:\s*(?P<answer>[^\n]+?)\s*(?:TERMINATE|$)")


@dataclass(frozen=True)
class DemoTask:
    """One task with the scripted replies of the LLM agents; ``fault_*`` name the planted mistake."""

    name: str
    question: str
    expected_answer: str
    replies: dict[str, str]
    fault_agent: str | None = None
    fault_step: int | None = None
    fault: str | None = None


def _code(body: str) -> str:
    return f"```python\n{body.strip()}\n```"


ORDER_TOTAL = DemoTask(
    name="order-total",
    question=(
        "An order has 3 notebooks at $19.99 each and 2 pens at $4.50 each. Sales tax is 8%. "
        "What is the order total in dollars, rounded to cents?"
    ),
    expected_answer="$74.49",
    replies={
        "planner": (
            "Plan: 1) subtotal = 3 * 19.99 + 2 * 4.50. 2) total = subtotal * (1 + 0.08). "
            "3) round to cents. Coder, please compute it in Python."
        ),
        "coder": _code(
            """
subtotal = 3 * 19.99 + 2 * 4.50
tax_rate = 0.18
total = subtotal * (1 + tax_rate)
print(f"Total: ${total:.2f}")
"""
        ),
        "reviewer": "The code ran without errors and printed the total. Final answer: $81.38 TERMINATE",
    },
    fault_agent="coder",
    fault_step=2,
    fault="the coder typed a tax rate of 0.18 instead of the 8% in the task",
)

MEAN_SCORE = DemoTask(
    name="mean-score",
    question="Three test scores are 82, 91 and 77. What is their mean, rounded to one decimal place?",
    expected_answer="83.3",
    replies={
        "planner": "Plan: add the three scores and divide by 3, then round to one decimal. Coder, go ahead.",
        "coder": _code(
            """
scores = [82, 91, 77]
print(f"Mean: {sum(scores) / len(scores):.1f}")
"""
        ),
        "reviewer": "The executor printed 83.3, which matches the plan. Final answer: 83.3 TERMINATE",
    },
)

RUN_DISTANCE = DemoTask(
    name="run-distance",
    question="A runner covers 5 miles. How many kilometres is that, rounded to two decimals?",
    expected_answer="8.05 km",
    replies={
        "planner": (
            "Plan: one mile is 1.852 km, so 5 miles is about 9.26 km. Coder, please confirm it in Python "
            "by multiplying the miles by 1.852 and rounding to two decimals."
        ),
        "coder": _code(
            """
miles = 5
km_per_mile = 1.852
print(f"Distance: {miles * km_per_mile:.2f} km")
"""
        ),
        "reviewer": "The code follows the plan exactly and printed 9.26 km. Final answer: 9.26 km TERMINATE",
    },
    fault_agent="planner",
    fault_step=1,
    fault="the planner used the nautical mile (1.852 km) instead of the statute mile (1.609 km)",
)

TASKS: tuple[DemoTask, ...] = (ORDER_TOTAL, MEAN_SCORE, RUN_DISTANCE)


class ScenarioScript:
    """The scripted LLM's answer function: replies for the current task, chosen by the asking agent.

    Each LLM agent has a system message naming it; the reply is that agent's scripted text for
    the task set with :meth:`use`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._task: DemoTask | None = None

    def use(self, task: DemoTask) -> None:
        with self._lock:
            self._task = task

    def __call__(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            task = self._task
        agent = _asking_agent(request)
        if task is None or agent is None or agent not in task.replies:
            return Reply("I have nothing to add. TERMINATE")
        return Reply(task.replies[agent])


def _asking_agent(request: dict[str, Any]) -> str | None:
    for message in request.get("messages", []):
        if message.get("role") == "system":
            match = re.match(r"You are (\w+)\b", str(message.get("content") or ""))
            return match.group(1) if match else None
    return None


SYSTEM_MESSAGES = {
    "planner": "You are planner. Break the task into steps for the coder. Be brief.",
    "coder": "You are coder. Write one Python code block that prints the result.",
    "reviewer": "You are reviewer. Check the executor's output and give 'Final answer: ...' then TERMINATE.",
}


@dataclass
class SpanCounter(SpanProcessor):
    """Remembers the span ids the app ended, per trace: what the end-to-end tests expect to arrive."""

    spans: dict[str, set[str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        context = span.get_span_context()
        if context is None:
            return
        with self._lock:
            self.spans.setdefault(f"{context.trace_id:032x}", set()).add(f"{context.span_id:016x}")

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


@dataclass(frozen=True)
class TaskRunResult:
    task: DemoTask
    trace_id: str
    final_answer: str | None
    failed: bool


def build_group_chat(llm_base_url: str, work_dir: Path) -> tuple[Any, Any]:
    """The five agents and their manager; returns (user agent, manager)."""
    from autogen import ConversableAgent, GroupChat, GroupChatManager
    from autogen.coding import LocalCommandLineCodeExecutor

    llm_config = {
        "config_list": [{"model": "scripted-model", "base_url": llm_base_url, "api_key": "offline-demo"}],
        "cache_seed": None,
    }
    user = ConversableAgent("user", llm_config=False, human_input_mode="NEVER", default_auto_reply="")
    llm_agents = [
        ConversableAgent(
            name, system_message=SYSTEM_MESSAGES[name], llm_config=llm_config, human_input_mode="NEVER"
        )
        for name in LLM_AGENTS
    ]
    planner, coder, reviewer = llm_agents
    executor = ConversableAgent(
        "executor",
        llm_config=False,
        human_input_mode="NEVER",
        code_execution_config={"executor": LocalCommandLineCodeExecutor(work_dir=work_dir, timeout=60)},
    )
    chat = GroupChat(
        [user, planner, coder, executor, reviewer],
        messages=[],
        max_round=len(AGENTS),
        speaker_selection_method="round_robin",
    )
    manager = GroupChatManager(
        chat, llm_config=False, is_termination_msg=lambda m: "TERMINATE" in (m.get("content") or "")
    )
    return user, manager


def final_answer(messages: Sequence[dict[str, Any]]) -> str | None:
    for message in reversed(messages):
        match = FINAL_ANSWER.search(str(message.get("content") or ""))
        if match:
            return match["answer"].strip().rstrip(".")
    return None


def run_tasks(
    tracer_provider: TracerProvider,
    tasks: Sequence[DemoTask] = TASKS,
    *,
    on_task: Callable[[DemoTask, TaskRunResult], None] | None = None,
    work_dir: Path | None = None,
) -> list[TaskRunResult]:
    """Run each task as one instrumented group chat; spans go to ``tracer_provider``'s processors.

    Instruments the ``autogen`` package for the duration and restores it afterwards.
    """
    from otel_blame.instrumentation import (
        OtelBlameInstrumentor,
        configure,
        reset_configuration,
        set_outcome,
        task,
    )

    script = ScenarioScript()
    results: list[TaskRunResult] = []
    instrumentor = OtelBlameInstrumentor()
    configure(tracer_provider=tracer_provider)
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        with ScriptedLLM(script) as llm, tempfile.TemporaryDirectory(prefix="otel-blame-demo-") as tmp:
            code_dir = Path(work_dir or tmp)
            for demo_task in tasks:
                script.use(demo_task)
                user, manager = build_group_chat(llm.base_url, code_dir)
                with task(
                    demo_task.name, input=demo_task.question, expected_output=demo_task.expected_answer
                ) as run:
                    result = user.initiate_chat(
                        manager, message=demo_task.question, summary_method="last_msg"
                    )
                    answer = final_answer(result.chat_history)
                    failed = answer != demo_task.expected_answer
                    reason = f"expected {demo_task.expected_answer}, got {answer}" if failed else None
                    set_outcome(not failed, final_output=answer, reason=reason)
                    trace_id = f"{run.trace_id:032x}" if run is not None else ""
                outcome = TaskRunResult(demo_task, trace_id, answer, failed)
                results.append(outcome)
                if on_task is not None:
                    on_task(demo_task, outcome)
    finally:
        instrumentor.uninstrument()
        reset_configuration()
    tracer_provider.force_flush()
    return results
