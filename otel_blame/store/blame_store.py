"""Writing and reading attributed failures, SQLite or PostgreSQL through the same SQLAlchemy Core code.

Why SQLAlchemy Core (not the ORM, not raw DB-API): the two databases differ in parameter style,
auto-increment, upsert and connection handling; Core gives one table definition and one set of
bound-parameter queries for both, plus a connection pool for PostgreSQL, without an object layer
the store does not need. Each record is kept whole as JSON (``record``) next to the columns the
queries filter and group on.

The store also keeps the culprit counters a processor serves on ``/metrics``
(``otel_blame_culprit_counts``): :meth:`BlameStore.add` with ``count_as`` increments the replica's
counter row in the same transaction that keeps the failure, and :meth:`BlameStore.blame_counters`
is what a scrape reads. One write, one record of each blame, for the UI, the API and the metrics.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
    delete,
    event,
    false,
    func,
    insert,
    inspect,
    select,
    text,
    true,
    update,
)
from sqlalchemy.exc import DisconnectionError, IntegrityError, OperationalError, ProgrammingError

from otel_blame.alerting.metrics import BlameSeries, CulpritLabels, counted_agent, culprit_labels
from otel_blame.attribution.known_answer import same_agent
from otel_blame.patterns import PatternDefinition, PatternReport, PatternRun, build_report
from otel_blame.store.config import StoreConfig
from otel_blame.store.patterns import definition_of, definition_row, keep_patterns
from otel_blame.store.records import (
    CulpritCount,
    CulpritReport,
    CulpritSeries,
    FailurePage,
    FailureSummary,
    StoredRun,
    base_method,
)
from otel_blame.store.schema import culprit_counts, failures, metadata, patterns

log = logging.getLogger(__name__)

MAX_PAGE = 500
_IN_CHUNK = 500  # trace ids per ``IN (...)`` (SQLite's bound on parameters is 999 in old builds)
_SUMMARY_COLUMNS = (
    failures.c.trace_id,
    failures.c.service,
    failures.c.task,
    failures.c.outcome,
    failures.c.agent,
    failures.c.step,
    failures.c.confidence,
    failures.c.decided,
    failures.c.reason,
    failures.c.method,
    failures.c.model,
    failures.c.attributed_at_ms,
    failures.c.steps,
    failures.c.source,
    failures.c.pattern,
)


@dataclass(frozen=True)
class CountAs:
    """Whose culprit counters a kept failure increments: the replica's name, the bound on distinct
    (service, agent) pairs past which agents are counted as ``other`` (as the metric labels them),
    and whether undecided verdicts count (``alerting.count_undecided``; by default they do not)."""

    replica: str
    max_agents: int = 500
    count_undecided: bool = False

    def counts(self, run: StoredRun) -> bool:
        """Whether this blame goes on the culprit counters."""
        return run.decided or self.count_undecided


def _row(run: StoredRun) -> dict[str, Any]:
    """The table row of one failure: the columns queried, and the whole record as JSON."""
    record = run.model_dump_json()
    return {
        "trace_id": run.trace_id.lower(),
        "service": run.service[:256],
        "task": run.task[:512],
        "outcome": run.outcome,
        "agent": run.agent[:256],
        "step": run.step,
        "confidence": run.confidence,
        "decided": run.decided,
        "reason": run.reason,
        "method": run.method[:256],
        "method_base": base_method(run.method)[:128],
        "model": run.model,
        "attributed_at_ms": int(run.attributed_at * 1000),
        "steps": run.steps,
        "size_bytes": len(record.encode("utf-8")),
        "record": record,
        "source": run.source[:512],
        "pattern": run.pattern,
    }


def _engine_url(url: str) -> str:
    """``postgresql://`` and ``postgres://`` mean the psycopg 3 driver."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path`` now, or None when there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _sqlite_engine(path: Path) -> Engine:
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{path}")

    @event.listens_for(engine, "connect")
    def _pragmas(connection, record) -> None:  # noqa: ANN001
        record.info["file"] = _file_identity(path)
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # FULL: a blame is kept before its trace's spans leave (and their log rows are deleted), so
        # it must survive what the log survives; one fsync per batch of blames
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA busy_timeout=5000")
        cursor.close()

    @event.listens_for(engine, "checkout")
    def _same_file(_connection, record, _proxy) -> None:  # noqa: ANN001
        """A pooled connection to a file that was since deleted or replaced (a demo run, a restore)
        reads the old file: the pool drops it and connects to the file at the path now."""
        if record.info.get("file") != _file_identity(path):
            raise DisconnectionError(f"{path} was replaced; reconnecting")

    return engine


class BlameStore:
    """Thread-safe. ``add`` keeps a failure (replacing an earlier verdict for the same trace);
    the readers answer the API and the pages. Bounds (age, bytes) are enforced on open and every
    ``prune_every`` writes."""

    def __init__(self, engine: Engine, config: StoreConfig | None = None) -> None:
        self.engine = engine
        self.config = config or StoreConfig()
        self._writes = 0
        self._lock = threading.Lock()
        self._schema_ready = False
        database = engine.url.database if engine.dialect.name == "sqlite" else None
        self._file = Path(database) if database and database != ":memory:" else None
        self._file_seen: tuple[int, int] | None = None
        try:
            self._ensure_schema()
        except OperationalError as error:  # unreachable: start anyway, blames wait in the outbox
            log.warning("blame store: unreachable at start (%s); tables are created when it answers", error)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def _ensure_schema(self) -> None:
        """Create the tables (and enforce the bounds) on first contact with the database, and again
        when its SQLite file was replaced since (a demo run, a restore): the store then reads the
        file now at its path, not the one it opened (whose pooled connections the engine drops)."""
        if self._schema_ready and self._file is not None and _file_identity(self._file) != self._file_seen:
            log.info("blame store: %s was replaced; reading the new file", self._file)
            self._schema_ready = False
        if self._schema_ready:
            return
        self._create_schema()
        self._file_seen = _file_identity(self._file) if self._file is not None else None
        self._schema_ready = True
        self.prune()

    def _create_schema(self) -> None:
        # Two replicas starting together against one PostgreSQL may both try to create the table.
        for attempt in range(3):
            try:
                metadata.create_all(self.engine, checkfirst=True)
                self._add_missing_columns()
                return
            except (IntegrityError, ProgrammingError, OperationalError):
                if attempt == 2:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def _add_missing_columns(self) -> None:
        """A store made before a column existed gets it (``create_all`` makes only missing tables)."""
        present = {column["name"] for column in inspect(self.engine).get_columns(failures.name)}
        yes = "1" if self.dialect == "sqlite" else "TRUE"
        added = {
            "source": "source VARCHAR(512) NOT NULL DEFAULT ''",
            # verdicts kept before blame.decided existed were shown and counted as decided
            "decided": f"decided BOOLEAN NOT NULL DEFAULT {yes}",
            "pattern": "pattern VARCHAR(16)",
        }
        for name, definition in added.items():
            if name not in present:
                with self.engine.begin() as connection:
                    connection.execute(text(f"ALTER TABLE {failures.name} ADD COLUMN {definition}"))

    def close(self) -> None:
        self.engine.dispose()

    # --- writing -----------------------------------------------------------------------------------

    def add(self, run: StoredRun, *, count_as: CountAs | None = None, skip_if_kept: bool = False) -> None:
        """Keep one attributed failure: :meth:`add_many` with one run."""
        self.add_many([run], count_as=count_as, skip_if_kept=skip_if_kept)

    def add_many(
        self, runs: Sequence[StoredRun], *, count_as: CountAs | None = None, skip_if_kept: bool = False
    ) -> int:
        """Keep attributed failures, in order, in one transaction; returns how many were written.

        A later verdict for the same trace replaces the earlier one (also within ``runs``: the last
        of a trace is the row kept). With ``count_as`` every blame written is also counted on that
        replica's culprit counters, in the same transaction (so a blame is never kept without being
        counted, or counted without being kept). With ``skip_if_kept`` the runs are entries an
        earlier call may have committed already (an outbox moved just before a crash): a run whose
        trace's stored blame is that run (same time, agent and method), and every run of that trace
        before it, was written then, and is neither written nor counted again."""
        if not runs:
            return 0
        self._ensure_schema()
        rows = [_row(run) for run in runs]
        for attempt in range(3):
            try:
                with self.engine.begin() as connection:
                    todo = self._not_kept(connection, rows) if skip_if_kept else range(len(rows))
                    if todo:
                        self._write_rows(connection, [rows[i] for i in todo])
                        self._keep_definitions(connection, [runs[i] for i in todo])
                        if count_as is not None:
                            blames = Counter(
                                culprit_labels(runs[i].service, runs[i].agent, runs[i].method)
                                for i in todo
                                if count_as.counts(runs[i])
                            )
                            self._count_blames(connection, count_as, blames)
                break
            except IntegrityError:  # the same trace or counter row written concurrently: try again
                if attempt == 2:
                    raise
        with self._lock:
            before = self._writes
            self._writes += len(todo)
            due = self._writes // self.config.prune_every > before // self.config.prune_every
        if due:
            self.prune()
        return len(todo)

    @staticmethod
    def _write_rows(connection: Connection, rows: list[dict[str, Any]]) -> None:
        """Replace the stored failure of each trace by the last of its rows (one delete, one insert);
        the rows get ids in the order of each trace's last row, as one write at a time gave them."""
        latest: dict[str, dict[str, Any]] = {}
        for row in rows:
            latest.pop(row["trace_id"], None)
            latest[row["trace_id"]] = row
        trace_ids = list(latest)
        for start in range(0, len(trace_ids), _IN_CHUNK):
            connection.execute(
                delete(failures).where(failures.c.trace_id.in_(trace_ids[start : start + _IN_CHUNK]))
            )
        connection.execute(insert(failures), list(latest.values()))

    @staticmethod
    def _keep_definitions(connection: Connection, runs: Sequence[StoredRun]) -> None:
        """The patterns the runs fall into, kept if the pattern book has not kept them (it could not:
        the store was down when it assigned them)."""
        named = {run.pattern_definition.id: run.pattern_definition for run in runs if run.pattern_definition}
        if not named:
            return
        kept = set(connection.execute(select(patterns.c.id).where(patterns.c.id.in_(list(named)))).scalars())
        keep_patterns(connection, [definition_row(d) for i, d in named.items() if i not in kept])

    @staticmethod
    def _not_kept(connection: Connection, rows: list[dict[str, Any]]) -> list[int]:
        """The positions of the rows an earlier transaction did not write: for each trace whose stored
        blame is one of its rows here (same time, agent, method), the rows after the last such one."""
        trace_ids = list({row["trace_id"] for row in rows})
        kept: dict[str, tuple[int, str, str]] = {}
        for start in range(0, len(trace_ids), _IN_CHUNK):
            for trace_id, at_ms, agent, method in connection.execute(
                select(
                    failures.c.trace_id, failures.c.attributed_at_ms, failures.c.agent, failures.c.method
                ).where(failures.c.trace_id.in_(trace_ids[start : start + _IN_CHUNK]))
            ):
                kept[trace_id] = (int(at_ms), agent, method)
        written_up_to: dict[str, int] = {}
        for position, row in enumerate(rows):
            if kept.get(row["trace_id"]) == (row["attributed_at_ms"], row["agent"], row["method"]):
                written_up_to[row["trace_id"]] = position
        return [
            position for position, row in enumerate(rows) if position > written_up_to.get(row["trace_id"], -1)
        ]

    @staticmethod
    def _count_blames(connection: Connection, count_as: CountAs, blames: Counter[CulpritLabels]) -> None:
        """Add each label set's blames to the replica's counter rows, creating a row on its first blame."""
        for labels, count in blames.items():
            BlameStore._count_blame(connection, count_as, labels, count)

    @staticmethod
    def _count_blame(
        connection: Connection, count_as: CountAs, labels: CulpritLabels, count: int = 1
    ) -> None:
        """Add ``count`` blames to the replica's counter row for these labels, creating it on the first."""
        mine = culprit_counts.c.replica == count_as.replica[:256]
        service, agent, fallback = labels.service, labels.agent, labels.fallback
        known = connection.execute(
            select(culprit_counts.c.id)
            .where(mine, culprit_counts.c.service == service, culprit_counts.c.agent == agent)
            .limit(1)
        ).first()
        if known is None:
            pairs = connection.execute(
                select(func.count()).select_from(
                    select(culprit_counts.c.service, culprit_counts.c.agent).where(mine).distinct().subquery()
                )
            ).scalar_one()
            agent = counted_agent(
                agent, known=False, distinct_pairs=int(pairs), max_agents=count_as.max_agents
            )
        key = (
            mine,
            culprit_counts.c.service == service,
            culprit_counts.c.agent == agent,
            culprit_counts.c.method == labels.method,
        )
        now_ms = int(time.time() * 1000)
        counted = connection.execute(
            update(culprit_counts)
            .where(*key)
            .values(
                blames=culprit_counts.c.blames + count,
                fallbacks=culprit_counts.c.fallbacks + int(fallback) * count,
                updated_at_ms=now_ms,
            )
        ).rowcount
        if not counted:
            connection.execute(
                insert(culprit_counts).values(
                    replica=count_as.replica[:256],
                    service=service,
                    agent=agent,
                    method=labels.method,
                    blames=count,
                    fallbacks=int(fallback) * count,
                    updated_at_ms=now_ms,
                )
            )

    def blame_counters(self, replica: str) -> list[BlameSeries]:
        """The replica's culprit counters, in the order the series first appeared (what /metrics serves)."""
        self._ensure_schema()
        with self.engine.connect() as connection:
            rows = connection.execute(
                select(
                    culprit_counts.c.service,
                    culprit_counts.c.agent,
                    culprit_counts.c.method,
                    culprit_counts.c.blames,
                    culprit_counts.c.fallbacks,
                )
                .where(culprit_counts.c.replica == replica[:256])
                .order_by(culprit_counts.c.id)
            ).all()
        return [
            BlameSeries(service, agent, method, int(blames), int(fallbacks))
            for service, agent, method, blames, fallbacks in rows
        ]

    def prune(self, now: float | None = None) -> int:
        """Drop failures older than ``max_age_seconds``, then the oldest until under ``max_bytes``."""
        now = time.time() if now is None else now
        cutoff = int((now - self.config.max_age_seconds) * 1000)
        removed = 0
        with self.engine.begin() as connection:
            removed += connection.execute(
                delete(failures).where(failures.c.attributed_at_ms < cutoff)
            ).rowcount
            # counters no blame touched within the age bound (e.g. of a replica long gone)
            connection.execute(delete(culprit_counts).where(culprit_counts.c.updated_at_ms < cutoff))
            # patterns older than the age bound that no kept failure falls into any more
            named = select(failures.c.pattern).where(failures.c.pattern.is_not(None)).distinct()
            connection.execute(
                delete(patterns).where(patterns.c.first_seen_ms < cutoff, patterns.c.id.not_in(named))
            )
            total = connection.execute(select(func.coalesce(func.sum(failures.c.size_bytes), 0))).scalar_one()
            excess = int(total) - self.config.max_bytes
            while excess > 0:
                oldest = connection.execute(
                    select(failures.c.id, failures.c.size_bytes).order_by(failures.c.id).limit(500)
                ).all()
                if not oldest:
                    break
                doomed = []
                for row_id, size in oldest:
                    doomed.append(row_id)
                    excess -= size
                    if excess <= 0:
                        break
                removed += connection.execute(delete(failures).where(failures.c.id.in_(doomed))).rowcount
        if removed:
            log.info("blame store: dropped %d failures past the age or size bound", removed)
        return removed

    # --- reading -----------------------------------------------------------------------------------

    def failures(
        self,
        *,
        agent: str | None = None,
        service: str | None = None,
        method: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 50,
        offset: int = 0,
        pattern: str | None = None,
    ) -> FailurePage:
        """Newest first; ``method`` matches the base method (``heuristic`` also finds fallbacks);
        ``agent`` matches case- and space-insensitively (``websurfer`` finds ``WebSurfer``);
        ``pattern``: the failures of one failure pattern."""
        limit = max(1, min(limit, MAX_PAGE))
        offset = max(0, offset)
        self._ensure_schema()
        conditions = []
        if agent:
            conditions.append(failures.c.agent.in_(self.agents_named(agent)))
        if service:
            conditions.append(failures.c.service == service)
        if method:
            conditions.append(failures.c.method_base == base_method(method))
        if pattern:
            conditions.append(failures.c.pattern == pattern)
        if since is not None:
            conditions.append(failures.c.attributed_at_ms >= int(since * 1000))
        if until is not None:
            conditions.append(failures.c.attributed_at_ms <= int(until * 1000))
        with self.engine.connect() as connection:
            total = connection.execute(
                select(func.count()).select_from(failures).where(*conditions)
            ).scalar_one()
            rows = connection.execute(
                select(*_SUMMARY_COLUMNS)
                .where(*conditions)
                .order_by(failures.c.attributed_at_ms.desc(), failures.c.id.desc())
                .limit(limit)
                .offset(offset)
            ).all()
        summaries = [
            FailureSummary(
                trace_id=row.trace_id,
                service=row.service,
                task=row.task,
                outcome=row.outcome,
                agent=row.agent,
                step=row.step,
                confidence=row.confidence,
                decided=bool(row.decided),
                reason=row.reason,
                method=row.method,
                model=row.model,
                attributed_at=row.attributed_at_ms / 1000,
                steps=row.steps,
                source=row.source,
                pattern=row.pattern,
            )
            for row in rows
        ]
        return FailurePage(total=int(total), limit=limit, offset=offset, failures=summaries)

    def run(self, trace_id: str) -> StoredRun | None:
        self._ensure_schema()
        with self.engine.connect() as connection:
            record = connection.execute(
                select(failures.c.record).where(failures.c.trace_id == trace_id.lower())
            ).scalar_one_or_none()
        return None if record is None else StoredRun.model_validate_json(record)

    def agents_named(self, name: str) -> list[str]:
        """The stored agent names that name the same agent as ``name`` (case and spaces aside)."""
        self._ensure_schema()
        with self.engine.connect() as connection:
            stored = connection.execute(select(failures.c.agent).distinct()).scalars()
            return [agent for agent in stored if same_agent(agent, name)]

    def distinct_values(self) -> dict[str, list[str]]:
        """Services, agents and methods present, for the filter menus."""
        self._ensure_schema()
        out: dict[str, list[str]] = {}
        with self.engine.connect() as connection:
            for name, column in (
                ("services", failures.c.service),
                ("agents", failures.c.agent),
                ("methods", failures.c.method_base),
            ):
                values = connection.execute(select(column).distinct().order_by(column).limit(200)).scalars()
                out[name] = [value for value in values if value]
        return out

    def count(self) -> int:
        self._ensure_schema()
        with self.engine.connect() as connection:
            return int(connection.execute(select(func.count()).select_from(failures)).scalar_one())

    def pattern_definitions(self, ids: Sequence[str] | None = None) -> dict[str, PatternDefinition]:
        """The kept patterns (``ids``: those only)."""
        self._ensure_schema()
        query = select(
            patterns.c.id, patterns.c.signature, patterns.c.kind, patterns.c.gist, patterns.c.first_seen_ms
        )
        found: dict[str, PatternDefinition] = {}
        with self.engine.connect() as connection:
            chunks = (
                [None] if ids is None else [ids[i : i + _IN_CHUNK] for i in range(0, len(ids), _IN_CHUNK)]
            )
            for chunk in chunks:
                where = query if chunk is None else query.where(patterns.c.id.in_(list(chunk)))
                for row in connection.execute(where.order_by(patterns.c.seq)):
                    found[row[0]] = definition_of(*row)
        return found

    def pattern_runs(
        self, since: float, until: float
    ) -> tuple[list[PatternRun], dict[str, PatternDefinition], list[StoredRun]]:
        """The processor's failures of the window as the patterns report counts them, the definitions
        of their patterns, and the failures kept before patterns existed (no pattern; whole records)."""
        self._ensure_schema()
        in_window = (
            failures.c.attributed_at_ms >= int(since * 1000),
            failures.c.attributed_at_ms <= int(until * 1000),
            failures.c.source == "",
        )
        with self.engine.connect() as connection:
            rows = connection.execute(
                select(
                    failures.c.trace_id,
                    failures.c.pattern,
                    failures.c.agent,
                    failures.c.attributed_at_ms,
                    failures.c.decided,
                ).where(*in_window, failures.c.pattern.is_not(None))
            ).all()
            older = connection.execute(
                select(failures.c.record).where(*in_window, failures.c.pattern.is_(None))
            ).scalars()
            unpatterned = [StoredRun.model_validate_json(record) for record in older]
        runs = [PatternRun(row[0], row[1], row[2], row[3] / 1000, bool(row[4])) for row in rows]
        return runs, self.pattern_definitions(sorted({run.pattern for run in runs})), unpatterned

    def patterns(
        self,
        window_seconds: float,
        *,
        now: float | None = None,
        buckets: int = 24,
        limit: int | None = None,
    ) -> PatternReport:
        """The failure patterns of the window, most runs first, with their runs per bucket, the agents
        and dependencies they span and example runs; the workflows' undecided groups apart, with the
        candidates of their example runs. Files attributed in the UI, and failures kept before
        patterns existed, are not counted (``otel-blame patterns`` groups those too)."""
        until = time.time() if now is None else now
        since = until - window_seconds
        runs, definitions, _ = self.pattern_runs(since, until)
        report = build_report(runs, definitions, since=since, until=until, buckets=buckets, limit=limit)
        self.add_candidates(report)
        return report

    def add_candidates(self, report: PatternReport) -> None:
        """The suspects of the undecided groups' example runs, read from their records."""
        examples = [example.trace_id for group in report.undecided for example in group.examples]
        if not examples:
            return
        with self.engine.connect() as connection:
            records = dict(
                connection.execute(
                    select(failures.c.trace_id, failures.c.record).where(failures.c.trace_id.in_(examples))
                ).all()
            )
        for group in report.undecided:
            for example in group.examples:
                if example.trace_id in records:
                    example.candidates = list(_candidates(records[example.trace_id]))

    def culprits(
        self,
        window_seconds: float,
        *,
        now: float | None = None,
        buckets: int = 24,
        count_undecided: bool = False,
    ) -> CulpritReport:
        """Blames per (service, agent) in the window, most first, and per bucket for the plot; files
        attributed in the UI (``source``) are not counted, nor undecided verdicts (a ranked guess is
        not a culprit) unless ``count_undecided``: the report says how many were left out.

        The counts are the store's rows, labelled as ``otel_blame_attributions_total`` labels its
        series (service, agent, base method), so they match ``increase(...[window])`` when both
        count the same verdicts (``alerting.count_undecided``)."""
        self._ensure_schema()
        until = time.time() if now is None else now
        since = until - window_seconds
        buckets = max(1, min(buckets, 240))
        bucket_ms = max(1, int(window_seconds * 1000 / buckets))
        since_ms = int(since * 1000)
        # a processor's blames only: files attributed in the UI are kept for their link, not counted
        in_window = (
            failures.c.attributed_at_ms >= since_ms,
            failures.c.attributed_at_ms <= int(until * 1000),
            failures.c.source == "",
        )
        left_out = 0
        with self.engine.connect() as connection:
            if not count_undecided:
                undecided = failures.c.decided == false()
                left_out = connection.execute(
                    select(func.count()).select_from(failures).where(*in_window, undecided)
                ).scalar_one()
                in_window = (*in_window, failures.c.decided == true())
            grouped = connection.execute(
                select(
                    failures.c.service,
                    failures.c.agent,
                    failures.c.method_base,
                    func.count().label("n"),
                    func.max(failures.c.attributed_at_ms).label("last"),
                )
                .where(*in_window)
                .group_by(failures.c.service, failures.c.agent, failures.c.method_base)
            ).all()
            per_bucket = connection.execute(
                select(
                    failures.c.service,
                    failures.c.agent,
                    ((failures.c.attributed_at_ms - since_ms) // bucket_ms).label("bucket"),
                    func.count().label("n"),
                )
                .where(*in_window)
                .group_by(failures.c.service, failures.c.agent, "bucket")
            ).all()
            latest: dict[tuple[str, str], str] = {}
            for service, agent, _method, _n, last in grouped:
                trace = connection.execute(
                    select(failures.c.trace_id)
                    .where(
                        failures.c.service == service,
                        failures.c.agent == agent,
                        failures.c.attributed_at_ms == last,
                        *in_window,
                    )
                    .limit(1)
                ).scalar_one_or_none()
                if trace and (service, agent) not in latest:
                    latest[(service, agent)] = trace
        totals: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
        last_seen: dict[tuple[str, str], int] = {}
        for service, agent, method, n, last in grouped:
            totals[(service, agent)][method] = int(n)
            last_seen[(service, agent)] = max(last_seen.get((service, agent), 0), int(last))
        culprits = sorted(
            (
                CulpritCount(
                    service=service,
                    agent=agent,
                    count=sum(methods.values()),
                    methods=methods,
                    last_seen=last_seen[(service, agent)] / 1000,
                    last_trace_id=latest.get((service, agent), ""),
                )
                for (service, agent), methods in totals.items()
            ),
            key=lambda c: (-c.count, -c.last_seen, c.service, c.agent),
        )
        series_counts: dict[tuple[str, str], list[int]] = {
            (c.service, c.agent): [0] * buckets for c in culprits
        }
        for service, agent, bucket, n in per_bucket:
            index = min(max(int(bucket), 0), buckets - 1)
            series_counts.setdefault((service, agent), [0] * buckets)[index] += int(n)
        return CulpritReport(
            window_seconds=window_seconds,
            since=since,
            until=until,
            total=sum(c.count for c in culprits),
            undecided_counted=count_undecided,
            undecided=int(left_out),
            culprits=culprits,
            bucket_seconds=bucket_ms / 1000,
            bucket_starts=[since + i * bucket_ms / 1000 for i in range(buckets)],
            series=[
                CulpritSeries(service=c.service, agent=c.agent, counts=series_counts[(c.service, c.agent)])
                for c in culprits
            ],
        )


def _candidates(record: str) -> tuple[str, ...]:
    """The suspects of a stored undecided verdict, best first (from its record)."""
    run = StoredRun.model_validate_json(record)
    return tuple(dict.fromkeys(candidate.agent for candidate in run.candidates))


def open_store(config: StoreConfig | None = None, *, wal_dir: Path | None = None) -> BlameStore:
    """The store a configuration means: ``url`` (PostgreSQL or any SQLAlchemy URL), else SQLite."""
    config = config or StoreConfig()
    if config.url is not None:
        url = _engine_url(config.url.get_secret_value())
        # a database that does not answer makes a write fail within seconds (the blame then waits in
        # the outbox), rather than holding the analysis worker for the driver's default minutes
        connect_args = {"connect_timeout": 5} if url.startswith("postgresql") else {}
        engine = create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    else:
        engine = _sqlite_engine(config.sqlite_path(wal_dir))
    return BlameStore(engine, config)
