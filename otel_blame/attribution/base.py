"""The contract every attribution method fulfils: a Trajectory in, an Attribution out."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from otel_blame.attribution.result import Attribution, Cost
from otel_blame.trajectory import Trajectory


class AttributionError(Exception):
    """A method could not produce an answer (LLM unreachable, budget spent, empty trajectory).

    ``cost`` is what was spent before giving up (LLM calls and tokens are billed even so).
    """

    def __init__(self, message: str, cost: Cost | None = None) -> None:
        super().__init__(message)
        self.cost = cost


@runtime_checkable
class AttributionMethod(Protocol):
    """Pure apart from the LLM client: the same trajectory gives the same answer (offline methods)."""

    name: str

    def attribute(self, trajectory: Trajectory) -> Attribution:
        """Raise AttributionError when no answer can be given."""
        ...
