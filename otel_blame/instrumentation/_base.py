"""The shape every framework instrumentor of otel-blame shares, after opentelemetry-python-contrib's.

A :class:`FrameworkInstrumentor` names the framework versions it supports in
``instrumentation_dependencies()``. The check runs in ``_instrument`` (also under
``opentelemetry-instrument``, which skips ``BaseInstrumentor``'s own check): a framework that is not
installed is skipped quietly, an unsupported version is skipped with one warning, and in both cases
nothing of the app is touched. Patching goes through ``wrapt.wrap_function_wrapper`` and is undone
with ``opentelemetry.instrumentation.utils.unwrap``, in reverse order. Naming ``otel_blame`` in
``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` switches every otel-blame instrumentor off; each one's
own entry point name switches it off alone.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Collection
from typing import Any, ClassVar

from opentelemetry.instrumentation.dependencies import DependencyConflict, get_dependency_conflicts
from opentelemetry.instrumentation.environment_variables import OTEL_PYTHON_DISABLED_INSTRUMENTATIONS
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.instrumentation.utils import unwrap
from wrapt import wrap_function_wrapper

from otel_blame.instrumentation._safety import HOOK_ERRORS
from otel_blame.instrumentation._settings import configure

logger = logging.getLogger("otel_blame.instrumentation")

# names in OTEL_PYTHON_DISABLED_INSTRUMENTATIONS that switch every otel-blame instrumentor off
ALL_PARTS = "otel_blame"


def disabled_parts() -> set[str]:
    raw = os.environ.get(OTEL_PYTHON_DISABLED_INSTRUMENTATIONS, "")
    return {part.strip() for part in raw.split(",") if part.strip()}


class FrameworkInstrumentor(BaseInstrumentor):
    """One framework's hooks: a version range, a list of wrapt patches, symmetric undo."""

    #: the entry point name (``opentelemetry_instrumentor`` group), e.g. ``otel_blame_ag2``
    name: ClassVar[str]
    #: requirement strings of the supported framework versions, e.g. ``("ag2 >= 1.0, < 2",)``
    instruments: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        if not hasattr(self, "_patched"):
            self._patched: list[tuple[Any, str]] = []
            self.skipped_reason: str | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return self.instruments

    def _check_dependency_conflicts(self) -> DependencyConflict | None:
        # Checked in _instrument instead, so that the manual path and opentelemetry-instrument
        # (which skips this check) behave the same: one warning, nothing patched.
        return None

    @property
    def patched(self) -> list[tuple[Any, str]]:
        """(owner, attribute) of every function currently wrapped by this instrumentor."""
        return list(self._patched)

    def _instrument(self, **kwargs: Any) -> None:
        self.skipped_reason = None
        disabled = disabled_parts()
        if ALL_PARTS in disabled or self.name in disabled:
            self.skipped_reason = f"disabled by {OTEL_PYTHON_DISABLED_INSTRUMENTATIONS}"
            logger.info("otel-blame: %s %s", self.name, self.skipped_reason)
            return
        conflict = get_dependency_conflicts(list(self.instruments)) if self.instruments else None
        if conflict is not None:
            self.skipped_reason = conflict._format_message(self.name)
            if conflict.found:  # installed, but a version we do not support
                logger.warning("otel-blame: %s; the app runs uninstrumented by it", self.skipped_reason)
            else:
                logger.debug("otel-blame: %s", self.skipped_reason)
            return
        if kwargs.get("tracer_provider") is not None:
            configure(tracer_provider=kwargs["tracer_provider"])
        try:
            self._patch()
        except Exception:
            HOOK_ERRORS.record(f"instrument.{self.name}")
            self._unpatch()

    def _uninstrument(self, **kwargs: Any) -> None:
        self._unpatch()

    # -- for subclasses ---------------------------------------------------------------------------
    def _patch(self) -> None:
        """Wrap the framework's functions with :meth:`_wrap`."""
        raise NotImplementedError

    def _after_unpatch(self) -> None:
        """Forget per-process state kept for the hooks (optional)."""

    def _wrap(self, module: str, name: str, wrapper: Callable[..., Any]) -> None:
        """``wrap_function_wrapper(module, name, wrapper)``, remembered for :meth:`_unpatch`."""
        owner_path, _, attribute = f"{module}.{name}".rpartition(".")
        wrap_function_wrapper(module, name, wrapper)
        self._patched.append((_resolve(owner_path), attribute))

    def _unpatch(self) -> None:
        while self._patched:
            owner, attribute = self._patched.pop()
            try:
                unwrap(owner, attribute)
            except Exception:
                HOOK_ERRORS.record(f"uninstrument.{self.name}")
        self._after_unpatch()


def _resolve(path: str) -> Any:
    """The object at a dotted path: a module, or a class (or attribute) inside one."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            target = getattr(target, attribute)
        return target
    raise ImportError(path)
