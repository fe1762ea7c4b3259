"""Self-healing with otel-blame: when an AG2 group chat answers wrong, ask which agent broke the run
and retry with a corrected instruction to that agent.

Run it against any OpenAI-compatible endpoint (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
``MODEL``)::

    python docs/examples/self_healing_ag2.py

``tests/inject/test_self_healing.py`` runs :func:`solve` for real on the scripted offline LLM.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autogen import ConversableAgent, GroupChat, GroupChatManager
from autogen.coding import LocalCommandLineCodeExecutor

from otel_blame.instrumentation import OtelBlameInstrumentor, attribute_current_task, set_outcome, task

ROLES = {
    "planner": "You are planner. Break the task into numbered 'name = expression' steps for the coder.",
    "coder": "You are coder. Write one Python code block that implements the plan and prints the result.",
    "reviewer": "You are reviewer. Check the executor's output and give 'Final answer: ...' then TERMINATE.",
}
FINAL_ANSWER = re.compile(r"Final answer:\s*(?P<answer>[^\n]+?)\s*(?:TERMINATE|$)")


@dataclass
class Attempt:
    answer: str | None
    right: bool
    blamed_agent: str | None = None
    blamed_step: int | None = None
    reason: str | None = None
    trace_id: str | None = None


@dataclass
class Outcome:
    answer: str | None
    attempts: list[Attempt] = field(default_factory=list)
    corrections: dict[str, str] = field(default_factory=dict)


def build_chat(llm_config: dict[str, Any], work_dir: Path, corrections: dict[str, str]) -> tuple[Any, Any]:
    """The group chat; an agent with a correction gets it appended to its instructions."""
    user = ConversableAgent("user", llm_config=False, human_input_mode="NEVER", default_auto_reply="")
    agents = {
        name: ConversableAgent(
            name,
            system_message=f"{ROLES[name]}\n{corrections[name]}" if name in corrections else ROLES[name],
            llm_config=llm_config,
            human_input_mode="NEVER",
        )
        for name in ROLES
    }
    executor = ConversableAgent(
        "executor",
        llm_config=False,
        human_input_mode="NEVER",
        code_execution_config={"executor": LocalCommandLineCodeExecutor(work_dir=work_dir, timeout=60)},
    )
    chat = GroupChat(
        [user, agents["planner"], agents["coder"], executor, agents["reviewer"]],
        messages=[],
        max_round=5,
        speaker_selection_method="round_robin",
    )
    manager = GroupChatManager(
        chat, llm_config=False, is_termination_msg=lambda m: "TERMINATE" in (m.get("content") or "")
    )
    return user, manager


def final_answer(messages: list[dict[str, Any]]) -> str | None:
    for message in reversed(messages):
        match = FINAL_ANSWER.search(str(message.get("content") or ""))
        if match:
            return match["answer"].strip().rstrip(".")
    return None


def solve(
    question: str, expected: str, llm_config: dict[str, Any], work_dir: Path, max_attempts: int = 2
) -> Outcome:
    """Ask the chat; on a wrong answer, blame the run in-process and retry with a correction."""
    outcome = Outcome(answer=None)
    for _ in range(max_attempts):
        user, manager = build_chat(llm_config, work_dir, outcome.corrections)
        with task("self-healing", input=question, expected_output=expected) as run:
            result = user.initiate_chat(manager, message=question, summary_method="last_msg")
            answer = final_answer(result.chat_history)
            attempt = Attempt(answer, answer == expected, trace_id=run.trace_id_hex if run else None)
            outcome.attempts.append(attempt)
            if attempt.right:
                set_outcome(True, final_output=answer)
                outcome.answer = answer
                return outcome
            blame = attribute_current_task()  # which agent, which step, why: from this run's own steps
            set_outcome(False, final_output=answer, reason=f"expected {expected}, got {answer}")
        if blame is None:
            break
        attempt.blamed_agent, attempt.blamed_step, attempt.reason = blame.agent, blame.step, blame.reason
        if blame.agent not in ROLES:  # the task itself or a tool was blamed: nothing to instruct
            break
        outcome.corrections[blame.agent] = (
            f"Correction: your message at step {blame.step} was blamed for a wrong final answer "
            f"({blame.reason}) Re-check every number and constant against the task before answering."
        )
    outcome.answer = outcome.attempts[-1].answer if outcome.attempts else None
    return outcome


if __name__ == "__main__":
    OtelBlameInstrumentor().instrument()
    config = {
        "config_list": [
            {
                "model": os.environ.get("MODEL", "gpt-4o-mini"),
                "base_url": os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
                "api_key": os.environ["OPENAI_API_KEY"],
            }
        ],
        "cache_seed": None,
    }
    with tempfile.TemporaryDirectory() as tmp:
        result = solve(
            "A runner covers 5 miles. How many kilometres is that, rounded to two decimals?",
            "8.05",
            config,
            Path(tmp),
        )
    for number, attempt in enumerate(result.attempts, 1):
        print(f"attempt {number}: {attempt.answer} ({'right' if attempt.right else 'wrong'})", end="")
        print(
            f"; blamed {attempt.blamed_agent} at step {attempt.blamed_step}" if attempt.blamed_agent else ""
        )
