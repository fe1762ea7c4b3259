"""Cross-run statistics shared by every replica: the pass/fail counts in the shared PostgreSQL store.

Behind the load-balancing exporter each replica sees only the runs whose trace ids route to it. With
the default statistics (SQLite next to each replica's write-ahead log, see
:mod:`otel_blame.processor.cross_run`) each replica counts its own share: about 1/N of the runs, so
the evidence reaches ``min_failing_runs`` N times later and counts ``F/(F + prior_runs)`` of its
weight with an F N times smaller. When the blame store is a shared PostgreSQL (``store.url``), the
counts live there instead, in two tables next to the failures, and every replica reads and writes
the same counts: each replica's evidence is what one processor that sees every run would have.

Same model and bounds as the SQLite statistics (least recently seen workflows, agents and
components evicted first; recency is a shared sequence, not the wall clock), same interface
(``observe``, ``evidence``, ``sizes``, ``close``). One transaction per run: ``INSERT ... ON CONFLICT
DO UPDATE`` increments, rows locked in one order (workflow, then components sorted) so concurrent
replicas do not deadlock on each other's runs; a transaction that still loses a deadlock or a
serialization race is retried. A database that fails (down, refusing) costs the evidence, not the
blame: the run is not counted (``observe`` answers False, counted as skipped) and a failed trace is
attributed from its own steps (``evidence`` answers None); ``errors`` counts both.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy import (
    BigInteger,
    Column,
    Engine,
    Index,
    MetaData,
    Sequence,
    String,
    Table,
    delete,
    func,
    select,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, ProgrammingError, SQLAlchemyError

from otel_blame.attribution.cross_run import (
    CrossRunEvidence,
    EntityCounts,
    agent_entity,
    run_entities,
    step_entities,
)
from otel_blame.trajectory import Trajectory

log = logging.getLogger(__name__)

metadata = MetaData()
clock = Sequence("otel_blame_cross_run_clock", metadata=metadata)
workflows = Table(
    "otel_blame_cross_run_workflows",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("key", String(1024), nullable=False, unique=True),
    Column("failing", BigInteger, nullable=False, default=0),
    Column("passing", BigInteger, nullable=False, default=0),
    Column("last_seen", BigInteger, nullable=False),
    Index("ix_otel_blame_cross_run_workflows_seen", "last_seen"),
)
components = Table(
    "otel_blame_cross_run_components",
    metadata,
    Column("workflow", BigInteger, primary_key=True),
    Column("entity", String(1024), primary_key=True),
    Column("agent", String(512), nullable=False),
    Column("failing", BigInteger, nullable=False, default=0),
    Column("passing", BigInteger, nullable=False, default=0),
    Column("blamed", BigInteger, nullable=False, default=0),
    Column("last_seen", BigInteger, nullable=False),
    Index("ix_otel_blame_cross_run_components_agent", "workflow", "agent", "last_seen"),
)


def _agent_of(entity: str) -> str:
    body = entity.split(":", 1)[1]
    return body if entity.startswith("agent:") else body.rsplit("/", 1)[0]


class SharedCrossRunStatistics:
    """Thread-safe (a connection pool); any number of replicas on one database."""

    def __init__(
        self,
        engine: Engine,
        *,
        max_workflows: int = 10_000,
        max_agents_per_workflow: int = 50,
        max_components_per_agent: int = 64,
    ) -> None:
        if engine.dialect.name != "postgresql":
            raise ValueError(f"shared cross-run statistics need PostgreSQL, not {engine.dialect.name}")
        self.engine = engine
        self.max_workflows = max_workflows
        self.max_agents_per_workflow = max_agents_per_workflow
        self.max_components_per_agent = max_components_per_agent
        self.evicted_workflows = 0
        self.evicted_agents = 0
        self.evicted_components = 0
        self.errors = 0  # runs not counted and evidence not read because the database failed
        self._warned_at = -60.0
        self._lock = threading.Lock()
        self._schema_ready = False
        try:
            self._ensure_schema()
        except OperationalError as error:  # unreachable: runs are attributed without it meanwhile
            log.warning("cross-run statistics: the shared store is unreachable at start (%s)", error)

    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        for attempt in range(3):  # replicas starting together may race to create the tables
            try:
                metadata.create_all(self.engine, checkfirst=True)
                break
            except (IntegrityError, ProgrammingError):
                if attempt == 2:
                    raise
                time.sleep(0.2 * (attempt + 1))
        self._schema_ready = True

    # -- writing ---------------------------------------------------------------------------------
    def observe(
        self, workflow: str, trajectory: Trajectory, *, failed: bool, blamed_step: int | None = None
    ) -> bool:
        """Count one run (all its components) in one transaction."""
        entities = sorted(run_entities(trajectory))
        blamed: set[str] = set()
        if failed and blamed_step is not None and 0 <= blamed_step < len(trajectory.steps):
            blamed = set(step_entities(trajectory.steps[blamed_step]))
        column = "failing" if failed else "passing"
        for attempt in range(5):
            try:
                self._ensure_schema()
                self._count(workflow, entities, blamed, column)
                return True
            except DBAPIError as error:  # a deadlock or serialization failure with another replica
                if attempt < 4 and getattr(error.orig, "sqlstate", None) in ("40P01", "40001"):
                    time.sleep(0.05 * (attempt + 1))
                    continue
                self._unavailable("could not count a run", error)
                return False
            except SQLAlchemyError as error:
                self._unavailable("could not count a run", error)
                return False
        return False

    def _unavailable(self, what: str, error: Exception) -> None:
        """The database is down or refused: the run is not counted / attributed from its own trace."""
        with self._lock:
            self.errors += 1
            warn = time.monotonic() - self._warned_at > 60
            if warn:
                self._warned_at = time.monotonic()
        if warn:
            log.warning("cross-run statistics (shared store): %s: %s", what, error)

    def _count(self, workflow: str, entities: list[str], blamed: set[str], column: str) -> None:
        with self.engine.begin() as connection:
            now = connection.execute(select(clock.next_value())).scalar_one()
            upsert = insert(workflows).values(key=workflow, **{column: 1}, last_seen=now)
            row = connection.execute(
                upsert.on_conflict_do_update(
                    index_elements=[workflows.c.key],
                    set_={column: workflows.c[column] + 1, "last_seen": upsert.excluded.last_seen},
                ).returning(workflows.c.id, workflows.c.failing + workflows.c.passing)
            ).one()
            workflow_id, runs = int(row[0]), int(row[1])
            if entities:
                rows = [
                    {
                        "workflow": workflow_id,
                        "entity": entity,
                        "agent": _agent_of(entity)[:512],
                        column: 1,
                        "blamed": int(entity in blamed),
                        "last_seen": now,
                    }
                    for entity in entities
                ]
                upsert = insert(components).values(rows)
                connection.execute(
                    upsert.on_conflict_do_update(
                        index_elements=[components.c.workflow, components.c.entity],
                        set_={
                            column: components.c[column] + 1,
                            "blamed": components.c.blamed + upsert.excluded.blamed,
                            "last_seen": upsert.excluded.last_seen,
                        },
                    )
                )
            self._bound_agents(connection, workflow_id)
            if runs == 1:
                self._bound_workflows(connection)

    def _bound_agents(self, connection, workflow_id: int) -> None:  # noqa: ANN001
        limit = self.max_components_per_agent
        mine = components.c.workflow == workflow_id
        crowded = connection.execute(
            select(components.c.agent, func.count())
            .where(mine)
            .group_by(components.c.agent)
            .having(func.count() > limit)
        ).all()
        for agent, count in crowded:
            oldest = (
                select(components.c.entity)
                .where(mine, components.c.agent == agent, components.c.entity != agent_entity(agent))
                .order_by(components.c.last_seen)
                .limit(count - limit)
            )
            removed = connection.execute(delete(components).where(mine, components.c.entity.in_(oldest)))
            with self._lock:
                self.evicted_components += removed.rowcount
        agents = mine & components.c.entity.like("agent:%")
        known = connection.execute(select(func.count()).select_from(components).where(agents)).scalar_one()
        excess = int(known) - self.max_agents_per_workflow
        if excess > 0:
            stale = connection.execute(
                select(components.c.agent)
                .where(agents)
                .order_by(components.c.last_seen, components.c.agent)
                .limit(excess)
            ).scalars()
            stale = list(stale)
            connection.execute(delete(components).where(mine, components.c.agent.in_(stale)))
            with self._lock:
                self.evicted_agents += len(stale)

    def _bound_workflows(self, connection) -> None:  # noqa: ANN001
        total = connection.execute(select(func.count()).select_from(workflows)).scalar_one()
        excess = int(total) - self.max_workflows
        if excess <= 0:
            return
        stale = list(
            connection.execute(select(workflows.c.id).order_by(workflows.c.last_seen).limit(excess)).scalars()
        )
        connection.execute(delete(components).where(components.c.workflow.in_(stale)))
        connection.execute(delete(workflows).where(workflows.c.id.in_(stale)))
        with self._lock:
            self.evicted_workflows += len(stale)

    # -- reading ---------------------------------------------------------------------------------
    def evidence(self, workflow: str, trajectory: Trajectory) -> CrossRunEvidence | None:
        """The counts of the trace's own components in its workflow; None for a workflow never seen."""
        try:
            return self._evidence(workflow, trajectory)
        except SQLAlchemyError as error:
            self._unavailable("could not read the evidence", error)
            return None

    def _evidence(self, workflow: str, trajectory: Trajectory) -> CrossRunEvidence | None:
        wanted = sorted(run_entities(trajectory))
        self._ensure_schema()
        with self.engine.connect() as connection:
            row = connection.execute(
                select(workflows.c.id, workflows.c.failing, workflows.c.passing).where(
                    workflows.c.key == workflow
                )
            ).first()
            if row is None:
                return None
            found: dict[str, EntityCounts] = {}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                for entity, failing, passing, blamed in connection.execute(
                    select(
                        components.c.entity, components.c.failing, components.c.passing, components.c.blamed
                    ).where(components.c.workflow == row[0], components.c.entity.in_(chunk))
                ):
                    found[entity] = EntityCounts(
                        failing=int(failing), passing=int(passing), blamed=int(blamed)
                    )
        return CrossRunEvidence(
            workflow=workflow, failing_runs=int(row[1]), passing_runs=int(row[2]), entities=found
        )

    def sizes(self) -> dict[str, int]:
        """How many workflows and components are kept (for stats and the bounds' tests)."""
        with self.engine.connect() as connection:
            count_workflows = connection.execute(select(func.count()).select_from(workflows)).scalar_one()
            count_components = connection.execute(select(func.count()).select_from(components)).scalar_one()
            per_workflow = (
                select(func.count().label("n"))
                .where(components.c.entity.like("agent:%"))
                .group_by(components.c.workflow)
                .subquery()
            )
            agents = connection.execute(select(func.coalesce(func.max(per_workflow.c.n), 0))).scalar_one()
        return {
            "workflows": int(count_workflows),
            "components": int(count_components),
            "max_agents_in_a_workflow": int(agents),
        }

    def close(self) -> None:
        """The engine belongs to the blame store, which disposes of it."""
