"""The ``crew`` zoo app for real: a hierarchical CrewAI crew on the scripted LLM.

CrewAI lives in its own environment: run these with
``PYTHONPATH=$PWD .venv-crewai/bin/python -m pytest tests/inject/zoo/test_crew.py``; in the main
environment the module skips (an allowed skip, tests/allowed_skips.toml). Runs go through the
campaign's own run path (:func:`otel_blame.inject.worker.run_one`), in this process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
pytest.importorskip("crewai")

from otel_blame.inject.zoo import crew  # noqa: E402

APP = "otel_blame.inject.zoo.crew:run_task"
OTHER_FRAMEWORKS = (
    "otel_blame_openai_agents,otel_blame_agentchat,otel_blame_langgraph,otel_blame_ag2,otel_blame_autogen"
)
Run = Callable[..., dict[str, Any]]


@pytest.fixture(autouse=True)
def _autogen_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Overrides tests/inject's fixture of the same name: here CrewAI is the framework on."""
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
        return run_one(crew.run_task, spec, provider, spans)

    yield one
    instrumentor.uninstrument()
    reset_configuration()
    provider.shutdown()


def _steps(result: dict[str, Any]) -> list[dict[str, Any]]:
    return result["trajectory"]["steps"]


def test_a_clean_run_passes_with_the_hierarchical_shape(run: Run) -> None:
    for seed in (0, 1):
        result = run(seed)
        assert result["error"] is None and result["outcome"] == "success", result["error"]
        steps = _steps(result)
        assert len(steps) == 15
        agents = [s["agent"] for s in steps]
        assert agents[0] == agents[-1] == crew.MANAGER
        assert set(agents) == {crew.MANAGER, crew.ANALYST, crew.WRITER}
        delegations = [s for s in steps if s["agent"] == crew.MANAGER and s["kind"] == "tool"]
        assert [s["tool_name"] for s in delegations] == [crew.DELEGATE, crew.DELEGATE]
        ledger_reads = [s for s in steps if s["agent"] == crew.ANALYST and s["kind"] == "tool"]
        assert [s["tool_name"] for s in ledger_reads] == ["query_ledger", "query_refunds"] * 2
        brief = crew.brief_for(seed)
        assert result["trajectory"]["task"]["expected_output"] == brief.expected_output
