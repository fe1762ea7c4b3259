"""AG2's own tracing (``autogen.opentelemetry``) alone, on a real chat, becomes a sensible Trajectory."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_blame.conventions import sdk_spans_to_proto, trajectory_from_spans
from otel_blame.trajectory import StepKind
from tests.support import ScriptedLLM

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

QUESTION = "What is 6 * 7? Compute it with Python."


def test_ag2_spans_without_our_instrumentation(tmp_path: Path) -> None:
    from autogen import ConversableAgent
    from autogen.coding import LocalCommandLineCodeExecutor
    from autogen.opentelemetry import instrument_agent

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with ScriptedLLM(["```python\nprint(6 * 7)\n```", "It printed 42. TERMINATE"]) as llm:
        config = {
            "config_list": [{"model": "m", "base_url": llm.base_url, "api_key": "k"}],
            "cache_seed": None,
        }
        coder = ConversableAgent("coder", llm_config=config, human_input_mode="NEVER")
        executor = ConversableAgent(
            "executor",
            llm_config=False,
            human_input_mode="NEVER",
            code_execution_config={"executor": LocalCommandLineCodeExecutor(work_dir=tmp_path, timeout=60)},
        )
        for agent in (coder, executor):
            instrument_agent(agent, tracer_provider=provider)
        result = executor.initiate_chat(coder, message=QUESTION, max_turns=2, silent=True)
    history = result.chat_history
    trajectory = trajectory_from_spans(sdk_spans_to_proto(memory.get_finished_spans()))
    assert trajectory.task.input == QUESTION  # the opening message is the task, not a step
    # one step per reply; the code execution inside the executor's reply is not counted twice
    assert [step.agent for step in trajectory.steps] == [m["name"] for m in history[1:]]
    assert all(step.kind == StepKind.MESSAGE for step in trajectory.steps)
    assert "42" in trajectory.steps[1].content
