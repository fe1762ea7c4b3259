"""Cross-run statistics in the shared PostgreSQL store: two replicas that each see the runs their
trace ids route to (as the load-balancing exporter routes them) read the same evidence, and so the
same suspiciousness, as one processor that sees every run. Per-replica SQLite statistics do not.

Real PostgreSQL (Debian's server on loopback), two statistics objects on two connection pools
counting concurrently, against the SQLite statistics the processor keeps by default."""

from __future__ import annotations

import hashlib
import random
import threading
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from otel_blame.attribution.cross_run import CrossRunEvidence, combine, step_suspiciousness
from otel_blame.attribution.registry import create_method
from otel_blame.processor.config import CrossRunConfig
from otel_blame.processor.cross_run import CrossRunStatistics
from otel_blame.store.cross_run import SharedCrossRunStatistics
from otel_blame.trajectory import Outcome, Trajectory
from tests.postgres_cluster import empty_store_tables

pytest.importorskip("psycopg")

WORKFLOW = "checkout/refund"
RUNS = 240


@pytest.fixture
def clean_postgres(postgres_url: str) -> str:
    empty_store_tables(postgres_url)
    return postgres_url


def _engine(url: str):  # noqa: ANN202
    return create_engine(url.replace("postgresql://", "postgresql+psycopg://"), pool_pre_ping=True)


def _run(faulty: bool, failed: bool) -> Trajectory:
    """A refund desk: the researcher calls the flaky pricing API in the faulty runs."""
    steps = [
        {"agent": "triage", "content": "customer asks for a refund"},
        {"agent": "researcher", "content": "looking up the order"},
        {"agent": "researcher", "content": "price: 200", "kind": "tool", "tool_name": "pricing_api"}
        if faulty
        else {"agent": "researcher", "content": "price: 20", "kind": "tool", "tool_name": "order_db"},
        {"agent": "writer", "content": "refund drafted"},
        {"agent": "reviewer", "content": "looks fine"},
    ]
    return Trajectory.from_steps(steps, outcome=Outcome.FAILURE if failed else Outcome.SUCCESS)


def _history(seed: int = 7) -> list[tuple[str, Trajectory, bool, int | None]]:
    """Runs with random trace ids: faulty runs fail 90 % of the time, the others 10 %."""
    rng = random.Random(seed)
    runs = []
    for _ in range(RUNS):
        trace_id = f"{rng.getrandbits(128):032x}"
        faulty = rng.random() < 0.3
        failed = rng.random() < (0.9 if faulty else 0.1)
        blamed = (2 if faulty else 4) if failed else None
        runs.append((trace_id, _run(faulty, failed), failed, blamed))
    return runs


def _replica_of(trace_id: str, replicas: int = 2) -> int:
    """Which replica a trace routes to: a function of the trace id alone, as the exporter's ring is."""
    return int.from_bytes(hashlib.sha256(bytes.fromhex(trace_id)).digest()[:8], "big") % replicas


def _suspiciousness(evidence: CrossRunEvidence | None, probe: Trajectory) -> tuple[list[float], float | None]:
    """Every step's suspiciousness, and what the processor would write on the culprit span."""
    config = CrossRunConfig()
    attribution = create_method("heuristic").attribute(probe)
    combined = combine(
        probe,
        attribution,
        evidence,
        weight=config.weight,
        prior_runs=config.prior_runs,
        min_failing_runs=config.min_failing_runs,
    )
    steps = [step_suspiciousness(evidence, step) if evidence else 0.0 for step in probe.steps]
    return steps, combined.cross_run_suspiciousness


def test_two_replicas_on_postgres_see_what_one_replica_sees(clean_postgres: str, tmp_path: Path) -> None:
    history = _history()
    shares = [[run for run in history if _replica_of(run[0]) == replica] for replica in range(2)]
    assert all(len(share) > RUNS // 4 for share in shares), "the split left a replica idle"

    engines = [_engine(clean_postgres), _engine(clean_postgres)]
    shared = [SharedCrossRunStatistics(engine) for engine in engines]
    single = CrossRunStatistics(CrossRunConfig(), tmp_path / "single.sqlite")
    alone = [CrossRunStatistics(CrossRunConfig(), tmp_path / f"replica-{n}.sqlite") for n in range(2)]
    try:

        def count(replica: int) -> None:
            for _trace_id, trajectory, failed, blamed in shares[replica]:
                assert shared[replica].observe(WORKFLOW, trajectory, failed=failed, blamed_step=blamed)
                alone[replica].observe(WORKFLOW, trajectory, failed=failed, blamed_step=blamed)

        threads = [threading.Thread(target=count, args=(replica,)) for replica in range(2)]
        for thread in threads:
            thread.start()
        for _trace_id, trajectory, failed, blamed in history:
            single.observe(WORKFLOW, trajectory, failed=failed, blamed_step=blamed)
        for thread in threads:
            thread.join(timeout=120)

        for probe in (_run(faulty=True, failed=True), _run(faulty=False, failed=True)):
            truth = single.evidence(WORKFLOW, probe)
            assert truth is not None
            for replica in range(2):
                seen = shared[replica].evidence(WORKFLOW, probe)
                assert seen == truth  # every count, so every suspiciousness
                assert _suspiciousness(seen, probe) == _suspiciousness(truth, probe)
            # per-replica SQLite: each replica counts only its share of the runs
            for replica in range(2):
                own = alone[replica].evidence(WORKFLOW, probe)
                assert own is not None and own.failing_runs + own.passing_runs == len(shares[replica])
                assert own.failing_runs < truth.failing_runs
        assert shared[0].errors == shared[1].errors == 0
    finally:
        single.close()
        for stats in alone:
            stats.close()
        for engine in engines:
            engine.dispose()


def test_shared_statistics_keep_their_bounds(clean_postgres: str) -> None:
    engine = _engine(clean_postgres)
    stats = SharedCrossRunStatistics(
        engine, max_workflows=3, max_agents_per_workflow=4, max_components_per_agent=3
    )
    try:
        for number in range(10):
            stats.observe(f"svc/w{number}", _run(faulty=number % 2 == 0, failed=True), failed=True)
        assert stats.sizes()["workflows"] == 3
        assert stats.evidence("svc/w0", _run(True, True)) is None  # the least recently seen went first
        for number in range(12):
            agents = Trajectory.from_steps(
                [{"agent": f"agent{number}", "content": "x"}], outcome=Outcome.FAILURE
            )
            stats.observe("svc/w9", agents, failed=True)
        assert stats.sizes()["max_agents_in_a_workflow"] == 4
        tools = Trajectory.from_steps(
            [{"agent": "T", "content": "x", "kind": "tool", "tool_name": f"tool{n}"} for n in range(6)]
        )
        stats.observe("svc/w9", tools, failed=True)
        evidence = stats.evidence("svc/w9", tools)
        assert evidence is not None and "agent:T" in evidence.entities
        assert len([e for e in evidence.entities if e.split(":", 1)[1].startswith("T")]) <= 3
        assert stats.evicted_workflows == 7 and stats.evicted_agents >= 8 and stats.evicted_components > 0
    finally:
        engine.dispose()


def test_a_database_that_is_down_costs_the_evidence_not_the_blame() -> None:
    engine = _engine("postgresql://postgres@127.0.0.1:9/none")  # nothing listens on port 9
    stats = SharedCrossRunStatistics(engine)
    try:
        assert stats.observe(WORKFLOW, _run(True, True), failed=True, blamed_step=2) is False
        assert stats.evidence(WORKFLOW, _run(True, True)) is None
        assert stats.errors == 2
    finally:
        engine.dispose()
