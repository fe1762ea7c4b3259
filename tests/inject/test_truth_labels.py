"""The truth a campaign records keeps what kind of cause it was: a run failed by a dependency the app
declared is labelled ``dependency``, naming the service, in the campaign's records and in the dataset it
writes (the ranker is fitted on those files: a truth that lost its category teaches it nothing)."""

from __future__ import annotations

import json
from pathlib import Path

from otel_blame.datasets.who_and_when import load_case
from otel_blame.inject.campaign import CampaignResult, CampaignSettings, _truth
from otel_blame.inject.dataset import SUBSET, write_dataset
from otel_blame.inject.report import Baseline, RunRecord, RunStatus

DECLARED = {
    "kind": "dependency",
    "agent": "assistant",
    "step": 1,
    "description": "order_service answered HTTP 503",
    "dependency": "order_service",
}


def test_a_declared_dependency_failure_is_the_runs_truth_with_its_category(tmp_path: Path) -> None:
    fault = _truth(None, DECLARED)
    assert fault is not None
    assert (fault.kind, fault.agent, fault.step, fault.dependency) == (
        "dependency",
        "assistant",
        1,
        "order_service",
    )
    planted = {"kind": "wrong_tool", "agent": "assistant", "step": 1, "description": "called the wrong tool"}
    assert _truth(planted, None).dependency is None  # a planted fault is the agent's

    record = RunRecord(index=0, app_seed=7, status=RunStatus.ATTRIBUTED, fault=fault, trace_id="ab" * 16)
    trajectory = {
        "task": {"input": "Where is order 42?", "expected_output": "shipped"},
        "steps": [
            {"index": 0, "agent": "customer", "content": "Where is order 42?", "kind": "message"},
            {
                "index": 1,
                "agent": "assistant",
                "content": "HTTP 503 Service Unavailable",
                "kind": "tool",
                "tool_name": "get_order_details",
                "is_error": True,
            },
        ],
    }
    result = CampaignResult(
        settings=CampaignSettings(app="zoo:customer_service"),
        method="ranker",
        baseline=Baseline(status=RunStatus.CLEAN_PASSED),
        records=[record],
        trajectories={0: trajectory},
    )
    assert write_dataset(result, tmp_path) == 1
    written = tmp_path / SUBSET / "1.json"
    log = json.loads(written.read_text())
    assert (log["category"], log["dependency"], log["fault_kind"]) == (
        "dependency",
        "order_service",
        "dependency",
    )
    case = load_case(written, tmp_path)
    assert (case.mistake_agent, case.mistake_step) == ("assistant", 1)
