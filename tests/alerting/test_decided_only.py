"""Counts of blames count decided verdicts only (issue 27 item 3), unless asked to count all: the
culprit counters on ``/metrics``, the repeated-culprit alert, the blame store's counters and the
cross-run statistics' blamed steps. An undecided verdict is a ranked guess: paging a team on it is
what a user who stops trusting verdicts remembers."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from otel_blame.alerting.metrics import CulpritMetrics
from otel_blame.alerting.repeated import RepeatedCulpritRule
from otel_blame.attribution.result import Attribution
from otel_blame.processor.config import AlertingConfig, CrossRunConfig
from otel_blame.processor.counters import Counters
from otel_blame.processor.cross_run import CrossRunStatistics, workflow_key
from otel_blame.processor.listeners import AlertingListener, CrossRunCounter, TraceVerdict
from otel_blame.store import CountAs, StoreConfig, open_store
from otel_blame.store.records import build_run
from otel_blame.trajectory import Outcome, Trajectory

AGENTS = ["planner", "coder", "reviewer"]


def _verdict(trace: int, *, decided: bool) -> TraceVerdict:
    trajectory = Trajectory.from_steps(
        [{"agent": agent, "content": f"{agent} says {trace}"} for agent in AGENTS], outcome=Outcome.FAILURE
    )
    attribution = Attribution(
        agent="coder",
        step=1,
        confidence=0.7 if decided else 0.2,
        decided=decided,
        reason="r",
        method="ranker",
    )
    return TraceVerdict(
        trace_id=f"{trace:032x}",
        outcome=Outcome.FAILURE.value,
        service="shop",
        workflow_service="shop",
        trajectory=trajectory,
        attribution=attribution,
    )


def _blames(metrics: CulpritMetrics) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics.render()):
        for sample in family.samples:
            if sample.name in ("otel_blame_attributions_total", "otel_blame_undecided_attributions_total"):
                out[sample.name] = out.get(sample.name, 0) + sample.value
    return out


@pytest.mark.parametrize("count_undecided", [False, True])
def test_the_culprit_counters_count_decided_verdicts_unless_asked(count_undecided: bool) -> None:
    metrics = CulpritMetrics(count_undecided=count_undecided)
    for trace, decided in enumerate((True, False, False)):
        metrics.record_attribution(_verdict(trace, decided=decided).attribution, "shop")
    blames = _blames(metrics)
    assert blames["otel_blame_attributions_total"] == (3 if count_undecided else 1)
    assert blames["otel_blame_undecided_attributions_total"] == 2  # said apart either way


@pytest.mark.parametrize("count_undecided", [False, True])
def test_the_repeated_culprit_alert_fires_on_decided_verdicts_unless_asked(count_undecided: bool) -> None:
    counters = Counters()
    config = AlertingConfig(
        repeated_culprit=RepeatedCulpritRule(threshold=3), count_undecided=count_undecided
    )
    listener = AlertingListener(config, counters, notifier=None)
    listener.on_verdicts([_verdict(trace, decided=False) for trace in range(5)])
    assert counters.snapshot()["alerts"] == (1 if count_undecided else 0)
    listener.on_verdicts([_verdict(trace, decided=True) for trace in range(5, 8)])
    assert counters.snapshot()["alerts"] == 1  # three decided blames fire it (or it already fired)


@pytest.mark.parametrize("count_undecided", [False, True])
def test_cross_run_statistics_count_an_undecided_step_as_blamed_only_when_asked(
    count_undecided: bool, tmp_path: Path
) -> None:
    config = CrossRunConfig(enabled=True, count_undecided=count_undecided)
    statistics = CrossRunStatistics(config, tmp_path / "cross_run.sqlite")
    try:
        counter = CrossRunCounter(statistics, config, Counters())
        undecided, decided = _verdict(1, decided=False), _verdict(2, decided=True)
        counter.on_verdicts([undecided])
        key = workflow_key("shop", undecided.trajectory, config.workflow_key)
        evidence = statistics.evidence(key, undecided.trajectory)
        assert evidence is not None and evidence.failing_runs == 1  # the failing run counts either way
        blamed = {entity: counts.blamed for entity, counts in evidence.entities.items() if counts.blamed}
        assert bool(blamed) is count_undecided
        counter.on_verdicts([decided])
        evidence = statistics.evidence(key, decided.trajectory)
        assert max(counts.blamed for counts in evidence.entities.values()) == (2 if count_undecided else 1)
    finally:
        statistics.close()


@pytest.mark.parametrize("count_undecided", [False, True])
def test_the_blame_store_counts_decided_verdicts_unless_asked(count_undecided: bool, tmp_path: Path) -> None:
    store = open_store(StoreConfig(path=tmp_path / "store.sqlite3"))
    try:
        count_as = CountAs("replica", count_undecided=count_undecided)
        for trace, decided in enumerate((True, False, False)):
            verdict = _verdict(trace, decided=decided)
            run = build_run(
                verdict.trajectory, verdict.attribution, trace_id=verdict.trace_id, service="shop"
            )
            store.add(run, count_as=count_as)
        [series] = store.blame_counters("replica")
        assert series.blames == (3 if count_undecided else 1)
        assert store.count() == 3  # every verdict is kept, for its page
        assert store.culprits(3600, count_undecided=count_undecided).total == series.blames
    finally:
        store.close()
