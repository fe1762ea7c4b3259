"""OpenLLMetry (Traceloop's instrumentation packages) alone on a real LangGraph run: the graph is
one workflow-wide agent span, each node a task span, each model call a GenAI chat span. The steps
are the model calls, named by the LangGraph node OpenLLMetry copies into association properties."""

from __future__ import annotations

import pytest

from otel_blame import semconv as sc
from otel_blame.trajectory import Outcome
from tests.support import ScriptedLLM

from . import apps
from .conftest import blame_through_processor

pytest.importorskip("opentelemetry.instrumentation.langchain")


def _restore_what_uninstrument_leaves(monkeypatch: pytest.MonkeyPatch, packages: tuple[str, ...]) -> list:
    """OpenLLMetry 0.62.4's uninstrument leaves ``Pregel.stream``/``astream`` and
    ``BaseCallbackManager.__init__`` wrapped, which breaks later tests' LangGraph instrumentation:
    note the original of every attribute its ``wrap_function_wrapper`` calls replace."""
    import importlib
    import sys

    import wrapt

    originals: list = []

    def noting(module, name, wrapper):  # noqa: ANN001, ANN202
        owner = importlib.import_module(module) if isinstance(module, str) else module
        path = name.split(".")
        for part in path[:-1]:
            owner = getattr(owner, part)
        originals.append((owner, path[-1], owner.__dict__.get(path[-1]) if isinstance(owner, type) else None))
        return wrapt.wrap_function_wrapper(module, name, wrapper)

    for module_name, module in list(sys.modules.items()):
        if module_name.startswith(packages) and getattr(module, "wrap_function_wrapper", None) is not None:
            monkeypatch.setattr(module, "wrap_function_wrapper", noting)
    return originals


@pytest.fixture
def openllmetry(capture, monkeypatch):  # noqa: ANN001, ANN201
    """OpenLLMetry's LangChain instrumentation (its OpenAI one would see the same calls: the LangChain
    one suppresses it inside model calls)."""
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    monkeypatch.setenv("TRACELOOP_TRACE_CONTENT", "true")
    originals = _restore_what_uninstrument_leaves(
        monkeypatch, ("opentelemetry.instrumentation.langchain", "opentelemetry.instrumentation.openai")
    )
    instrumentors = [LangchainInstrumentor()]
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=capture.provider)
    yield capture
    for instrumentor in instrumentors:
        instrumentor.uninstrument()
    for owner, name, original in reversed(originals):
        if original is not None and owner.__dict__.get(name) is not original:
            setattr(owner, name, original)


def test_langgraph_under_openllmetry_names_the_nodes_and_blames_the_researcher(
    openllmetry,
    sink,
    make_processor,  # noqa: ANN001
) -> None:
    with ScriptedLLM(apps.SCRIPT) as llm, pytest.raises(apps.WrongAnswer):
        apps.langchain_langgraph_app(llm.base_url).invoke(apps.langgraph_input())
    spans = openllmetry.spans()
    kinds = {s.attributes.get(sc.TRACELOOP_SPAN_KIND) for s in spans}
    assert {"workflow", "task"} <= kinds  # OpenLLMetry's own dialect is really there
    built = openllmetry.built()
    trajectory = built.trajectory
    # not one step for the workflow-wide "invoke_agent population_graph" span, nor that name
    assert [(s.agent, s.content) for s in trajectory.steps] == [
        ("planner", apps.PLAN),
        ("researcher", apps.FABRICATED),
        ("writer", apps.ANSWER),
    ]
    assert trajectory.outcome == Outcome.FAILURE and built.notes.agent_unnamed == 0
    culprit = blame_through_processor(make_processor(), sink, spans)
    assert culprit["attributes"][sc.BLAME_AGENT] == "researcher"
    assert culprit["span_id"] == trajectory.steps[1].span_id
    assert culprit["name"] == "ChatOpenAI.chat"
