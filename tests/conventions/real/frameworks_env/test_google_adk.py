"""Google ADK under its own OpenTelemetry: a manager ``LlmAgent`` calling a researcher ``LlmAgent``
through an ``AgentTool``, the researcher's search tool raising; the model is ADK's ``LiteLlm`` on
the scripted OpenAI-compatible server. Runs in .venv-frameworks (``make test-frameworks``: ADK
cannot share .venv, constraints-frameworks.txt says why).

The shape: ``invoke_workflow manager`` > ``invoke_agent manager`` > ``generate_content {model}`` and
``execute_tool researcher`` > ``invoke_workflow researcher`` > ``invoke_agent researcher`` > its
``generate_content`` and ``execute_tool web_search``; every span carries ``gen_ai.agent.name``.
Content is recorded only when asked for: with ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``
and ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY`` it is in ``gen_ai.*.messages``
and ``gen_ai.tool.call.arguments``. ADK lets the tool's exception end the run: every span on the way
up has status ERROR, so the trace itself says the run failed.
"""

from __future__ import annotations

import asyncio

import pytest

from otel_blame import semconv as sc
from otel_blame.trajectory import Outcome
from tests.conventions.conftest import SERVICE, Capture, blame_through_processor
from tests.support import Reply, ScriptedLLM

from .. import story

pytest.importorskip("google.adk")
pytest.importorskip("litellm")

MANAGER = "manager"
RESEARCHER = "researcher"
MODEL = "openai/scripted-model"  # LiteLLM's provider prefix: an OpenAI-compatible server at api_base
CALL = f"generate_content {MODEL}"


@pytest.fixture
def instrumented(global_capture, monkeypatch) -> Capture:  # noqa: ANN001
    """ADK traces through the global provider."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv(sc.ENV_CAPTURE_MESSAGE_CONTENT, "SPAN_ONLY")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM would fetch its price list
    return global_capture


def script() -> list[Reply]:
    def call(number: int, name: str, **arguments: str) -> Reply:
        return Reply(tool_calls=[{"id": f"call_{number}", "name": name, "arguments": arguments}])

    return [call(1, RESEARCHER, request=story.TASK), call(2, "web_search", query=story.QUERY)]


async def run(base_url: str) -> None:
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.runners import InMemoryRunner
    from google.adk.tools.agent_tool import AgentTool
    from google.genai import types

    model = LiteLlm(model=MODEL, api_base=base_url, api_key="test-key")
    researcher = LlmAgent(
        name=RESEARCHER,
        model=model,
        description="Finds facts.",
        instruction="You find facts.",
        tools=[story.web_search],
    )
    manager = LlmAgent(
        name=MANAGER, model=model, instruction="You answer questions.", tools=[AgentTool(researcher)]
    )
    runner = InMemoryRunner(app=App(name="population", root_agent=manager))
    session = await runner.session_service.create_session(app_name="population", user_id="user")
    question = types.Content(role="user", parts=[types.Part(text=story.QUESTION)])
    async for _ in runner.run_async(user_id="user", session_id=session.id, new_message=question):
        pass


def test_manager_calling_a_researcher_agent_tool_whose_search_fails(
    instrumented, sink, make_processor
) -> None:  # noqa: ANN001
    with ScriptedLLM(script()) as llm, pytest.raises(ConnectionError, match=story.TOOL_ERROR):
        asyncio.run(run(llm.base_url))
    spans = instrumented.spans()
    built = instrumented.built()
    trajectory = built.trajectory

    # the workflow and agent spans group the steps; the manager's AgentTool call is its tool step
    story.assert_steps(
        trajectory,
        spans,
        [
            story.model(MANAGER, CALL, RESEARCHER, story.TASK),
            story.model(RESEARCHER, CALL, "web_search", story.QUERY),
            story.failed_search(RESEARCHER, "execute_tool web_search"),
            story.tool(MANAGER, f"execute_tool {RESEARCHER}", story.TOOL_ERROR, error=True),
        ],
    )
    story.assert_agents(built, MANAGER, RESEARCHER, SERVICE)
    search = story.the_span(spans, "execute_tool web_search")
    story.assert_failed_search(trajectory, search, RESEARCHER)
    assert trajectory.outcome == Outcome.FAILURE  # the root workflow span: status ERROR, exception event
    assert story.TOOL_ERROR in (trajectory.outcome_reason or "")

    # the failed search or the call asking for it (the run ended there)
    pointed_at = [search, story.model_call_asking_for(spans, "web_search")]
    story.assert_blamed_on(trajectory, RESEARCHER, pointed_at)

    culprit = blame_through_processor(make_processor(), sink, spans)
    story.assert_culprit_span(culprit, RESEARCHER, pointed_at)
