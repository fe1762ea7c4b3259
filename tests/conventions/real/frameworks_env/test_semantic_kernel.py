"""Semantic Kernel under its own OpenTelemetry: a manager ``ChatCompletionAgent`` with a researcher
``ChatCompletionAgent`` as its plugin, the researcher's search function raising; the model is
``OpenAIChatCompletion`` on the scripted server. Runs in .venv-frameworks (``make test-frameworks``:
``semantic-kernel`` needs ``pydantic<2.14`` and ``mcp<2``; .venv has pydantic 2.14 and mcp 2.3).

The shape: ``invoke_agent manager`` > ``AutoFunctionInvocationLoop`` > ``chat scripted-model`` and
``execute_tool researcher-researcher`` > ``invoke_agent researcher`` > ... ``execute_tool
search-web_search`` (status ERROR, ``error.type``, ``exception`` events). Agent spans carry
``gen_ai.agent.name``; a function is named ``{plugin}-{function}`` (an agent as a plugin is
``{agent}-{agent}``). Semantic Kernel traces through the global provider, and only with
``SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS`` (``..._SENSITIVE`` for content). A model
call's content is never on its span: it is logged, through Python's ``logging``, as GenAI events
(``gen_ai.choice`` the answer; ``gen_ai.user/assistant/tool.message`` the history sent), so the app must
bridge the ``semantic_kernel`` logger to OpenTelemetry logs (``LoggingHandler``) and send them with its
spans. Semantic Kernel hands the function's error to the model, so the run ends normally: its failure
is a late verdict.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from otel_blame.conventions import build_trajectory, sdk_logs_to_proto, sdk_spans_to_proto
from otel_blame.trajectory import Outcome
from tests.conventions.conftest import SERVICE, send_then_verdict
from tests.support import Reply, ScriptedLLM

from .. import story

pytest.importorskip("semantic_kernel")
pytest.importorskip("opentelemetry.instrumentation.logging.handler")

# Pydantic's deprecations that semantic-kernel 1.45.0 sets off (inspect.getmembers on an agent it makes a
# plugin of), not this project's code
pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]

MANAGER = "manager"
RESEARCHER = "researcher"
ASK = f"{RESEARCHER}-{RESEARCHER}"  # an agent as a plugin: {plugin}-{function}, both the agent's name
SEARCH = "search-web_search"
CHAT = "chat scripted-model"


@pytest.fixture
def instrumented(global_capture, monkeypatch):  # noqa: ANN001, ANN201
    """Diagnostics with content on (the settings are read once, at import, into each module), and the
    ``semantic_kernel`` logger bridged to OpenTelemetry logs; the log records as ``.records``."""
    from opentelemetry.instrumentation.logging.handler import LoggingHandler
    from semantic_kernel.utils.telemetry.agent_diagnostics import decorators as agent_diagnostics
    from semantic_kernel.utils.telemetry.model_diagnostics import decorators as model_diagnostics
    from semantic_kernel.utils.telemetry.model_diagnostics import function_tracer

    for module in (agent_diagnostics, model_diagnostics, function_tracer):
        monkeypatch.setattr(module.MODEL_DIAGNOSTICS_SETTINGS, "enable_otel_diagnostics_sensitive", True)
    records = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(records))
    handler = LoggingHandler(level=logging.INFO, logger_provider=provider)
    logger = logging.getLogger("semantic_kernel")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    global_capture.records = records
    yield global_capture
    logger.removeHandler(handler)
    logger.setLevel(level)
    provider.shutdown()


def script() -> list[Reply | str]:
    def call(number: int, name: str, **arguments: str) -> Reply:
        return Reply(tool_calls=[{"id": f"call_{number}", "name": name, "arguments": arguments}])

    return [
        call(1, ASK, messages=story.TASK),
        call(2, SEARCH, query=story.QUERY),
        story.FABRICATED,
        story.ANSWER,
    ]


async def run(base_url: str) -> str:
    from openai import AsyncOpenAI
    from semantic_kernel.agents import ChatCompletionAgent
    from semantic_kernel.connectors.ai.open_ai import OpenAIChatCompletion
    from semantic_kernel.functions import KernelPlugin, kernel_function

    async with AsyncOpenAI(base_url=base_url, api_key="test-key", max_retries=0) as client:
        service = OpenAIChatCompletion(ai_model_id="scripted-model", async_client=client)
        search = KernelPlugin(name="search", functions=[kernel_function(story.web_search, name="web_search")])
        researcher = ChatCompletionAgent(
            service=service,
            name=RESEARCHER,
            description="Finds facts.",
            instructions="You find facts.",
            plugins=[search],
        )
        manager = ChatCompletionAgent(
            service=service, name=MANAGER, instructions="You answer questions.", plugins=[researcher]
        )
        return str((await manager.get_response(messages=story.QUESTION)).content)


def test_manager_with_a_researcher_agent_as_its_plugin_whose_search_fails(
    instrumented, sink, make_processor
) -> None:  # noqa: ANN001
    with ScriptedLLM(script()) as llm:
        assert asyncio.run(run(llm.base_url)) == story.ANSWER
    spans = instrumented.spans()
    records = list(instrumented.records.get_finished_logs())
    built = build_trajectory(sdk_spans_to_proto(spans), sdk_logs_to_proto(records))
    trajectory = built.trajectory

    # each chat call a step of its agent, its answer from its gen_ai.choice log record (not the history
    # it was sent); the manager's call to its researcher plugin is its tool step
    story.assert_steps(
        trajectory,
        spans,
        [
            story.model(MANAGER, CHAT, f"tool_call {ASK}(", story.TASK),
            story.model(RESEARCHER, CHAT, f"tool_call {SEARCH}(", story.QUERY),
            story.failed_search(RESEARCHER, f"execute_tool {SEARCH}"),
            story.model(RESEARCHER, CHAT, story.FABRICATED),
            story.tool(MANAGER, f"execute_tool {ASK}", story.FABRICATED, arguments=story.TASK),
            story.model(MANAGER, CHAT, story.ANSWER),
        ],
    )
    assert [step.content for step in trajectory.steps if step.kind == "message"][2:] == [
        story.FABRICATED,
        story.ANSWER,
    ]
    story.assert_agents(built, MANAGER, RESEARCHER, SERVICE)
    search = story.the_span(spans, f"execute_tool {SEARCH}")
    story.assert_failed_search(trajectory, search, RESEARCHER, tool_name=SEARCH)
    assert trajectory.outcome != Outcome.FAILURE  # the manager's run ended normally

    # the failed search, or the researcher's calls: the one asking for it, the one making the number up
    # (their content is in log records, not on the spans story's helpers read)
    researcher_calls = [
        s for s in spans if s.name == CHAT and story.span_id(s) in {t.span_id for t in trajectory.steps[1:4]}
    ]
    assert len(researcher_calls) == 2
    pointed_at = [search, *researcher_calls]
    story.assert_blamed_on(trajectory, RESEARCHER, pointed_at)

    answer = send_then_verdict(make_processor(), sink, spans, logs=records)
    story.assert_late_verdict(answer, trajectory, RESEARCHER, pointed_at)
