"""How otel-blame reads and blames real third-party traces: TRAIL's span-labelled smolagents runs.

Reading (what issue 25 measures): the share of annotated error locations that are a step's own span,
steps named after a service or a host, the manager and the searcher told apart, every failed tool
span a failed step, and the time to build each trajectory. Blame: hit@1, hit@1 on HIGH-impact
errors, hit@3 and the agent of the earliest HIGH-impact error, beside first-step, last-step,
first-failed-step and random baselines on the same traces (``otel_blame.evaluation.trail``).

Usage::

    PYTHONPATH=$PWD .venv/bin/python bench/trail.py [--dataset ../shared/trail/dev] [--method ranker]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import statistics
import time
from pathlib import Path

from otel_blame.attribution.registry import create_method
from otel_blame.datasets.trail import trail_files
from otel_blame.evaluation.trail import evaluate_trail, summarise_trail, trail_baselines, trail_table
from otel_blame.loaders import load_trajectory

DEFAULT_DATASET = Path(__file__).resolve().parents[2] / "shared" / "trail" / "dev"


def _spans(path: Path) -> list[dict]:
    """Every span of a span-tree file, flattened."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    out, stack = [], list(data.get("spans") or [])
    while stack:
        span = stack.pop()
        out.append(span)
        stack.extend(span.get("child_spans") or [])
    return out


def reading(dataset: Path) -> dict[str, float | int]:
    """The reading targets over every trace of the dataset."""
    located = annotated = failed_tools = failed_tool_steps = service_named = 0
    both = distinct = 0
    seconds = []
    for path in trail_files(dataset):
        spans = _spans(path)
        started = time.perf_counter()
        trajectory = load_trajectory(path)
        seconds.append(time.perf_counter() - started)
        steps = {step.span_id: step for step in trajectory.steps}
        annotation = json.loads(
            (
                dataset / "annotations" / (path.name.removesuffix(".gz").removesuffix(".json") + ".json")
            ).read_text()
        )
        locations = [error["location"] for error in annotation.get("errors") or []]
        annotated += len(locations)
        located += sum(location in steps for location in locations)
        hosts = {str(s.get("service_name")) for s in spans} | {
            str((s.get("resource_attributes") or {}).get("host.name")) for s in spans
        }
        service_named += sum(step.agent in hosts for step in trajectory.steps)
        for span in spans:
            attributes = span.get("span_attributes") or {}
            if attributes.get("openinference.span.kind") == "TOOL" and span.get("status_code") == "Error":
                failed_tools += 1
                step = steps.get(span["span_id"])
                failed_tool_steps += bool(step is not None and step.is_error and step.kind == "tool")
        agent_spans = [
            s for s in spans if (s.get("span_attributes") or {}).get("openinference.span.kind") == "AGENT"
        ]
        if {s["span_name"] for s in agent_spans} >= {"CodeAgent.run", "ToolCallingAgent.run"}:
            both += 1
            owners = {step.agent for step in trajectory.steps}
            distinct += len(owners & {"CodeAgent", "search_agent"}) == 2
    return {
        "annotated error locations": annotated,
        "... that are a step's own span": located,
        "steps named after a service or host": service_named,
        "traces with a manager and a searcher": both,
        "... whose two agents have distinct names": distinct,
        "failed tool spans": failed_tools,
        "... that are a failed tool step": failed_tool_steps,
        "build seconds, median": round(statistics.median(seconds), 3),
        "build seconds, max": round(max(seconds), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--method", default="ranker")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(
        f"# {datetime.date.today()} {platform.node()} load {load:.1f}: bench/trail.py --method {args.method}"
    )
    print("\n## Reading")
    for name, value in reading(args.dataset).items():
        print(f"{name:<45} {value}")
    files = trail_files(args.dataset)
    records = evaluate_trail(create_method(args.method), args.dataset, files)
    rows = summarise_trail(records, name=args.method) + trail_baselines(args.dataset, files)
    print("\n## Blame (hit@1, hit@1 HIGH, hit@3; agent and step of the earliest HIGH-impact error), %")
    for line in trail_table(rows, args.method):
        print(line)


if __name__ == "__main__":
    main()
