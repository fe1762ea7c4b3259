"""The ``supervisor`` zoo app for real: a LangGraph graph with ChatOpenAI on the scripted LLM.

Runs go through the campaign's own run path (:func:`otel_blame.inject.worker.run_one`: the
instrumentation on, the run's :class:`~otel_blame.inject.injector.Injector` on the message path),
in this process so that each run takes a fraction of a second; one short campaign goes through
the CLI and the in-process processor, as a user runs it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from otel_blame.inject.zoo import supervisor  # noqa: E402

APP = "otel_blame.inject.zoo.supervisor:run_task"
# the app uses LangGraph only: the other frameworks' instrumentors stay off (their imports cost seconds)
OTHER_FRAMEWORKS = (
    "otel_blame_openai_agents,otel_blame_agentchat,otel_blame_crewai,otel_blame_ag2,otel_blame_autogen"
)
Run = Callable[..., dict[str, Any]]


@pytest.fixture(autouse=True)
def _autogen_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Overrides tests/inject's fixture of the same name: here LangGraph is the framework on."""
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", OTHER_FRAMEWORKS)


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    """``run(seed, fault=None)``: one run of the app as a campaign's app process runs it."""
    from opentelemetry.sdk.trace import TracerProvider

    from otel_blame.inject.worker import RunSpans, run_one
    from otel_blame.instrument import OtelBlameInstrumentor, configure, reset_configuration

    provider = TracerProvider()
    spans = RunSpans()
    provider.add_span_processor(spans)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", OTHER_FRAMEWORKS)
        reset_configuration()
        configure(tracer_provider=provider)
        instrumentor = OtelBlameInstrumentor()
        instrumentor.instrument(tracer_provider=provider)

    def one(seed: int, fault: dict[str, Any] | None = None) -> dict[str, Any]:
        spec = {"index": 0, "app_seed": seed, "fault": fault, "pass_seed": True}
        return run_one(supervisor.run_task, spec, provider, spans)

    yield one
    instrumentor.uninstrument()
    reset_configuration()
    provider.shutdown()


def _steps(result: dict[str, Any]) -> list[dict[str, Any]]:
    return result["trajectory"]["steps"]


def test_a_clean_run_passes_with_the_supervisor_shape(run: Run) -> None:
    for seed in (0, 1, 5):
        result = run(seed)
        assert result["error"] is None and result["outcome"] == "success", result["error"]
        steps = _steps(result)
        assert 16 <= len(steps) <= 22
        assert steps[0]["agent"] == "user"
        assert {s["agent"] for s in steps} == {"user", "supervisor", "researcher", "retriever", "writer"}
        tools = [s for s in steps if s["kind"] == "tool"]
        assert tools and all(s["agent"] == "retriever" for s in tools)
        assert all(json.loads(s["content"])["results"] for s in tools)  # the tool's own JSON
        assert steps[-1]["agent"] == "supervisor" and "Approved" in steps[-1]["content"]
        task, _ = supervisor.task_for(seed)
        assert result["trajectory"]["task"]["expected_output"] == task.expected_output


def test_tasks_and_figures_come_from_the_seed() -> None:
    kinds = {supervisor.task_for(seed)[0].kind for seed in range(12)}
    assert kinds == {"downtime", "bill", "capacity"}
    first, facts = supervisor.task_for(3)
    again, facts_again = supervisor.task_for(3)
    assert first == again and facts.documents == facts_again.documents
    other, other_facts = supervisor.task_for(4)
    assert other_facts.documents != facts.documents
