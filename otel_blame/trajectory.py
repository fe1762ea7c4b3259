"""The model of one run of a multi-agent application, as attribution sees it.

Every source (spans from the processor, OTLP JSON files, Who&When logs, plain
``{"history": [...]}`` files) becomes a :class:`Trajectory`; every attribution method
takes one. Step indices are 0-based positions in ``steps`` and are what ``blame.step``
reports.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

# "FINAL ANSWER: 42" (GAIA's and Who&When's answer line), "Final answer - 42"
_FINAL_ANSWER = re.compile(r"(?im)^\W{0,3}final answer\W{0,3}\s*[:\-]\s*(?P<answer>\S.*)$")
_TASK_NAME_CHARS = 80


class StepKind(StrEnum):
    """What a step is: an agent's message, a tool call's result, or executed code's output."""

    MESSAGE = "message"
    TOOL = "tool"
    CODE_EXECUTION = "code_execution"


class Outcome(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    UNKNOWN = "unknown"


class Step(BaseModel):
    """One message in the run, in the order it happened."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0, description="0-based position in the trajectory")
    agent: str = Field(description="the agent that produced this step, normalised")
    role: str = Field(default="assistant", description="the raw speaker or role label as recorded")
    content: str = ""
    kind: StepKind = StepKind.MESSAGE
    tool_name: str | None = None
    arguments: str | None = Field(default=None, description="what a tool step was called with, as recorded")
    span_id: str | None = Field(default=None, description="hex span id when built from spans")
    start_time_unix_nano: int | None = None
    is_error: bool = Field(default=False, description="the span or tool reported an error")


class DependencyFailure(BaseModel):
    """A tool, API or model provider that failed during the run (error status, HTTP 429/5xx, a
    timeout, a provider error): evidence that a step failed as a victim, not through its agent."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="the failing tool or service, e.g. a tool name, a host, a provider")
    kind: str = Field(description="http_status | timeout | provider_error | tool_error")
    detail: str = Field(default="", description="what was recorded: a status code, an error message")
    step: int | None = Field(default=None, description="the step it happened in (its span or below it)")
    span_id: str | None = None


class Task(BaseModel):
    """What the run was asked to do and what it produced."""

    model_config = ConfigDict(extra="forbid")

    name: str = "task"
    workflow: str | None = Field(
        default=None,
        description="what runs of the same task share: the declared task or workflow name, else the root "
        "span's name (the name may come from this run's input)",
    )
    input: str | None = None
    expected_output: str | None = None
    final_output: str | None = None
    conversation_id: str | None = None


class Trajectory(BaseModel):
    """A whole run: the task, its ordered steps and its outcome."""

    model_config = ConfigDict(extra="forbid")

    task: Task = Field(default_factory=Task)
    steps: list[Step] = Field(default_factory=list)
    outcome: Outcome = Outcome.UNKNOWN
    outcome_reason: str | None = None
    trace_id: str | None = Field(default=None, description="hex trace id when built from spans")
    root_span_id: str | None = None
    source: str | None = Field(default=None, description="where it came from, e.g. a file name")
    dependency_failures: list[DependencyFailure] = Field(
        default_factory=list, description="tools, APIs and providers that failed, in step order"
    )

    @model_validator(mode="after")
    def _indices_are_positions(self) -> Trajectory:
        for position, step in enumerate(self.steps):
            if step.index != position:
                raise ValueError(f"step at position {position} has index {step.index}")
        return self

    @property
    def agents(self) -> list[str]:
        """Distinct agent names in order of first appearance."""
        seen: dict[str, None] = {}
        for step in self.steps:
            seen.setdefault(step.agent, None)
        return list(seen)

    def steps_of(self, agent: str) -> list[Step]:
        return [step for step in self.steps if step.agent == agent]

    @classmethod
    def from_steps(cls, steps: list[dict] | list[Step], **fields: object) -> Trajectory:
        """Build a trajectory renumbering steps 0..n-1 in the given order."""
        built = []
        for position, step in enumerate(steps):
            data = step.model_dump() if isinstance(step, Step) else dict(step)
            data["index"] = position
            built.append(Step(**data))
        return cls(steps=built, **fields)  # type: ignore[arg-type]


def stated_final_answer(texts: Iterable[str], *, last: int = 3) -> str | None:
    """The answer a run stated on a "FINAL ANSWER: ..." line: the last such line of the first of the
    first ``last`` texts (in the order given, so pass the steps last first) that has one."""
    for number, found in enumerate(texts):
        if number >= last:
            return None
        answers = [match.group("answer").strip() for match in _FINAL_ANSWER.finditer(found)]
        if answers and answers[-1]:
            return answers[-1]
    return None


def name_from_input(task_input: str | None) -> str | None:
    """A task's name from its input: the question it asks (its first line ending in "?"), else its
    first line with words; cut at a word near 80 characters."""
    lines = [" ".join(line.split()) for line in (task_input or "").splitlines()]
    lines = [line for line in lines if any(character.isalnum() for character in line)]
    line = next((line for line in lines if line.endswith("?")), lines[0] if lines else "")
    if not line:
        return None
    if len(line) <= _TASK_NAME_CHARS:
        return line
    cut = line[:_TASK_NAME_CHARS].rsplit(" ", 1)[0] or line[:_TASK_NAME_CHARS]
    return cut.rstrip(",;:.-") + "…"
