"""The blame store on SQLite: writing, filters, paging, culprit counts, bounds and restarts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from otel_blame.alerting.metrics import CulpritMetrics
from otel_blame.attribution.result import Attribution
from otel_blame.store import CountAs, StoreConfig, open_store
from otel_blame.store.records import StoredRun
from tests.store.runs import attributed_runs, hostile_run


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "wal" / "blame-store.sqlite3"


def test_a_stored_run_comes_back_whole(store_path: Path, now: float) -> None:
    store = open_store(StoreConfig(path=store_path))
    [run] = attributed_runs(1, start=now, spacing=1, decided=True)
    store.add(run)
    again = store.run(run.trace_id)
    assert again == run
    assert again.trajectory.steps and len(again.scores) == len(again.trajectory.steps)
    assert again.scores[again.step] > 0
    assert store.run("f" * 32) is None


def test_the_trajectory_is_kept_redacted(store_path: Path, now: float) -> None:
    store = open_store(StoreConfig(path=store_path))
    run = hostile_run("a" * 32, now)
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
    steps = list(run.trajectory.steps)
    steps[0] = steps[0].model_copy(update={"content": f"use key {secret} and mail bob@example.com"})
    from otel_blame.attribution.result import Attribution
    from otel_blame.store.records import build_run

    trajectory = run.trajectory.model_copy(update={"steps": steps})
    attribution = Attribution(agent="planner", step=0, confidence=0.5, reason="r", method="heuristic")
    store.add(build_run(trajectory, attribution, trace_id="b" * 32))
    kept = store.run("b" * 32).trajectory.steps[0].content
    assert secret not in kept and "bob@example.com" not in kept and "REDACTED" in kept


def test_a_later_verdict_replaces_the_earlier_one(store_path: Path, now: float) -> None:
    store = open_store(StoreConfig(path=store_path))
    [run] = attributed_runs(1, start=now, spacing=1, decided=True)
    store.add(run)
    store.add(run.model_copy(update={"agent": "someone_else", "method": "all_at_once"}))
    assert store.count() == 1
    assert store.run(run.trace_id).agent == "someone_else"


def test_filters_and_paging_newest_first(store_path: Path, now: float) -> None:
    store = open_store(StoreConfig(path=store_path))
    runs = attributed_runs(12, start=now - 1200, spacing=100, services=("checkout", "search"), decided=True)
    for run in runs:
        store.add(run)
    page = store.failures(limit=5)
    assert page.total == 12 and [f.trace_id for f in page.failures] == [r.trace_id for r in runs[::-1][:5]]
    second = store.failures(limit=5, offset=5)
    assert [f.trace_id for f in second.failures] == [r.trace_id for r in runs[::-1][5:10]]
    assert store.failures(limit=5, offset=10).failures[-1].trace_id == runs[0].trace_id
    search = store.failures(service="search")
    assert search.total == 6 and {f.service for f in search.failures} == {"search"}
    agent = runs[3].agent
    assert {f.agent for f in store.failures(agent=agent).failures} == {agent}
    assert store.failures(agent=agent).total == sum(r.agent == agent for r in runs)
    recent = store.failures(since=now - 450)
    assert recent.total == sum(r.attributed_at >= now - 450 for r in runs) == 4
    assert store.failures(method="heuristic").total == 12
    assert store.failures(method="all_at_once").total == 0


def test_a_fallback_counts_under_its_base_method(store_path: Path, now: float) -> None:
    store = open_store(StoreConfig(path=store_path))
    [run] = attributed_runs(1, start=now, spacing=1, decided=True)
    store.add(run.model_copy(update={"method": "heuristic(fallback:all_at_once)"}))
    assert store.failures(method="heuristic").total == 1
    assert store.culprits(3600, now=now + 1).culprits[0].methods == {"heuristic": 1}


def test_culprit_counts_and_buckets(store_path: Path, now: float) -> None:
    store = open_store(StoreConfig(path=store_path))
    runs = attributed_runs(10, start=now - 3000, spacing=300, decided=True)
    for run in runs:
        store.add(run)
    report = store.culprits(3600, now=now, buckets=12)
    expected: dict[str, int] = {}
    for run in runs:
        expected[run.agent] = expected.get(run.agent, 0) + 1
    assert {c.agent: c.count for c in report.culprits} == expected
    assert report.total == 10
    counts = [c.count for c in report.culprits]
    assert counts == sorted(counts, reverse=True)
    assert len(report.bucket_starts) == 12
    for series in report.series:
        assert sum(series.counts) == expected[series.agent]
    # one blame every 300 s into 300 s buckets: every bucket from the first blame on holds exactly one
    per_bucket = [sum(s.counts[i] for s in report.series) for i in range(12)]
    assert sum(per_bucket) == 10 and max(per_bucket) == 1
    short = store.culprits(700, now=now)
    assert short.total == sum(r.attributed_at >= now - 700 for r in runs)


def test_restart_keeps_everything(store_path: Path, now: float) -> None:
    runs = attributed_runs(5, start=now - 50, spacing=10, decided=True)
    store = open_store(StoreConfig(path=store_path))
    for run in runs:
        store.add(run)
    store.close()
    reopened = open_store(StoreConfig(path=store_path))
    assert reopened.count() == 5
    assert reopened.run(runs[2].trace_id) == runs[2]
    assert reopened.culprits(3600, now=now).total == 5


def test_age_bound_drops_old_failures(store_path: Path, now: float) -> None:
    store = open_store(StoreConfig(path=store_path, max_age_seconds=3600))
    old = attributed_runs(3, start=now - 10_000, spacing=10, decided=True)
    fresh = attributed_runs(6, start=now - 100, spacing=10, decided=True)[3:]
    for run in [*old, *fresh]:
        store.add(
            run.model_copy(update={"trace_id": f"{run.trace_id[:-4]}{int(run.attributed_at) % 9999:04d}"})
        )
    assert store.count() == 6  # bounds are checked every prune_every writes, and on open
    assert store.prune(now=now) == 3
    assert store.count() == 3
    store.close()
    for run in old:
        run_copy: StoredRun = run.model_copy(
            update={"trace_id": "c" * 28 + f"{int(run.attributed_at) % 9999:04d}"}
        )
        open_store(StoreConfig(path=store_path, max_age_seconds=3600)).add(run_copy)
    # opening prunes too
    assert open_store(StoreConfig(path=store_path, max_age_seconds=3600)).count() == 3


def test_size_bound_drops_the_oldest_first(store_path: Path, now: float) -> None:
    runs = attributed_runs(20, start=now - 2000, spacing=100, decided=True)
    sizes = [len(run.model_dump_json().encode()) for run in runs]
    budget = sum(sizes[-8:])  # room for the newest eight
    store = open_store(StoreConfig(path=store_path, max_bytes=budget, prune_every=1))
    for run in runs:
        store.add(run)
    kept = [f.trace_id for f in store.failures(limit=100).failures]
    assert kept == [r.trace_id for r in runs[::-1][:8]]
    store.close()
    assert open_store(StoreConfig(path=store_path, max_bytes=budget)).count() == 8


def test_the_default_file_sits_next_to_the_wal(tmp_path: Path, now: float) -> None:
    config = StoreConfig()
    assert config.sqlite_path(tmp_path / "wal") == tmp_path / "wal" / "blame-store.sqlite3"
    store = open_store(config, wal_dir=tmp_path / "wal")
    store.add(attributed_runs(1, start=now, spacing=1, decided=True)[0])
    assert (tmp_path / "wal" / "blame-store.sqlite3").exists()


def test_blames_are_counted_per_replica_and_the_counters_never_go_down(store_path: Path, now: float) -> None:
    store = open_store(StoreConfig(path=store_path, max_age_seconds=3600))
    runs = attributed_runs(
        6, start=now - 7200, spacing=10, decided=True
    )  # past the age bound: the next prune drops them
    mine, theirs = CountAs("replica-a"), CountAs("replica-b")
    for run in runs[:4]:
        store.add(run, count_as=mine)
    store.add(runs[4].model_copy(update={"method": "heuristic(fallback:all_at_once)"}), count_as=theirs)
    store.add(runs[5])  # kept for the UI, counted on no replica's counters (e.g. an import)
    expected: dict[tuple[str, str, str], int] = {}
    for run in runs[:4]:
        key = (run.service, run.agent, "heuristic")
        expected[key] = expected.get(key, 0) + 1
    assert {(s.service, s.agent, s.method): s.blames for s in store.blame_counters("replica-a")} == expected
    assert [(s.agent, s.method, s.blames, s.fallbacks) for s in store.blame_counters("replica-b")] == [
        (runs[4].agent, "heuristic", 1, 1)
    ]
    # a later verdict replaces the stored failure but is one more blame on the counter
    store.add(runs[0], count_as=mine)
    assert store.count() == 6
    assert sum(s.blames for s in store.blame_counters("replica-a")) == 5
    # the age bound deletes failures, never counts: a Prometheus counter must not go backwards
    assert store.prune(now=now) == 6
    assert sum(s.blames for s in store.blame_counters("replica-a")) == 5
    store.close()
    # the counters survive a restart (the metric continues instead of resetting)
    again = open_store(StoreConfig(path=store_path, max_age_seconds=3600))
    assert sum(s.blames for s in again.blame_counters("replica-a")) == 5
    # counters no blame touched within the age bound go with it
    again.prune(now=time.time() + 3700)
    assert again.blame_counters("replica-a") == []


def test_counter_labels_are_bounded_like_the_metric(store_path: Path, now: float) -> None:
    store = open_store(StoreConfig(path=store_path))
    [run] = attributed_runs(1, start=now, spacing=1, decided=True)
    bound = CountAs("replica-a", max_agents=2)
    for position, agent in enumerate(["a", "b", "c", "d", "a"]):
        store.add(run.model_copy(update={"agent": agent, "trace_id": f"{position + 1:032x}"}), count_as=bound)
    memory = CulpritMetrics(max_agents=2)
    for agent in ["a", "b", "c", "d", "a"]:
        blame = Attribution(
            agent=agent, step=run.step, confidence=run.confidence, reason="r", method=run.method, decided=True
        )
        memory.record_attribution(blame, run.service)
    assert [(s.agent, s.blames) for s in store.blame_counters("replica-a")] == [
        ("a", 2),
        ("b", 1),
        ("other", 2),
    ]
    assert memory.attributions() == {(run.service, "a"): 2, (run.service, "b"): 1, (run.service, "other"): 2}
    # the failures keep the real names; only the counter labels are bounded
    assert store.failures(agent="d").total == 1
