"""The contract every attribution method fulfils: a Trajectory in, an Attribution out."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from otel_blame.attribution.result import Attribution
from otel_blame.trajectory import Trajectory


class AttributionError(Exception):
    """A method could not produce an answer (LLM unreachable, budget spent, empty trajectory)."""


@runtime_checkable
class AttributionMethod(Protocol):
    """Pure apart from the LLM client: the same trajectory gives the same answer (offline methods)."""

    name: str

    def attribute(self, trajectory: Trajectory) -> Attribution:
        """Raise AttributionError when no answer can be given."""
        ...
