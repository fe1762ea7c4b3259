"""The cross-run statistics: durable, bounded per-workflow counts of passing and failing runs.

For each workflow (service and task name) and each component of its runs (agent, agent x tool,
agent x kind of step; see :mod:`otel_blame.attribution.cross_run`): in how many failing and passing
runs it appeared and how often it was blamed. The analyser feeds it every analysed run, failed or
not (successful traces too, see ``TraceAnalyser.observe``), and asks it for the evidence of a failed
trace's workflow before attributing; the attribution itself stays pure.

SQLite next to the write-ahead log, WAL journal, one transaction per run: a run is counted fully or
not at all, and what was committed survives ``kill -9`` and a restart. Bounded: at most
``max_workflows`` workflows (the least recently seen is evicted with its counts), at most
``max_agents_per_workflow`` agents per workflow and ``max_components_per_agent`` components per
agent (the least recently seen go first). Recency is a run counter kept in the database, not the
wall clock.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
from pathlib import Path

from otel_blame.attribution.cross_run import (
    CrossRunEvidence,
    EntityCounts,
    agent_entity,
    run_entities,
    step_entities,
)
from otel_blame.processor.config import CrossRunConfig
from otel_blame.trajectory import Trajectory

log = logging.getLogger(__name__)

FILE_NAME = "cross_run.sqlite"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS workflows (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    failing INTEGER NOT NULL DEFAULT 0,
    passing INTEGER NOT NULL DEFAULT 0,
    last_seen INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS workflows_by_last_seen ON workflows (last_seen);
CREATE TABLE IF NOT EXISTS components (
    workflow INTEGER NOT NULL,
    entity TEXT NOT NULL,
    agent TEXT NOT NULL,
    failing INTEGER NOT NULL DEFAULT 0,
    passing INTEGER NOT NULL DEFAULT 0,
    blamed INTEGER NOT NULL DEFAULT 0,
    last_seen INTEGER NOT NULL,
    PRIMARY KEY (workflow, entity)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS components_by_agent ON components (workflow, agent, last_seen);
"""


def workflow_key(service: str, trajectory: Trajectory, mode: str = "service_and_task") -> str:
    """Which runs are runs of the same workflow: the service, and (by default) the task's workflow (its
    declared name, else its root span's; not a name read from one run's input)."""
    if mode == "service":
        return service or "unknown_service"
    return f"{service or 'unknown_service'}/{trajectory.task.workflow or trajectory.task.name}"


def _agent_of(entity: str) -> str:
    body = entity.split(":", 1)[1]
    return body if entity.startswith("agent:") else body.rsplit("/", 1)[0]


class CrossRunStatistics:
    """Thread-safe; one SQLite connection behind a lock (one short transaction per run)."""

    def __init__(self, config: CrossRunConfig, path: Path, *, min_free_bytes: int = 0) -> None:
        self.config = config
        self.path = path
        self.min_free_bytes = min_free_bytes  # the write-ahead log's reserve: never eaten into
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # committed = survives a process kill
        self._db.execute(f"PRAGMA journal_size_limit={4 * 1024 * 1024}")
        self._db.executescript(_SCHEMA)
        self.evicted_workflows = 0
        self.evicted_agents = 0
        self.evicted_components = 0

    # -- writing ---------------------------------------------------------------------------------
    def observe(
        self, workflow: str, trajectory: Trajectory, *, failed: bool, blamed_step: int | None = None
    ) -> bool:
        """Count one run (all its components) in one transaction; False when skipped because the disk
        is down to ``min_free_bytes`` (the write-ahead log's reserve comes first)."""
        if self.min_free_bytes and shutil.disk_usage(self.path.parent).free < 2 * self.min_free_bytes:
            return False
        entities = run_entities(trajectory)
        blamed: set[str] = set()
        if failed and blamed_step is not None and 0 <= blamed_step < len(trajectory.steps):
            blamed = set(step_entities(trajectory.steps[blamed_step]))
        column = "failing" if failed else "passing"
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                clock = self._tick()
                row = db.execute(
                    f"INSERT INTO workflows (key, {column}, last_seen) VALUES (?, 1, ?) "
                    f"ON CONFLICT (key) DO UPDATE SET {column} = {column} + 1, "
                    "last_seen = excluded.last_seen "
                    "RETURNING id, failing + passing",
                    (workflow, clock),
                ).fetchone()
                workflow_id, runs = int(row[0]), int(row[1])
                db.executemany(
                    f"INSERT INTO components (workflow, entity, agent, {column}, blamed, last_seen) "
                    "VALUES (?, ?, ?, 1, ?, ?) ON CONFLICT (workflow, entity) DO UPDATE SET "
                    f"{column} = {column} + 1, blamed = blamed + excluded.blamed, "
                    "last_seen = excluded.last_seen",
                    [
                        (workflow_id, entity, _agent_of(entity), int(entity in blamed), clock)
                        for entity in sorted(entities)
                    ],
                )
                self._bound_agents(workflow_id)
                if runs == 1:
                    self._bound_workflows()
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return True

    def _tick(self) -> int:
        row = self._db.execute(
            "INSERT INTO meta (key, value) VALUES ('clock', 1) "
            "ON CONFLICT (key) DO UPDATE SET value = value + 1 RETURNING value"
        ).fetchone()
        return int(row[0])

    def _bound_agents(self, workflow_id: int) -> None:
        db = self._db
        limit = self.config.max_components_per_agent
        crowded = db.execute(
            "SELECT agent, COUNT(*) FROM components WHERE workflow = ? GROUP BY agent HAVING COUNT(*) > ?",
            (workflow_id, limit),
        ).fetchall()
        for agent, count in crowded:
            removed = db.execute(
                "DELETE FROM components WHERE workflow = ? AND entity IN (SELECT entity FROM components "
                "WHERE workflow = ? AND agent = ? AND entity != ? ORDER BY last_seen LIMIT ?)",
                (workflow_id, workflow_id, agent, agent_entity(agent), count - limit),
            ).rowcount
            self.evicted_components += removed
        known = db.execute(
            "SELECT COUNT(*) FROM components WHERE workflow = ? AND entity LIKE 'agent:%'", (workflow_id,)
        ).fetchone()[0]
        excess = known - self.config.max_agents_per_workflow
        if excess > 0:
            stale = [
                row[0]
                for row in db.execute(
                    "SELECT agent FROM components WHERE workflow = ? AND entity LIKE 'agent:%' "
                    "ORDER BY last_seen, agent LIMIT ?",
                    (workflow_id, excess),
                )
            ]
            for agent in stale:
                db.execute("DELETE FROM components WHERE workflow = ? AND agent = ?", (workflow_id, agent))
            self.evicted_agents += len(stale)

    def _bound_workflows(self) -> None:
        db = self._db
        excess = db.execute("SELECT COUNT(*) FROM workflows").fetchone()[0] - self.config.max_workflows
        if excess <= 0:
            return
        stale = [
            row[0] for row in db.execute("SELECT id FROM workflows ORDER BY last_seen LIMIT ?", (excess,))
        ]
        for workflow_id in stale:
            db.execute("DELETE FROM components WHERE workflow = ?", (workflow_id,))
            db.execute("DELETE FROM workflows WHERE id = ?", (workflow_id,))
        self.evicted_workflows += len(stale)

    # -- reading ---------------------------------------------------------------------------------
    def evidence(self, workflow: str, trajectory: Trajectory) -> CrossRunEvidence | None:
        """The counts of the trace's own components in its workflow; None for a workflow never seen."""
        wanted = sorted(run_entities(trajectory))
        with self._lock:
            row = self._db.execute(
                "SELECT id, failing, passing FROM workflows WHERE key = ?", (workflow,)
            ).fetchone()
            if row is None:
                return None
            found: dict[str, EntityCounts] = {}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for entity, failing, passing, blamed in self._db.execute(
                    f"SELECT entity, failing, passing, blamed FROM components WHERE workflow = ? "
                    f"AND entity IN ({marks})",
                    (row[0], *chunk),
                ):
                    found[entity] = EntityCounts(failing=failing, passing=passing, blamed=blamed)
        return CrossRunEvidence(workflow=workflow, failing_runs=row[1], passing_runs=row[2], entities=found)

    def sizes(self) -> dict[str, int]:
        """How many workflows and components are kept (for stats and the bounds' tests)."""
        with self._lock:
            workflows = self._db.execute("SELECT COUNT(*) FROM workflows").fetchone()[0]
            components = self._db.execute("SELECT COUNT(*) FROM components").fetchone()[0]
            agents = self._db.execute(
                "SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM components "
                "WHERE entity LIKE 'agent:%' GROUP BY workflow)"
            ).fetchone()[0]
        return {"workflows": workflows, "components": components, "max_agents_in_a_workflow": agents}

    def close(self) -> None:
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error:
                log.exception("closing the cross-run statistics failed")
