"""A real classic-autogen group chat (planner, coder, code executor, reviewer) on a scripted LLM."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import ScriptedLLM

# The LLM is asked by coder, reviewer and planner (executor and manager have no LLM).
SCRIPT = [
    "```python\nprint(6 * 7)\n```",
    "The code printed 42, which answers the question.",
    "Final answer: 42. TERMINATE",
]
QUESTION = "What is 6 * 7? Compute it with Python."


def llm_config(llm: ScriptedLLM) -> dict[str, Any]:
    return {
        "config_list": [{"model": "scripted-model", "base_url": llm.base_url, "api_key": "test-key"}],
        "cache_seed": None,
    }


@dataclass
class GroupChatSetup:
    planner: Any
    coder: Any
    executor: Any
    reviewer: Any
    manager: Any

    @property
    def members(self) -> list[Any]:
        return [self.planner, self.coder, self.executor, self.reviewer]


def build_group_chat(llm: ScriptedLLM, work_dir: Path, max_round: int = 6) -> GroupChatSetup:
    from autogen import ConversableAgent, GroupChat, GroupChatManager
    from autogen.coding import LocalCommandLineCodeExecutor

    config = llm_config(llm)
    planner = ConversableAgent("planner", llm_config=config, human_input_mode="NEVER")
    coder = ConversableAgent(
        "coder", llm_config=config, human_input_mode="NEVER", description="Writes Python code."
    )
    executor = ConversableAgent(
        "executor",
        llm_config=False,
        human_input_mode="NEVER",
        code_execution_config={"executor": LocalCommandLineCodeExecutor(work_dir=work_dir, timeout=60)},
    )
    reviewer = ConversableAgent("reviewer", llm_config=config, human_input_mode="NEVER")
    chat = GroupChat(
        [planner, coder, executor, reviewer],
        messages=[],
        max_round=max_round,
        speaker_selection_method="round_robin",
    )
    manager = GroupChatManager(
        chat, llm_config=False, is_termination_msg=lambda m: "TERMINATE" in (m.get("content") or "")
    )
    return GroupChatSetup(planner, coder, executor, reviewer, manager)
