"""A plain classic-autogen app with no tracing code: run it under ``opentelemetry-instrument``.

Reads the scripted LLM's URL from ``SCRIPTED_LLM_URL`` and a scratch directory from
``APP_WORK_DIR``; prints the number of chat messages.
"""

import os

from autogen import ConversableAgent, GroupChat, GroupChatManager
from autogen.coding import LocalCommandLineCodeExecutor

config = {
    "config_list": [{"model": "scripted-model", "base_url": os.environ["SCRIPTED_LLM_URL"], "api_key": "k"}],
    "cache_seed": None,
}
planner = ConversableAgent("planner", llm_config=config, human_input_mode="NEVER")
coder = ConversableAgent("coder", llm_config=config, human_input_mode="NEVER")
executor = ConversableAgent(
    "executor",
    llm_config=False,
    human_input_mode="NEVER",
    code_execution_config={"executor": LocalCommandLineCodeExecutor(work_dir=os.environ["APP_WORK_DIR"])},
)
chat = GroupChat([planner, coder, executor], messages=[], max_round=4, speaker_selection_method="round_robin")
manager = GroupChatManager(chat, llm_config=False)
result = planner.initiate_chat(manager, message="Print 6*7 with Python.", silent=True)
print(f"MESSAGES={len(result.chat_history)}")
