"""The offline default's verdict on a run whose fault the test planted: found, or a known miss."""

from __future__ import annotations

from typing import Any

from otel_blame.attribution.registry import DEFAULT_METHOD, create_method
from otel_blame.trajectory import Outcome, Trajectory


def check_default_blame(
    trajectory: Trajectory | dict[str, Any], agent: str, step: int, *, known_miss: bool
) -> None:
    """The offline default blames the planted ``agent`` at ``step``. A case listed as a known miss must
    still miss: when the default starts to find it, this fails and says to take it off the list (a
    strict xfail, per case)."""
    if isinstance(trajectory, dict):
        trajectory = Trajectory.model_validate(trajectory)
    verdict = create_method(DEFAULT_METHOD).attribute(
        trajectory.model_copy(update={"outcome": Outcome.FAILURE})
    )
    found = (verdict.agent, verdict.step) == (agent, step)
    if known_miss:
        assert not found, f"the default now finds {agent}@{step}: take this case off the known misses"
    else:
        assert found, f"blamed {verdict.agent}@{verdict.step}, planted {agent}@{step}: {verdict.reason}"
