"""The reading targets of issue 25 on real traces: TRAIL's development split (smolagents runs recorded
with OpenInference, errors labelled by people on the spans where they are). Every annotated error sits
on a step's own span, no step is named after the service or the host, the manager and the searcher
have distinct names, and every failed tool span is a failed tool step."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from otel_blame.datasets.trail import trail_files
from otel_blame.loaders import load_trajectory
from otel_blame.trajectory import StepKind

TRAIL = Path(__file__).resolve().parents[3] / "shared" / "trail" / "dev"
if not TRAIL.is_dir():  # a worktree beside main: ../shared from the repository's parent
    TRAIL = Path(__file__).resolve().parents[4] / "shared" / "trail" / "dev"


def _spans(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        stack = list(json.load(handle)["spans"])
    out = []
    while stack:
        span = stack.pop()
        out.append(span)
        stack.extend(span["child_spans"])
    return out


@pytest.mark.slow
def test_trail_dev_traces_read_as_they_nest() -> None:
    if not TRAIL.is_dir():
        pytest.skip(f"TRAIL dev split not found at {TRAIL}")
    located = annotated = failed_tools = failed_tool_steps = 0
    for path in trail_files(TRAIL):
        spans = _spans(path)
        trajectory = load_trajectory(path)
        steps = {step.span_id: step for step in trajectory.steps}
        annotation = json.loads((TRAIL / "annotations" / path.name.removesuffix(".gz")).read_text())
        locations = [error["location"] for error in annotation["errors"]]
        annotated += len(locations)
        located += sum(location in steps for location in locations)
        deployment = {s["service_name"] for s in spans} | {
            s["resource_attributes"].get("host.name") for s in spans
        }
        assert not deployment & {step.agent for step in trajectory.steps}, path.name
        kinds = {
            s["span_name"] for s in spans if s["span_attributes"].get("openinference.span.kind") == "AGENT"
        }
        if {"CodeAgent.run", "ToolCallingAgent.run"} <= kinds:
            assert {"CodeAgent", "search_agent"} <= set(trajectory.agents), path.name
        for span in spans:
            if (
                span["span_attributes"].get("openinference.span.kind") == "TOOL"
                and span["status_code"] == "Error"
            ):
                failed_tools += 1
                step = steps.get(span["span_id"])
                failed_tool_steps += step is not None and step.is_error and step.kind == StepKind.TOOL
    assert annotated > 300 and located / annotated >= 0.95
    assert failed_tools > 0 and failed_tool_steps == failed_tools
