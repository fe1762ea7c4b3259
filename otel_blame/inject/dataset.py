"""The injected runs as a labelled dataset in the Who&When layout, so ``otel-blame eval`` scores
any method on your own app.

Each failed run with a planted fault becomes ``DIR/Algorithm-Generated/<n>.json`` (the subset whose
logs name the speaker in ``name``): ``history`` is the run's steps as the instrumentation recorded
them (the same steps and indices the processor attributes), ``mistake_agent`` / ``mistake_step`` the
planted fault, ``mistake_reason`` what it changed. Extra keys are ignored by the loader: ``app``
(the campaign's ``--app``, ``zoo:NAME`` for a zoo app), ``fault_kind``, ``trace_id``, ``app_seed``,
``trajectory`` (the run as the processor assembled it: span kinds, tool names, error flags) and, for a
run that failed from a dependency the app declared (fault kind ``dependency``), ``category`` and
``dependency``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from otel_blame.inject.campaign import CampaignResult
from otel_blame.inject.report import RunStatus

SUBSET = "Algorithm-Generated"


def _message(step: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"content": step.get("content", ""), "role": step.get("role") or "assistant"}
    message["name"] = step["agent"]
    if step.get("kind") == "tool":
        message["role"] = "tool"
        if step.get("tool_name"):
            message["tool_name"] = step["tool_name"]
    if step.get("is_error"):
        message["is_error"] = True
    return message


def write_dataset(result: CampaignResult, out_dir: Path) -> int:
    """Write one file per labelled run; returns how many. Existing files of the subset are replaced."""
    folder = Path(out_dir) / SUBSET
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.json"):
        old.unlink()
    written = 0
    for record in result.records:
        trajectory = result.trajectories.get(record.index)
        if record.fault is None or trajectory is None:
            continue
        if record.status not in (RunStatus.ATTRIBUTED, RunStatus.NO_BLAME):
            continue
        task = trajectory.get("task") or {}
        log = {
            "question": task.get("input") or "",
            "ground_truth": task.get("expected_output") or "",
            "final_output": task.get("final_output"),
            "is_correct": False,
            "history": [_message(step) for step in trajectory.get("steps", [])],
            "mistake_agent": record.fault.agent,
            "mistake_step": str(record.fault.step),
            "mistake_reason": f"{record.fault.kind}: {record.fault.description}",
            "app": result.settings.app,
            "fault_kind": record.fault.kind,
            "trace_id": record.trace_id,
            "app_seed": record.app_seed,
            "trajectory": trajectory,
        }
        if record.fault.dependency is not None:
            log["category"] = "dependency"
            log["dependency"] = record.fault.dependency
        (folder / f"{written + 1}.json").write_text(json.dumps(log, indent=2) + "\n", encoding="utf-8")
        written += 1
    return written
