"""One BaseInstrumentor per framework: entry points, version ranges, symmetric patching."""

from __future__ import annotations

import asyncio
import logging
from importlib.metadata import entry_points

import pytest
from wrapt import BaseObjectProxy

from otel_blame.instrumentation._executor import ExecutorContextInstrumentor
from otel_blame.instrumentation.ag2 import AG2Instrumentor
from otel_blame.instrumentation.autogen import AutogenInstrumentor
from otel_blame.instrumentation.instrumentor import KNOWN_INSTRUMENTORS, OtelBlameInstrumentor
from otel_blame.instrumentation.langgraph import LangGraphInstrumentor
from otel_blame.instrumentation.openai_agents import OpenAIAgentsInstrumentor

FRAMEWORK_INSTRUMENTORS = [
    AutogenInstrumentor,
    AG2Instrumentor,
    OpenAIAgentsInstrumentor,
    LangGraphInstrumentor,
    ExecutorContextInstrumentor,
]


def _owner_functions(instrumentor) -> dict[tuple[int, str], object]:
    """The raw attribute (``__dict__`` entry) of every (owner, name) the instrumentor patches."""
    return {(id(owner), name): owner.__dict__[name] for owner, name in instrumentor.patched}


@pytest.mark.parametrize("cls", FRAMEWORK_INSTRUMENTORS, ids=lambda c: c.name)
def test_each_instrumentor_has_its_entry_point_and_a_version_range(cls):
    found = {ep.name: ep.value for ep in entry_points(group="opentelemetry_instrumentor")}
    assert found[cls.name] == f"{cls.__module__}:{cls.__name__}"
    assert KNOWN_INSTRUMENTORS[cls.name] == found[cls.name]
    if cls is not ExecutorContextInstrumentor:
        (requirement,) = cls().instrumentation_dependencies()
        assert ">=" in requirement and "<" in requirement.split(",")[1]


@pytest.mark.parametrize("cls", FRAMEWORK_INSTRUMENTORS, ids=lambda c: c.name)
def test_uninstrument_restores_every_patched_function(cls, spans):
    instrumentor = cls()
    assert not instrumentor.is_instrumented_by_opentelemetry
    instrumentor.instrument()
    try:
        patched = list(instrumentor.patched)
        assert patched, "nothing was patched"
        wrapped = _owner_functions(instrumentor)
        originals = {key: proxy.__wrapped__ for key, proxy in wrapped.items()}
        assert all(isinstance(proxy, BaseObjectProxy) for proxy in wrapped.values())
    finally:
        instrumentor.uninstrument()
    assert instrumentor.patched == []
    for owner, name in patched:
        restored = owner.__dict__[name]
        assert restored is originals[(id(owner), name)], f"{owner!r}.{name} not restored"
        assert not isinstance(restored, BaseObjectProxy)
    # and it can be instrumented again
    instrumentor.instrument()
    assert len(instrumentor.patched) == len(patched)
    instrumentor.uninstrument()


def test_an_unsupported_framework_version_is_skipped_with_one_warning(spans, monkeypatch, caplog):
    from ag2.agent import Agent

    before = Agent.__dict__["_drive_scope"]
    monkeypatch.setattr(AG2Instrumentor, "instruments", ("ag2 >= 9.0, < 10",))
    instrumentor = AG2Instrumentor()
    with caplog.at_level(logging.DEBUG, logger="otel_blame.instrumentation"):
        instrumentor.instrument()
    try:
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        message = warnings[0].getMessage()
        assert "otel_blame_ag2" in message and "ag2 >= 9.0, < 10" in message and "1.2" in message
        assert instrumentor.patched == [] and instrumentor.skipped_reason
        assert Agent.__dict__["_drive_scope"] is before  # the app runs untouched
        # the umbrella skips it the same way, with one more warning and nothing patched
        caplog.clear()
        umbrella = OtelBlameInstrumentor()
        instrumentor.uninstrument()
        umbrella.instrument()
        assert "otel_blame_ag2" not in umbrella.instrumented_frameworks
        assert Agent.__dict__["_drive_scope"] is before
        assert sum(r.levelno >= logging.WARNING for r in caplog.records) == 1
        umbrella.uninstrument()
    finally:
        instrumentor.uninstrument()


def test_a_framework_that_is_not_installed_is_skipped_quietly(spans, monkeypatch, caplog):
    monkeypatch.setattr(AG2Instrumentor, "instruments", ("surely-not-installed-framework >= 1",))
    instrumentor = AG2Instrumentor()
    with caplog.at_level(logging.INFO, logger="otel_blame.instrumentation"):
        instrumentor.instrument()
    assert instrumentor.patched == []
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]
    instrumentor.uninstrument()


def test_disabled_by_name_or_all(spans, monkeypatch):
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "otel_blame_langgraph")
    umbrella = OtelBlameInstrumentor()
    umbrella.instrument()
    try:
        assert "otel_blame_langgraph" not in umbrella.instrumented_frameworks
        assert {"otel_blame_ag2", "otel_blame_autogen", "otel_blame_openai_agents"} <= set(
            umbrella.instrumented_frameworks
        )
    finally:
        umbrella.uninstrument()
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "otel_blame")
    single = LangGraphInstrumentor()
    single.instrument()
    assert single.patched == [] and "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS" in single.skipped_reason
    single.uninstrument()


def test_umbrella_leaves_alone_what_was_instrumented_by_its_own_instrumentor(spans, monkeypatch):
    monkeypatch.delenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", raising=False)
    own = LangGraphInstrumentor()
    own.instrument()
    umbrella = OtelBlameInstrumentor()
    umbrella.instrument()
    try:
        assert "otel_blame_langgraph" not in umbrella.instrumented_frameworks
    finally:
        umbrella.uninstrument()
    assert own.patched  # still instrumented: the umbrella undid only its own
    own.uninstrument()


def test_executor_instrumentor_runs_the_function_in_the_callers_context(spans):
    import contextvars

    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="none")
    instrumentor = ExecutorContextInstrumentor()
    instrumentor.instrument()
    try:

        async def main() -> str:
            marker.set("caller")
            return await asyncio.get_running_loop().run_in_executor(None, marker.get)

        assert asyncio.run(main()) == "caller"
    finally:
        instrumentor.uninstrument()
