"""How many LLM calls and tokens a method will spend on a trajectory, shown before it runs.

Upper bounds from the same rendering the LLM methods use (``prompts.step_tokens``): what the
page shows is what the run may cost at most, not a guess of the average.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from otel_blame.attribution.llm_client import estimate_tokens
from otel_blame.attribution.llm_settings import LLMSettings
from otel_blame.attribution.prompts import PROMPT_OVERHEAD_TOKENS, log_nonce, render_task, step_tokens
from otel_blame.trajectory import Trajectory


class CostEstimate(BaseModel):
    method: str
    max_calls: int
    max_input_tokens: int
    max_output_tokens: int
    note: str


def estimate_cost(method: str, trajectory: Trajectory, settings: LLMSettings) -> CostEstimate:
    nonce = log_nonce(trajectory)
    costs = step_tokens(trajectory, nonce, settings.max_step_chars)
    task = PROMPT_OVERHEAD_TOKENS + estimate_tokens(
        render_task(trajectory, nonce, settings.max_step_chars, False)
    )
    budget = max(200, settings.context_tokens - task - settings.max_output_tokens)
    whole = sum(costs)
    chunks = max(1, math.ceil(whole / budget))
    n = len(costs)
    if method == "all_at_once":
        calls, inputs, note = 1, task + min(whole, budget), "one call with the whole log"
    elif method == "step_by_step":
        calls = n
        inputs = sum(task + min(sum(costs[: i + 1]), budget) for i in range(n))
        note = "one call per step until a step is judged wrong (at most one per step)"
    elif method == "binary_search":
        calls = max(1, math.ceil(math.log2(max(n, 2))))
        inputs = calls * (task + min(whole, budget))
        note = "one call per halving of the log"
    elif method == "hybrid":
        longest = max((len(trajectory.steps_of(agent)) for agent in trajectory.agents), default=0)
        calls = 1 + longest
        inputs = task + min(whole, budget) + longest * (task + min(whole, budget))
        note = "one call naming the agent, then one per step of that agent at most"
    elif method == "counterfactual":
        calls = chunks + 4
        inputs = chunks * (task + budget) + 4 * (task + min(whole, budget))
        note = "ranking suspects, then one replay question per suspect (at most 4)"
    else:
        calls, inputs, note = chunks, chunks * (task + min(whole, budget)), "calls depend on the method"
    inputs = min(inputs, settings.token_budget)
    return CostEstimate(
        method=method,
        max_calls=calls,
        max_input_tokens=inputs,
        max_output_tokens=calls * settings.max_output_tokens,
        note=note + f"; capped by the token budget of {settings.token_budget:,} per trace",
    )
