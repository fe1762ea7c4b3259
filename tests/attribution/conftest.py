"""Fixtures for attribution tests: small hand-built trajectories and scripted-LLM settings."""

from __future__ import annotations

import pytest

from otel_blame.attribution.llm_client import LLMSettings
from otel_blame.trajectory import Outcome, StepKind, Task, Trajectory
from tests.support import ScriptedLLM


def make_trajectory(steps: list[tuple[str, str] | tuple[str, str, StepKind]], **task: str) -> Trajectory:
    """(agent, content[, kind]) tuples -> a failed Trajectory."""
    built = []
    for item in steps:
        agent, content = item[0], item[1]
        kind = item[2] if len(item) > 2 else StepKind.MESSAGE
        built.append({"index": 0, "agent": agent, "role": agent, "content": content, "kind": kind})
    return Trajectory.from_steps(built, task=Task(**task), outcome=Outcome.FAILURE)


@pytest.fixture
def five_steps() -> Trajectory:
    return make_trajectory(
        [
            ("Planner", "Plan: look up the population of the town, then subtract."),
            ("Researcher", "The population is 5,000 according to the census."),
            ("Coder", "```python\nprint(5000 - 1200)\n```"),
            ("Terminal", "exitcode: 0 (execution succeeded)\nCode output: 3800", StepKind.CODE_EXECUTION),
            ("Verifier", "Verified. The answer is 3800. TERMINATE"),
        ],
        input="How many more people live in A than in B?",
        expected_output="4100",
    )


@pytest.fixture
def llm():
    """A factory: ``with llm(script) as (server, settings):``."""

    class _Factory:
        def __call__(self, script, default=None, **overrides):
            server = ScriptedLLM(script, default=default)
            return _Running(server, overrides)

    return _Factory()


class _Running:
    def __init__(self, server: ScriptedLLM, overrides: dict) -> None:
        self.server = server
        self.overrides = overrides

    def __enter__(self) -> tuple[ScriptedLLM, LLMSettings]:
        self.server.start()
        values = {
            "base_url": self.server.base_url,
            "api_key": "sk-test-not-a-real-key",
            "model": "scripted-model",
            "timeout": 5.0,
            "max_retries": 2,
            "backoff_seconds": 0.0,
        } | self.overrides
        return self.server, LLMSettings(**values)

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
