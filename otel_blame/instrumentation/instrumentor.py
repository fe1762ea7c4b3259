"""``OtelBlameInstrumentor``: the convenience that instruments every installed supported framework.

Each framework has its own ``BaseInstrumentor`` (``otel_blame.instrumentation.<framework>``) and its
own ``opentelemetry_instrumentor`` entry point, so ``opentelemetry-instrument`` loads them one by
one and ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` can name each (``otel_blame_autogen``,
``otel_blame_ag2``, ``otel_blame_openai_agents``, ``otel_blame_langgraph``, ``otel_blame_executor``,
...) or ``otel_blame`` for all of them. In code, ``OtelBlameInstrumentor().instrument()`` does
the same as all of those: it finds the instrumentors by their entry points (so frameworks added
later are included), instruments those whose framework is installed in a supported version and
undoes exactly those on ``uninstrument()``.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Collection
from importlib.metadata import entry_points
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from otel_blame.instrumentation._base import ALL_PARTS, FrameworkInstrumentor, disabled_parts
from otel_blame.instrumentation._safety import HOOK_ERRORS
from otel_blame.instrumentation._settings import configure

logger = logging.getLogger("otel_blame.instrumentation")

ENTRY_POINT_GROUP = "opentelemetry_instrumentor"
ENTRY_POINT_PREFIX = "otel_blame_"
# known without package metadata too (a source checkout on sys.path)
KNOWN_INSTRUMENTORS: dict[str, str] = {
    "otel_blame_executor": "otel_blame.instrumentation._executor:ExecutorContextInstrumentor",
    "otel_blame_autogen": "otel_blame.instrumentation.autogen:AutogenInstrumentor",
    "otel_blame_ag2": "otel_blame.instrumentation.ag2:AG2Instrumentor",
    "otel_blame_openai_agents": "otel_blame.instrumentation.openai_agents:OpenAIAgentsInstrumentor",
    "otel_blame_langgraph": "otel_blame.instrumentation.langgraph:LangGraphInstrumentor",
}


def instrumentor_paths() -> dict[str, str]:
    """Entry point name -> ``module:Class`` of every otel-blame framework instrumentor."""
    found = dict(KNOWN_INSTRUMENTORS)
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.name.startswith(ENTRY_POINT_PREFIX):
            found.setdefault(entry_point.name, entry_point.value)
    return found


def _load(path: str) -> type[FrameworkInstrumentor]:
    module_name, _, class_name = path.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


class OtelBlameInstrumentor(BaseInstrumentor):
    """Instrument every installed supported agent framework (each through its own instrumentor)."""

    def __init__(self) -> None:
        if not hasattr(self, "_active"):
            self._active: dict[str, FrameworkInstrumentor] = {}

    def instrumentation_dependencies(self) -> Collection[str]:
        # Each framework is optional: the ones installed are hooked, the others skipped.
        return ()

    @property
    def instrumented_frameworks(self) -> list[str]:
        return sorted(name for name in self._active if name != "otel_blame_executor")

    def _instrument(self, **kwargs: Any) -> None:
        disabled = disabled_parts()
        if ALL_PARTS in disabled:
            logger.info("otel-blame instrumentation disabled by OTEL_PYTHON_DISABLED_INSTRUMENTATIONS")
            return
        if kwargs.get("tracer_provider") is not None:
            configure(tracer_provider=kwargs["tracer_provider"])
        for name, path in instrumentor_paths().items():
            if name in disabled:
                continue
            try:
                instrumentor = _load(path)()
            except ImportError:
                continue  # e.g. a framework module that needs its framework to import
            except Exception:
                HOOK_ERRORS.record(f"instrument.{name}")
                continue
            if instrumentor.is_instrumented_by_opentelemetry:
                continue  # instrumented already, by its own entry point or by the app
            try:
                instrumentor.instrument()
            except Exception:
                HOOK_ERRORS.record(f"instrument.{name}")
                continue
            if instrumentor.patched:
                self._active[name] = instrumentor
            else:  # skipped (not installed, unsupported version): leave it free for a later try
                instrumentor.uninstrument()

    def _uninstrument(self, **kwargs: Any) -> None:
        for name, instrumentor in list(self._active.items()):
            try:
                instrumentor.uninstrument()
            except Exception:
                HOOK_ERRORS.record(f"uninstrument.{name}")
            del self._active[name]
