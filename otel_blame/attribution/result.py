"""The answer of every attribution method: who, at which step, why, how sure, at what cost."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Category = Literal["agent", "dependency", "specification"]


class Candidate(BaseModel):
    """One ranked suspect: a step, its agent and its share of blame."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0)
    agent: str
    score: float = Field(ge=0.0, le=1.0)


class Cost(BaseModel):
    """What an attribution spent: LLM calls, tokens and wall time."""

    model_config = ConfigDict(extra="forbid")

    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0


class Attribution(BaseModel):
    """Which agent caused the failure, at which decisive step, and why."""

    model_config = ConfigDict(extra="forbid")

    agent: str
    step: int = Field(ge=0, description="0-based index of the decisive error step")
    confidence: float = Field(ge=0.0, le=1.0)
    decided: bool = Field(
        default=False,
        description="the evidence supports the verdict; False for a ranked guess, whose candidates "
        "are the suspects (alerts, `top` and cross-run statistics count decided verdicts only)",
    )
    reason: str
    method: str = Field(description="e.g. heuristic, all_at_once, or heuristic(fallback:all_at_once)")
    model: str | None = Field(default=None, description="the LLM used; None for offline methods")
    candidates: list[Candidate] = Field(default_factory=list, description="best first")
    cost: Cost = Field(default_factory=Cost)
    # What kind of failure it was (see otel_blame.attribution.systemic); None when not assessed.
    category: Category | None = Field(
        default=None,
        description="agent: its own output was wrong; dependency: a tool, API or provider failed"
        "; specification: the task or instructions were wrong",
    )
    dependency: str | None = Field(
        default=None, description="the failing tool or service (category dependency)"
    )
    failure_mode: str | None = Field(
        default=None, description="a MAST failure mode, where evidence supports one"
    )
    cross_run_suspiciousness: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="the culprit step's suspiciousness across runs of its workflow",
    )
