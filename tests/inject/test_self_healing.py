"""The docs' self-healing example, run for real: an AG2 group chat on the scripted LLM whose planner
uses the wrong constant; attribute_current_task blames the planner in-process, the retry gives the
planner a corrected instruction, and the second attempt answers right."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_blame.inject.demo_app import ReactiveScript
from tests.support import Reply, ScriptedLLM

pytest.importorskip("autogen")
pytestmark = pytest.mark.slow  # real AG2 runs in an app process per campaign

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "self_healing_ag2.py"
WRONG_PLAN = (
    "Plan: one mile is 1.852 km, so 5 miles is about 9.26 km.\n1. miles = 5\n2. km_per_mile = 1.852\n"
    "3. distance = miles * km_per_mile\n4. Print distance rounded to 2 decimals."
)
RIGHT_PLAN = WRONG_PLAN.replace("1.852", "1.609344").replace("9.26", "8.05")


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("self_healing_ag2", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class PlannerThatListens:
    """The scripted model: the planner uses the nautical mile until its instructions carry a
    correction; coder and reviewer react to what they are shown (the inject demo's script)."""

    def __init__(self) -> None:
        self.others = ReactiveScript()
        self.planner_prompts: list[str] = []

    def __call__(self, request: dict[str, Any]) -> Reply:
        system = next((m["content"] for m in request["messages"] if m.get("role") == "system"), "")
        if system.startswith("You are planner"):
            self.planner_prompts.append(system)
            return Reply(RIGHT_PLAN if "Correction:" in system else WRONG_PLAN)
        return self.others(request)


def test_the_example_blames_the_planner_and_the_corrected_retry_answers_right(instrumented, tmp_path):
    example = _load_example()
    script = PlannerThatListens()
    with ScriptedLLM(script) as llm, contextlib.redirect_stdout(io.StringIO()):
        config = {
            "config_list": [{"model": "scripted", "base_url": llm.base_url, "api_key": "offline"}],
            "cache_seed": None,
        }
        outcome = example.solve(
            "A runner covers 5 miles. How many kilometres is that, rounded to two decimals?",
            "8.05",
            config,
            tmp_path,
        )

    first, second = outcome.attempts
    assert (first.answer, first.right) == ("9.26", False)
    assert (first.blamed_agent, first.blamed_step) == ("planner", 1)
    assert "Correction:" in outcome.corrections["planner"]
    assert "Correction:" not in script.planner_prompts[0] and "Correction:" in script.planner_prompts[1]
    assert (second.answer, second.right) == ("8.05", True)
    assert outcome.answer == "8.05"

    # both attempts are traced: the first root failed, the second succeeded
    roots = [s for s in instrumented.get_finished_spans() if s.parent is None]
    assert [r.attributes["otel_blame.task.outcome"] for r in roots] == ["failure", "success"]
