"""LlamaIndex: a multi-agent ``AgentWorkflow`` in which a manager ``FunctionAgent`` hands off to a
researcher, whose search tool raises; the model is ``OpenAILike`` on the scripted server. Read under
OpenInference (``openinference-instrumentation-llama-index``) and under OpenLLMetry
(``opentelemetry-instrumentation-llamaindex``). Runs in .venv-frameworks (``make test-frameworks``:
``llama-index-llms-openai`` needs ``openai<3``; .venv has openai 3).

Neither gives an agent a span: the workflow is a flat run of steps (``setup_agent``,
``run_agent_step``, ``parse_agent_output``, ``call_tool``, ...), and the agent a step works for is named
only in the events the steps take and return (``current_agent_name``). The hand-off is the manager's
``handoff`` tool call. LlamaIndex hands the tool's error to the model, so the run ends normally: its
failure is a late verdict.

- OpenInference: CHAIN spans per step (events as Python reprs in ``input.value``/``output.value``), the
  model call an LLM span ``OpenAILike.astream_chat`` with ``llm.output_messages.*``, inside another
  ``astream_chat`` and beside ``_prepare_chat_with_tools`` (LLM spans that record no call), tools as
  ``FunctionTool.acall`` TOOL spans (the failed one with status ERROR and its exception), every span OK.
- OpenLLMetry: ``traceloop.span.kind`` task spans per step (events as JSON in ``traceloop.entity.*``), the
  model call a ``chat`` span ``OpenAILike.task`` whose output drops the tool calls it asked for, the
  ``call_tool`` step a task span with ``tool.name`` and ``tool.arguments`` whose ``ToolCallResult`` says
  ``is_error``; no status anywhere.
"""

from __future__ import annotations

import asyncio

import pytest

from otel_blame.trajectory import Outcome
from tests.conventions.conftest import SERVICE, send_then_verdict
from tests.support import Reply, ScriptedLLM

from .. import story

pytest.importorskip("llama_index.core")
pytest.importorskip("llama_index.llms.openai_like")

# Pydantic's deprecations that llama-index-workflows 2.26.1 (inspect.getmembers on an agent) and
# openinference-instrumentation-llama-index 4.6.1 (``metadata.json()``) set off, not this project's code
pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]

MANAGER = "manager"
RESEARCHER = "researcher"
HANDOFF = "handoff"  # the tool AgentWorkflow gives an agent that can hand off


@pytest.fixture
def openinference(capture):  # noqa: ANN001, ANN201
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    instrumentor = LlamaIndexInstrumentor()
    instrumentor.instrument(tracer_provider=capture.provider)
    yield capture
    instrumentor.uninstrument()


@pytest.fixture
def openllmetry(capture, monkeypatch):  # noqa: ANN001, ANN201
    from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor

    monkeypatch.setenv("TRACELOOP_TRACE_CONTENT", "true")
    instrumentor = LlamaIndexInstrumentor()
    instrumentor.instrument(tracer_provider=capture.provider)
    yield capture
    instrumentor.uninstrument()


def script() -> list[Reply | str]:
    def call(number: int, name: str, **arguments: str) -> Reply:
        return Reply(tool_calls=[{"id": f"call_{number}", "name": name, "arguments": arguments}])

    return [
        call(1, HANDOFF, to_agent=RESEARCHER, reason=story.TASK),
        call(2, "web_search", query=story.QUERY),
        story.FABRICATED,
    ]


async def run(base_url: str) -> str:
    from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(
        model="scripted-model",
        api_base=base_url,
        api_key="test-key",
        is_chat_model=True,
        is_function_calling_model=True,
        context_window=8192,
        max_retries=0,
    )
    researcher = FunctionAgent(
        name=RESEARCHER,
        description="Finds facts.",
        system_prompt="You find facts.",
        tools=[story.web_search],
        llm=llm,
    )
    manager = FunctionAgent(
        name=MANAGER,
        description="Answers questions.",
        system_prompt="You answer questions.",
        llm=llm,
        can_handoff_to=[RESEARCHER],
    )
    workflow = AgentWorkflow(agents=[manager, researcher], root_agent=MANAGER)
    return str(await workflow.run(user_msg=story.QUESTION))


def test_openinference_a_manager_handing_off_to_a_researcher_whose_search_fails(
    openinference, sink, make_processor
) -> None:  # noqa: ANN001
    with ScriptedLLM(script()) as llm:
        assert asyncio.run(run(llm.base_url)) == story.FABRICATED
    spans = openinference.spans()
    built = openinference.built()
    trajectory = built.trajectory

    # one step per model call (the inner astream_chat, which records it), one per tool call; each of
    # the agent its workflow step names; the hand-off is the manager's tool step
    call = "OpenAILike.astream_chat"
    story.assert_steps(
        trajectory,
        spans,
        [
            story.model(MANAGER, call, f"tool_call {HANDOFF}(", RESEARCHER, story.TASK),
            story.tool(MANAGER, "FunctionTool.acall", "now handling the request", arguments=RESEARCHER),
            story.model(RESEARCHER, call, "tool_call web_search(", story.QUERY),
            story.failed_search(RESEARCHER, "FunctionTool.acall"),
            story.model(RESEARCHER, call, story.FABRICATED),
        ],
    )
    story.assert_agents(built, MANAGER, RESEARCHER, SERVICE)
    search = story.the_span(spans, "FunctionTool.acall", **{"tool.name": "web_search"})
    story.assert_failed_search(trajectory, search, RESEARCHER)
    # every span has status OK, the root too: over a failed tool call that says only that the run went on
    assert trajectory.outcome == Outcome.UNKNOWN

    pointed_at = [
        search,
        story.model_call_asking_for(spans, "web_search"),
        story.model_call_saying(spans, story.FABRICATED),
    ]
    story.assert_blamed_on(trajectory, RESEARCHER, pointed_at)

    answer = send_then_verdict(make_processor(), sink, spans)
    story.assert_late_verdict(answer, trajectory, RESEARCHER, pointed_at)


def test_openllmetry_a_manager_handing_off_to_a_researcher_whose_search_fails(
    openllmetry, sink, make_processor
) -> None:  # noqa: ANN001
    with ScriptedLLM(script()) as llm:
        assert asyncio.run(run(llm.base_url)) == story.FABRICATED
    spans = openllmetry.spans()
    built = openllmetry.built()
    trajectory = built.trajectory

    # the model calls that asked for tools say nothing (OpenLLMetry records no tool calls in their
    # output); the call_tool steps are the tool steps, the failed one by its ToolCallResult
    call, step = "OpenAILike.task", "AgentWorkflow.task"
    story.assert_steps(
        trajectory,
        spans,
        [
            story.model(MANAGER, call),
            story.tool(MANAGER, step, "now handling the request", arguments=RESEARCHER),
            story.model(RESEARCHER, call),
            story.tool(RESEARCHER, step, story.TOOL_ERROR, error=True, arguments=story.QUERY),
            story.model(RESEARCHER, call, story.FABRICATED),
        ],
    )
    story.assert_agents(built, MANAGER, RESEARCHER, SERVICE)
    search = story.the_span(spans, step, **{"tool.name": "web_search"})
    story.assert_failed_search(trajectory, search, RESEARCHER)
    assert trajectory.outcome == Outcome.UNKNOWN  # no span has a status

    # the failed search, or the researcher's call that made the number up (the call that asked for
    # the search records nothing of it)
    pointed_at = [search, story.model_call_saying(spans, story.FABRICATED)]
    story.assert_blamed_on(trajectory, RESEARCHER, pointed_at)

    answer = send_then_verdict(make_processor(), sink, spans)
    story.assert_late_verdict(answer, trajectory, RESEARCHER, pointed_at)
