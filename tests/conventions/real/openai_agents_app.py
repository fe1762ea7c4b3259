"""The story on the OpenAI Agents SDK, for the instrumentors that read it: a manager agent using a
researcher agent as a tool (``researcher.as_tool()``), the researcher's ``web_search`` raising; the
SDK's default model (the Responses API) on the scripted server.

The SDK keeps a tool's exception out of its trace (``Tool execution failed. Error details are
redacted.``) unless the tool has a ``failure_error_function`` of its own, whose text goes to the model
and into the trace: the app here gives ``web_search`` one, as an app that wants its failures
attributed must.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tests.support import Reply

from . import story

MANAGER = "manager"
RESEARCHER = "researcher"
ASK = "ask_researcher"


def script() -> list[Reply | str]:
    def call(number: int, name: str, **arguments: str) -> Reply:
        return Reply(tool_calls=[{"id": f"call_{number}", "name": name, "arguments": arguments}])

    return [
        call(1, ASK, input=story.TASK),
        call(2, "web_search", query=story.QUERY),
        story.FABRICATED,
        story.ANSWER,
    ]


def tool_error(context, error: Exception) -> str:  # noqa: ANN001
    """What the model (and the trace) is told when ``web_search`` raises."""
    return f"web_search failed: {error}"


async def run(base_url: str) -> str:
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=base_url, api_key="test-key", max_retries=0) as client:
        model = OpenAIResponsesModel(model="scripted-model", openai_client=client)
        researcher = Agent(
            name=RESEARCHER,
            instructions="You find facts.",
            model=model,
            tools=[function_tool(story.web_search, failure_error_function=tool_error)],
        )
        manager = Agent(
            name=MANAGER,
            instructions="You answer questions.",
            model=model,
            tools=[researcher.as_tool(tool_name=ASK, tool_description="Ask the researcher to find a fact.")],
        )
        return str((await Runner.run(manager, story.QUESTION)).final_output)


@contextmanager
def only_these_trace_processors() -> Iterator[None]:
    """The SDK's trace processors as they were, once the test is done: its own exporter to OpenAI is
    left out while an instrumentor runs (there is no OpenAI to send to), and an instrumentor whose
    uninstrument leaves its processor registered is taken out."""
    from agents import set_trace_processors
    from agents.tracing import get_trace_provider

    before = list(get_trace_provider()._multi_processor._processors)  # the SDK has no public getter
    set_trace_processors([])
    try:
        yield
    finally:
        set_trace_processors(before)
