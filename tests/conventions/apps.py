"""Small multi-agent apps on real frameworks, asking the scripted LLM through the real openai client.

Every app runs the same story: a planner plans, a researcher makes a number up instead of looking
it up, a writer answers with it. The researcher's step is the one to blame.
"""

from __future__ import annotations

from typing import Any

QUESTION = "How many people live in Paris?"
PLAN = "Plan: the researcher finds how many people live in Paris, the writer answers."
FABRICATED = "I cannot look it up, so let's assume Paris has 1 million inhabitants."
ANSWER = "Answer: about 1 million people."
SCRIPT = [PLAN, FABRICATED, ANSWER]
AGENTS = ("planner", "researcher", "writer")
PROMPTS = {
    "planner": "You are Planner. You split the question into work for the others.",
    "researcher": "You are Researcher. You find facts with sources.",
    "writer": "You are Writer. You answer in one sentence.",
}


class WrongAnswer(RuntimeError):
    """The app's own check of the final answer: the run failed."""


def check(answer: str) -> None:
    if "2.1 million" not in answer:
        raise WrongAnswer(f"expected about 2.1 million, got {answer!r}")


def ask(client: Any, agent: str, history: list[dict[str, str]]) -> str:
    """One agent's LLM call: its system prompt, then the conversation so far."""
    messages = [{"role": "system", "content": PROMPTS[agent]}, *history]
    reply = client.chat.completions.create(model="scripted-model", messages=messages)
    return reply.choices[0].message.content or ""


def langgraph_app(base_url: str) -> Any:
    """planner -> researcher -> writer -> check, one node per agent (the node name is the agent)."""
    import openai
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0)

    def node(agent: str):
        def run(state: MessagesState) -> dict[str, Any]:
            history = [{"role": "user", "content": str(m.content)} for m in state["messages"]]
            return {"messages": [AIMessage(ask(client, agent, history), name=agent)]}

        return run

    def verify(state: MessagesState) -> dict[str, Any]:
        check(str(state["messages"][-1].content))
        return {}

    graph = StateGraph(MessagesState)
    for agent in AGENTS:
        graph.add_node(agent, node(agent))
    graph.add_node("check", verify)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "researcher")
    graph.add_edge("researcher", "writer")
    graph.add_edge("writer", "check")
    graph.add_edge("check", END)
    return graph.compile(name="population_graph")


def langchain_langgraph_app(base_url: str, with_check: bool = True) -> Any:
    """The same graph with LangChain's ChatOpenAI in each node, as most LangGraph apps are written;
    without the check node the run ends normally (its failure is then told by a late verdict)."""
    from langchain_core.messages import AIMessage, SystemMessage
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph

    model = ChatOpenAI(model="scripted-model", base_url=base_url, api_key="test-key", max_retries=0)

    def node(agent: str):
        def run(state: MessagesState) -> dict[str, Any]:
            reply = model.invoke([SystemMessage(PROMPTS[agent]), *state["messages"]])
            return {"messages": [AIMessage(str(reply.content), name=agent)]}

        return run

    def verify(state: MessagesState) -> dict[str, Any]:
        check(str(state["messages"][-1].content))
        return {}

    graph = StateGraph(MessagesState)
    for agent in AGENTS:
        graph.add_node(agent, node(agent))
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "researcher")
    graph.add_edge("researcher", "writer")
    if with_check:
        graph.add_node("check", verify)
        graph.add_edge("writer", "check")
        graph.add_edge("check", END)
    else:
        graph.add_edge("writer", END)
    return graph.compile(name="population_graph")


def langgraph_input() -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    return {"messages": [HumanMessage(QUESTION)]}


def plain_app(
    base_url: str, tracer: Any, prompts: dict[str, str] | None = None, span_name: str = "answer_question"
) -> None:
    """No framework: one span of the plain OpenTelemetry API around the run (named ``span_name``), three
    LLM calls whose only sign of the agent is its system prompt. Raises :class:`WrongAnswer` (recorded
    on the span)."""
    import openai

    prompts = prompts or PROMPTS
    client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0)
    with tracer.start_as_current_span(span_name):
        history = [{"role": "user", "content": QUESTION}]
        for agent in AGENTS:
            messages = [{"role": "system", "content": prompts[agent]}, *history]
            reply = client.chat.completions.create(model="scripted-model", messages=messages)
            history.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
        check(history[-1]["content"])


def openai_agents_team(base_url: str) -> Any:
    """The OpenAI Agents SDK: the planner hands off to the researcher, who hands off to the writer."""
    import agents
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="test-key", max_retries=0)
    model = agents.OpenAIChatCompletionsModel(model="scripted-model", openai_client=client)
    writer = agents.Agent(name="writer", instructions=PROMPTS["writer"], model=model)
    researcher = agents.Agent(
        name="researcher", instructions=PROMPTS["researcher"], model=model, handoffs=[writer]
    )
    return agents.Agent(name="planner", instructions=PROMPTS["planner"], model=model, handoffs=[researcher])


def handoff_script() -> list[Any]:
    """The story for :func:`openai_agents_team`: each agent says its part and hands off."""
    from tests.support import Reply

    def to(name: str, text: str, call_id: str) -> Reply:
        return Reply(
            content=text, tool_calls=[{"id": call_id, "name": f"transfer_to_{name}", "arguments": {}}]
        )

    return [to("researcher", PLAN, "call_1"), to("writer", FABRICATED, "call_2"), ANSWER]


def smolagents_team(base_url: str) -> Any:
    """smolagents: the planner manages the researcher and the writer (each a tool-calling agent)."""
    import smolagents

    model = smolagents.OpenAIServerModel(model_id="scripted-model", api_base=base_url, api_key="test-key")

    def worker(name: str, description: str) -> Any:
        return smolagents.ToolCallingAgent(
            tools=[], model=model, name=name, description=description, max_steps=2, verbosity_level=0
        )

    return smolagents.ToolCallingAgent(
        tools=[],
        model=model,
        managed_agents=[worker("researcher", "Finds facts."), worker("writer", "Writes the answer.")],
        name="planner",
        max_steps=4,
        verbosity_level=0,
    )


def smolagents_script() -> list[Any]:
    """The story for :func:`smolagents_team`: every move is a tool call (managed agents are tools)."""
    from tests.support import Reply

    def call(name: str, arguments: dict[str, str], number: int) -> Reply:
        return Reply(tool_calls=[{"id": f"call_{number}", "name": name, "arguments": arguments}])

    return [
        call("researcher", {"task": "Find the population of Paris."}, 1),
        call("final_answer", {"answer": FABRICATED}, 2),
        call("writer", {"task": "Answer with the researcher's number."}, 3),
        call("final_answer", {"answer": ANSWER}, 4),
        call("final_answer", {"answer": ANSWER}, 5),
    ]
