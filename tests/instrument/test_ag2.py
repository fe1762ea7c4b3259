"""The ``ag2`` 1.x package through the instrumentor's middleware: real agents, real openai client."""

from __future__ import annotations

import asyncio
import json

import pytest
from opentelemetry.trace import StatusCode

from otel_blame import semconv
from otel_blame.instrumentation import task
from tests.instrument.failed_turns import assert_failed_turn_is_error_step
from tests.instrument.shapes import SHAPES, read_back
from tests.instrument.steps import step_kind
from tests.support import Reply, ScriptedLLM

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SCRIPT = [
    Reply(tool_calls=[{"id": "call_w", "name": "ask_worker", "arguments": {"question": "What is 6*7?"}}]),
    "42",
    "The worker says 42.",
]
EXPECTED = [
    ("user", "message", "Compute 6*7 with help."),
    ("lead", "message", ""),  # the tool call, no text
    ("worker", "message", "42"),
    ("lead", "tool", "42"),
    ("lead", "message", "The worker says 42."),
]


def _build(llm: ScriptedLLM, lead_middleware=(), worker_middleware=()):
    from ag2 import Agent, tool
    from ag2.config.openai.config import OpenAIConfig

    config = OpenAIConfig(model="scripted-model", api_key="test-key", base_url=llm.base_url)
    worker = Agent("worker", config=config, middleware=list(worker_middleware))

    @tool
    async def ask_worker(question: str) -> str:
        """Ask the worker agent a question."""
        reply = await worker.ask(question)
        return reply.body

    return Agent("lead", config=config, tools=[ask_worker], middleware=list(lead_middleware))


def _summary(steps):
    out = []
    for step in steps:
        message = json.loads(step.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]
        text = "".join(p.get("content", p.get("response", "")) for p in message["parts"])
        out.append((step.attributes[semconv.GEN_AI_AGENT_NAME], step_kind(step), text))
    return out


def test_agents_and_tools_make_ordered_steps_under_one_root(instrumented):
    spans = instrumented
    with ScriptedLLM(SCRIPT) as llm:
        lead = _build(llm)
        reply = asyncio.run(lead.ask("Compute 6*7 with help."))
    assert reply.body == "The worker says 42."
    steps = spans.steps()
    assert _summary(steps) == EXPECTED
    root = spans.root()
    assert root.name == "invoke_workflow lead"
    assert root.attributes[semconv.TASK_INPUT] == "Compute 6*7 with help."
    assert root.attributes[semconv.TASK_FINAL_OUTPUT] == "The worker says 42."
    assert root.attributes[semconv.INSTRUMENTATION_SOURCE] == "ag2"
    assert [s.attributes[semconv.STEP_INDEX] for s in steps] == list(range(5))
    # envelope spans: the worker's turn runs inside the lead's tool, so it nests under that tool span
    user, call, worker, tool, answer = steps
    assert tool.name == "execute_tool ask_worker" and worker.parent.span_id == tool.context.span_id
    assert all(s.parent.span_id == root.context.span_id for s in (user, call, tool, answer))
    assert tool.start_time < worker.start_time and worker.end_time <= tool.end_time
    call = json.loads(steps[1].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"]
    assert call == [
        {
            "type": "tool_call",
            "name": "ask_worker",
            "arguments": '{"question": "What is 6*7?"}',
            "id": "call_w",
        }
    ]
    assert steps[3].name == "execute_tool ask_worker"
    assert len(spans.all()) == 6


def test_inside_a_user_task_and_with_ag2_telemetry_on(instrumented):
    from ag2.middleware import TelemetryMiddleware

    spans = instrumented
    with ScriptedLLM(SCRIPT) as llm:
        telemetry = TelemetryMiddleware(tracer_provider=spans.provider)
        lead = _build(llm, [telemetry], [telemetry])

        async def main():
            async with task("delegation", input="Compute 6*7 with help."):
                return await lead.ask("Compute 6*7 with help.")

        asyncio.run(main())
    assert _summary(spans.steps()) == EXPECTED
    ag2_spans = [s for s in spans.all() if "ag2.span.type" in (s.attributes or {})]
    assert ag2_spans and all(semconv.STEP_INDEX not in s.attributes for s in ag2_spans)
    assert spans.root().name == "invoke_workflow delegation"
    assert len({s.context.trace_id for s in spans.all()}) == 1


def test_failing_tool_is_an_error_step_and_a_failing_model_fails_the_task(instrumented):
    from ag2 import Agent, tool
    from ag2.config.openai.config import OpenAIConfig

    spans = instrumented
    script = [Reply(tool_calls=[{"id": "c1", "name": "lookup", "arguments": {}}]), "could not look it up"]
    with ScriptedLLM(script) as llm:
        config = OpenAIConfig(model="scripted-model", api_key="k", base_url=llm.base_url)

        @tool
        def lookup() -> str:
            """Look something up."""
            raise ValueError("index offline")

        agent = Agent("searcher", config=config, tools=[lookup])
        asyncio.run(agent.ask("find it"))
    tool_step = spans.steps()[2]
    assert step_kind(tool_step) == "tool"
    assert tool_step.status.status_code is StatusCode.ERROR
    assert "index offline" in tool_step.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]

    spans.exporter.clear()
    with ScriptedLLM([Reply(status=400, content="bad request")]) as llm:
        config = OpenAIConfig(model="scripted-model", api_key="k", base_url=llm.base_url, max_retries=0)
        agent = Agent("fragile", config=config)
        with pytest.raises(Exception) as caught:
            asyncio.run(agent.ask("hello"))
    root = spans.root()
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes[semconv.ERROR_TYPE] == type(caught.value).__qualname__
    # the turn whose model call raised is the error step of its agent
    assert [s.attributes[semconv.GEN_AI_AGENT_NAME] for s in spans.steps()] == ["user", "fragile"]
    assert_failed_turn_is_error_step(spans, "fragile", type(caught.value).__qualname__)


def test_uninstrument_restores_the_originals(spans):
    from ag2.agent import Agent
    from ag2.task import Task

    from otel_blame.instrumentation import OtelBlameInstrumentor

    patched = [
        (Agent, "_drive_scope"),
        *((Task, name) for name in ("__aenter__", "__aexit__", "complete", "fail")),
    ]
    originals = [owner.__dict__[name] for owner, name in patched]
    instrumentor = OtelBlameInstrumentor()
    instrumentor.instrument()
    assert all(owner.__dict__[name] is not o for (owner, name), o in zip(patched, originals, strict=True))
    instrumentor.uninstrument()
    assert all(owner.__dict__[name] is o for (owner, name), o in zip(patched, originals, strict=True))


def test_an_ag2_task_is_the_root_and_its_lifecycle_the_outcome(instrumented):
    spans = instrumented
    with ScriptedLLM(SCRIPT) as llm:
        lead = _build(llm)

        async def main():
            async with lead.task("multiply", description="Compute 6*7 with help.") as ag2_task:
                reply = await lead.ask("Compute 6*7 with help.")
                await ag2_task.complete(reply.body)
            return ag2_task

        ag2_task = asyncio.run(main())
    root = spans.root()
    assert root.name == "invoke_workflow multiply"
    assert root.attributes[semconv.GEN_AI_CONVERSATION_ID] == ag2_task.task_id
    assert root.attributes[semconv.TASK_INPUT] == "Compute 6*7 with help."
    assert root.attributes[semconv.TASK_OUTCOME] == "success"
    assert root.attributes[semconv.TASK_FINAL_OUTPUT] == "The worker says 42."
    assert _summary(spans.steps()) == EXPECTED

    spans.exporter.clear()
    with ScriptedLLM(["partial"]) as llm:
        lead = _build(llm)
        error = LookupError("no data")

        async def failing():
            async with lead.task("lookup"):
                await lead.ask("find the data")
                raise error

        with pytest.raises(LookupError) as caught:
            asyncio.run(failing())
    assert caught.value is error
    root = spans.root()
    assert root.attributes[semconv.TASK_OUTCOME] == "failure"
    assert root.attributes[semconv.TASK_OUTCOME_REASON] == "LookupError: no data"
    assert root.status.status_code is StatusCode.ERROR
    assert [s.attributes[semconv.GEN_AI_AGENT_NAME] for s in spans.steps()] == ["user", "lead"]


# -- the message path -----------------------------------------------------------------------------


def test_the_message_path_changes_what_the_tool_and_the_next_model_call_get(instrumented):
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import Rewriter, sent_to_model

    spans = instrumented
    rewriter = Rewriter(
        ("tool_call", "lead", "6*7", "7*7"),
        ("message", "worker", "42", "41"),
    )
    with ScriptedLLM(SCRIPT) as llm, intercept_messages(rewriter):
        reply = asyncio.run(_build(llm).ask("Compute 6*7 with help."))
        assert "What is 7*7?" in sent_to_model(llm, 1)  # the worker was asked the changed question
        assert "41" in sent_to_model(llm, 2) and "42" not in sent_to_model(llm, 2)
    assert reply.body == "The worker says 42."  # scripted: the model's own last words
    assert rewriter.unused == []
    summary = _summary(spans.steps())
    assert summary[2] == ("worker", "message", "41") and summary[3] == ("lead", "tool", "41")
    call = json.loads(spans.steps()[1].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]
    assert json.loads(call["arguments"]) == {"question": "What is 7*7?"}
    assert {o.framework for o in rewriter.seen} == {"ag2"}


def test_a_changed_tool_result_reaches_the_model(instrumented):
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import Rewriter, sent_to_model

    rewriter = Rewriter(("tool", "lead", "42", "40"))
    with ScriptedLLM(SCRIPT) as llm, intercept_messages(rewriter):
        asyncio.run(_build(llm).ask("Compute 6*7 with help."))
        assert "40" in sent_to_model(llm, 2)
    assert _summary(instrumented.steps())[3] == ("lead", "tool", "40")


def test_an_interceptor_that_raises_changes_nothing(instrumented):
    from otel_blame.instrumentation._safety import HOOK_ERRORS
    from otel_blame.instrumentation.interception import intercept_messages
    from tests.instrument.interceptors import raising

    with ScriptedLLM(SCRIPT) as llm, intercept_messages(raising):
        reply = asyncio.run(_build(llm).ask("Compute 6*7 with help."))
    assert reply.body == "The worker says 42."
    assert _summary(instrumented.steps()) == EXPECTED
    assert set(HOOK_ERRORS.by_site()) == {"intercept"}


# -- both shapes of the GenAI conventions ----------------------------------------------------------

SHAPE_SCRIPT = [
    Reply(tool_calls=[{"id": "call_w", "name": "ask_worker", "arguments": {"question": "What is 6*7?"}}]),
    "42",
    Reply(tool_calls=[{"id": "call_l", "name": "lookup", "arguments": {}}]),
    "The worker says 42.",
]


@SHAPES
def test_both_convention_shapes_read_back_the_same(instrumented, latest):
    from ag2 import tool

    @tool
    def lookup() -> str:
        """Look something up."""
        raise ValueError("index offline")

    def run() -> None:
        with ScriptedLLM(SHAPE_SCRIPT) as llm:
            lead = _build(llm)
            lead.add_tool(lookup)
            asyncio.run(lead.ask("Compute 6*7 with help."))

    (read,) = read_back(instrumented, latest, run)
    assert read["task"] == ("lead", "lead", "Compute 6*7 with help.", None, "The worker says 42.")
    assert [step[:3] for step in read["steps"]] == [
        ("user", "user", "message"),
        ("lead", "assistant", "message"),
        ("worker", "assistant", "message"),
        ("lead", "tool", "tool"),
        ("lead", "assistant", "message"),
        ("lead", "tool", "tool"),
        ("lead", "assistant", "message"),
    ]
    assert [step[3] for step in read["steps"]][3] == "42" and "index offline" in read["steps"][5][3]
    assert [step[-1] for step in read["steps"]] == [False] * 5 + [True, False]
    assert [failure[:2] for failure in read["dependency_failures"]] == [("lookup", "tool_error")]
