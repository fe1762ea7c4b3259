"""The cross-run statistics: counts, bounds, surviving kill -9, and the processor using them.

Real SQLite files, a real child process killed with SIGKILL, real SDK spans over gRPC to an
in-process processor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame import semconv as sc
from otel_blame.conventions import attributes_to_dict
from otel_blame.processor.config import ConfigError, CrossRunConfig, load_config
from otel_blame.processor.cross_run import CrossRunStatistics
from otel_blame.trajectory import Outcome, Trajectory

from .spans import record_agent_run


def _run(agents: list[str]) -> Trajectory:
    return Trajectory.from_steps(
        [{"agent": agent, "content": f"{agent} speaks"} for agent in agents], outcome=Outcome.FAILURE
    )


def test_counts_failing_passing_and_blamed(tmp_path: Path) -> None:
    stats = CrossRunStatistics(CrossRunConfig(), tmp_path / "c.sqlite")
    try:
        stats.observe("svc/t", _run(["A", "B"]), failed=True, blamed_step=1)
        stats.observe("svc/t", _run(["A", "B"]), failed=True, blamed_step=0)
        stats.observe("svc/t", _run(["A"]), failed=False)
        evidence = stats.evidence("svc/t", _run(["A", "B", "C"]))
        assert evidence is not None
        assert (evidence.failing_runs, evidence.passing_runs) == (2, 1)
        a, b = evidence.entities["agent:A"], evidence.entities["agent:B"]
        assert (a.failing, a.passing, a.blamed) == (2, 1, 1)
        assert (b.failing, b.passing, b.blamed) == (2, 0, 1)
        assert "agent:C" not in evidence.entities  # never seen
        assert stats.evidence("other/t", _run(["A"])) is None
    finally:
        stats.close()


def test_stays_within_its_bounds(tmp_path: Path) -> None:
    config = CrossRunConfig(max_workflows=3, max_agents_per_workflow=4, max_components_per_agent=3)
    stats = CrossRunStatistics(config, tmp_path / "c.sqlite")
    try:
        for number in range(10):  # 10 workflows into 3
            stats.observe(f"svc/w{number}", _run(["A"]), failed=number % 2 == 0)
        assert stats.sizes()["workflows"] == 3
        assert stats.evidence("svc/w0", _run(["A"])) is None  # the least recently seen went first
        assert stats.evidence("svc/w9", _run(["A"])) is not None
        for number in range(12):  # 12 agents into 4, the newest kept
            stats.observe("svc/w9", _run([f"agent{number}"]), failed=True)
        assert stats.sizes()["max_agents_in_a_workflow"] == 4
        kept = stats.evidence("svc/w9", _run([f"agent{n}" for n in range(12)]))
        assert kept is not None and sorted(e for e in kept.entities if e.startswith("agent:")) == [
            "agent:agent10",
            "agent:agent11",
            "agent:agent8",
            "agent:agent9",
        ]
        many_tools = Trajectory.from_steps(
            [{"agent": "T", "content": "x", "kind": "tool", "tool_name": f"tool{n}"} for n in range(6)],
        )
        stats.observe("svc/w9", many_tools, failed=True)
        evidence = stats.evidence("svc/w9", many_tools)
        assert evidence is not None
        assert len([e for e in evidence.entities if "T" in e.split(":", 1)[1][:1]]) <= 3
        assert "agent:T" in evidence.entities  # the agent itself is never the one evicted
        assert stats.evicted_workflows == 7 and stats.evicted_agents >= 8 and stats.evicted_components > 0
    finally:
        stats.close()


_CHILD = """
import sys, time
from pathlib import Path
from otel_blame.processor.config import CrossRunConfig
from otel_blame.processor.cross_run import CrossRunStatistics
from otel_blame.trajectory import Outcome, Trajectory
stats = CrossRunStatistics(CrossRunConfig(), Path(sys.argv[1]))
steps = [{"agent": "A", "content": "x"}, {"agent": "B", "content": "y"}]
run = Trajectory.from_steps(steps, outcome=Outcome.FAILURE)
for number in range(200):
    stats.observe("svc/t", run, failed=number % 4 != 0, blamed_step=1)
print("counted", flush=True)
while True:
    stats.observe("svc/busy", run, failed=True)  # killed in the middle of these
"""


def test_survives_kill_9_and_restart(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "counted"
        time.sleep(0.3)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    stats = CrossRunStatistics(CrossRunConfig(), path)
    try:
        evidence = stats.evidence("svc/t", _run(["A", "B"]))
        assert evidence is not None
        assert (evidence.failing_runs, evidence.passing_runs) == (150, 50)
        assert evidence.entities["agent:B"].blamed == 150
        busy = stats.evidence("svc/busy", _run(["A", "B"]))
        assert busy is not None  # every committed run is whole: a run counts for all its components
        assert busy.entities["agent:A"].failing == busy.entities["agent:B"].failing == busy.failing_runs
        stats.observe("svc/t", _run(["A", "B"]), failed=False)  # and it keeps counting after a restart
        after = stats.evidence("svc/t", _run(["A"]))
        assert after is not None and after.passing_runs == 51
    finally:
        stats.close()


def test_config_is_validated() -> None:
    with pytest.raises(ConfigError, match="cross_run.max_workflows"):
        load_config(overrides={"cross_run": {"max_workflows": 0}}, environ={})
    with pytest.raises(ConfigError, match="cross_run.workflow_key"):
        load_config(environ={"OTEL_BLAME_CROSS_RUN__WORKFLOW_KEY": "trace"})
    assert load_config(environ={}).cross_run.enabled is False  # off by default: docs/benchmarks.md
    config = load_config(environ={"OTEL_BLAME_CROSS_RUN__ENABLED": "true"})
    assert config.cross_run.enabled is True


def _send(endpoint: str, spans) -> None:  # noqa: ANN001
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def test_the_processor_counts_successes_and_failures_and_writes_suspiciousness(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(cross_run={"enabled": True, "min_failing_runs": 2})
    sent = 0
    for _ in range(3):  # passing runs without the Critic, failing ones with it
        spans = record_agent_run([("Planner", "Plan: 6*7."), ("Solver", "The answer is 42.")], failed=False)
        _send(processor.grpc_endpoint, spans)
        sent += len(spans)
    for _ in range(3):
        spans = record_agent_run(
            [("Planner", "Plan: 6*7."), ("Solver", "The answer is 41."), ("Critic", "Looks right.")],
            failed=True,
        )
        _send(processor.grpc_endpoint, spans)
        sent += len(spans)
        sink.wait_for_spans(sent, timeout=10)  # one at a time: each sees the runs before it
    deadline = time.monotonic() + 10
    while processor.stats()["cross_run_observed_runs"] < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processor.stats()["cross_run_observed_runs"] == 6
    arrived = [record.span for record in sink.wait_for_spans(sent, timeout=10)]
    roots = [span for span in arrived if not span.parent_span_id]
    failed_roots = [
        attributes_to_dict(r.attributes) for r in roots if sc.BLAME_AGENT in attributes_to_dict(r.attributes)
    ]
    assert len(failed_roots) == 3
    # the first failing run had no failing runs before it; the third had two
    assert sc.BLAME_CROSS_RUN_SUSPICIOUSNESS not in failed_roots[0]
    last = failed_roots[-1]
    assert 0.0 < last[sc.BLAME_CROSS_RUN_SUSPICIOUSNESS] <= 1.0
    culprits = [
        attributes_to_dict(s.attributes)
        for s in arrived
        if attributes_to_dict(s.attributes).get(sc.BLAME_CULPRIT)
    ]
    assert culprits[-1][sc.BLAME_CROSS_RUN_SUSPICIOUSNESS] == last[sc.BLAME_CROSS_RUN_SUSPICIOUSNESS]
    assert (Path(processor.config.wal.dir) / "cross_run.sqlite").exists()


def test_disabled_cross_run_writes_nothing(sink, make_processor) -> None:  # noqa: ANN001
    processor = make_processor(cross_run={"enabled": False})
    spans = record_agent_run([("Planner", "Plan."), ("Solver", "The answer is 41.")], failed=True)
    _send(processor.grpc_endpoint, spans)
    arrived = [record.span for record in sink.wait_for_spans(len(spans), timeout=10)]
    root = next(attributes_to_dict(s.attributes) for s in arrived if not s.parent_span_id)
    assert sc.BLAME_AGENT in root and sc.BLAME_CROSS_RUN_SUSPICIOUSNESS not in root
    assert processor.stats()["cross_run_observed_runs"] == 0
    assert not (Path(processor.config.wal.dir) / "cross_run.sqlite").exists()


def test_successes_give_way_to_a_backlog(sink, make_processor) -> None:  # noqa: ANN001
    """With a backlog bound of 0 every success is skipped and counted; failures are still counted."""
    processor = make_processor(cross_run={"enabled": True, "success_backlog": 0})
    passed = record_agent_run([("Planner", "Plan: 6*7."), ("Solver", "The answer is 42.")], failed=False)
    _send(processor.grpc_endpoint, passed)
    failed = record_agent_run([("Planner", "Plan: 6*7."), ("Solver", "The answer is 41.")], failed=True)
    _send(processor.grpc_endpoint, failed)
    sink.wait_for_spans(len(passed) + len(failed), timeout=10)
    deadline = time.monotonic() + 10
    while processor.stats()["cross_run_observed_runs"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    stats = processor.stats()
    assert stats["cross_run_observed_runs"] == 1  # the failure
    assert stats["cross_run_skipped_traces"] == 1  # the success
