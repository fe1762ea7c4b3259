"""``OtelBlameInstrumentor``: one BaseInstrumentor that hooks every installed supported framework.

Registered under the ``opentelemetry_instrumentor`` entry point as ``otel_blame``, so
``opentelemetry-instrument python app.py`` picks it up. ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``
may name ``otel_blame`` (everything) or single parts: ``otel_blame_autogen``, ``otel_blame_ag2``,
``otel_blame_langgraph``, ``otel_blame_openai_agents``, ``otel_blame_executor`` (context propagation
into ``run_in_executor``).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from collections.abc import Collection
from typing import Any, Protocol

from opentelemetry.instrumentation.environment_variables import OTEL_PYTHON_DISABLED_INSTRUMENTATIONS
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from otel_blame.instrument import executor_context
from otel_blame.instrument.safety import HOOK_ERRORS
from otel_blame.instrument.settings import configure

logger = logging.getLogger(__name__)

ENTRY_POINT_NAME = "otel_blame"


class FrameworkHooks(Protocol):
    """What each ``otel_blame.instrument.<framework>`` module provides."""

    def instrument(self) -> None: ...

    def uninstrument(self) -> None: ...


# part name -> (module that must be importable, our hook module)
FRAMEWORKS: dict[str, tuple[str, str]] = {
    "otel_blame_autogen": ("autogen", "otel_blame.instrument.autogen_classic"),
    "otel_blame_ag2": ("ag2", "otel_blame.instrument.ag2_middleware"),
    "otel_blame_openai_agents": ("agents", "otel_blame.instrument.openai_agents"),
    "otel_blame_langgraph": ("langgraph", "otel_blame.instrument.langgraph"),
}
EXECUTOR_PART = "otel_blame_executor"


def disabled_parts() -> set[str]:
    raw = os.environ.get(OTEL_PYTHON_DISABLED_INSTRUMENTATIONS, "")
    return {part.strip() for part in raw.split(",") if part.strip()}


class OtelBlameInstrumentor(BaseInstrumentor):
    """Instrument installed agent frameworks so every agent message becomes a step span."""

    def __init__(self) -> None:
        if not hasattr(self, "_active"):
            self._active: dict[str, Any] = {}

    def instrumentation_dependencies(self) -> Collection[str]:
        # Each framework is optional: the ones installed are hooked, the others skipped.
        return ()

    @property
    def instrumented_frameworks(self) -> list[str]:
        return sorted(self._active)

    def _instrument(self, **kwargs: Any) -> None:
        disabled = disabled_parts()
        if ENTRY_POINT_NAME in disabled:
            logger.info("otel-blame instrumentation disabled by %s", OTEL_PYTHON_DISABLED_INSTRUMENTATIONS)
            return
        if kwargs.get("tracer_provider") is not None:
            configure(tracer_provider=kwargs["tracer_provider"])
        if EXECUTOR_PART not in disabled:
            executor_context.install()
        for part, (framework, module_name) in FRAMEWORKS.items():
            if part in disabled or importlib.util.find_spec(framework) is None:
                continue
            try:
                hooks: FrameworkHooks = importlib.import_module(module_name)  # type: ignore[assignment]
                hooks.instrument()
            except Exception:
                HOOK_ERRORS.record(f"instrument.{part}")
                continue
            self._active[part] = hooks

    def _uninstrument(self, **kwargs: Any) -> None:
        for part, hooks in list(self._active.items()):
            try:
                hooks.uninstrument()
            except Exception:
                HOOK_ERRORS.record(f"uninstrument.{part}")
            del self._active[part]
        executor_context.uninstall()
