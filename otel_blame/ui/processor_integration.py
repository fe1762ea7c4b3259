"""The blame store and the web UI inside ``otel-blame serve``: one listener, one set of routes.

The processor calls :class:`StoreWriter` with every attribution it finishes (its analyser's
listener hook) and mounts :meth:`BlameUI.routes` on its HTTP port, so ``/ui/`` and ``/api/``
answer there exactly as under ``otel-blame ui``. The UI checks the processor's own
``receivers.auth_token`` itself: the API by Bearer header, the pages through the sign-in form.

The store is also what ``/metrics`` and ``/v1/verdicts`` read: the writer counts each blame on this
replica's culprit counters as it keeps it (:meth:`ProcessorUI.blame_series` is what a scrape reads),
and a verdict for an already attributed trace is answered from the stored record
(:meth:`ProcessorUI.stored_blame`), whichever replica attributed it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from otel_blame.alerting.metrics import BlameSeries
from otel_blame.attribution.result import Attribution
from otel_blame.patterns import PatternDefinition
from otel_blame.store.blame_store import BlameStore, CountAs, open_store
from otel_blame.store.config import StoreConfig
from otel_blame.store.cross_run import SharedCrossRunStatistics
from otel_blame.store.outbox import FILE_NAME as OUTBOX_FILE
from otel_blame.store.outbox import BlameOutbox, DurableBlameWriter
from otel_blame.store.patterns import StorePatternBook
from otel_blame.store.records import StoredRun, build_run
from otel_blame.trajectory import Trajectory
from otel_blame.ui.app import BlameUI
from otel_blame.ui.settings import UISettings

log = logging.getLogger(__name__)

UI_PATH_PREFIXES = ("/ui", "/api/")


class FinishedAttributionLike(Protocol):
    trace_id: str
    service: str
    trajectory: Trajectory
    attribution: Attribution
    finished_at_unix: float
    pattern: PatternDefinition | None


class StoreWriter:
    """An attribution listener: keeps each batch of finished attributions in the blame store and
    counts them on the replica's culprit counters, in one transaction (:meth:`consume_batch`, which
    the processor's listener thread calls with the blames that queued up; it returns once they are
    on disk, before their traces' spans are exported).

    A blame the store cannot keep (the shared database is down, the disk is full) waits durably in
    the outbox next to the write-ahead log and is written when the store answers again, also after
    a restart (:class:`~otel_blame.store.outbox.DurableBlameWriter`); meanwhile it counts on the
    metrics, so an outage of the store does not silence the repeated-culprit alert."""

    def __init__(self, durable: DurableBlameWriter) -> None:
        self.durable = durable

    def __call__(self, finished: FinishedAttributionLike) -> None:
        self.consume_batch([finished])

    def consume_batch(self, batch: Sequence[FinishedAttributionLike]) -> None:
        runs = [
            build_run(
                finished.trajectory,
                finished.attribution,
                trace_id=finished.trace_id,
                service=finished.service,
                attributed_at=finished.finished_at_unix,
                redacted=True,  # by the processor's own redactor, before the listeners were called
                pattern=getattr(finished, "pattern", None),
            )
            for finished in batch
        ]
        self.durable.write_many(runs)


class ProcessorUI:
    """What ``serve`` adds: the store, its writer (a listener), the UI routes, and the store's answers
    for the culprit counters and for verdicts."""

    def __init__(
        self, store: BlameStore, settings: UISettings, count_as: CountAs, outbox: BlameOutbox
    ) -> None:
        self.store = store
        self.count_as = count_as
        self.durable = DurableBlameWriter(store, outbox, count_as)
        self.writer = StoreWriter(self.durable)
        self.ui = BlameUI(store, settings)
        self._on_close: list[Callable[[], None]] = []

    def routes(self) -> list[Any]:
        return self.ui.routes()

    def blame_series(self) -> list[BlameSeries]:
        """This replica's culprit counters, read from the store at every scrape, plus the blames
        waiting for it in the outbox. A store that cannot be read gives its last counts (never fewer)."""
        return self.durable.blame_series()

    def shared_cross_run(self, config: Any) -> SharedCrossRunStatistics | None:
        """The cross-run statistics in the shared PostgreSQL store, or None (SQLite next to the log)."""
        if self.store.dialect != "postgresql":
            return None
        return SharedCrossRunStatistics(
            self.store.engine,
            max_workflows=config.max_workflows,
            max_agents_per_workflow=config.max_agents_per_workflow,
            max_components_per_agent=config.max_components_per_agent,
        )

    def pattern_book(self, config: Any) -> StorePatternBook:
        """The failure patterns kept in the store (``config``: the processor's ``patterns`` section):
        every replica sharing the store assigns the same patterns, and the web UI shows them."""
        return StorePatternBook(
            self.store.engine, similarity=config.similarity, max_per_signature=config.max_per_signature
        )

    def stored_blame(self, trace_id: str) -> StoredRun | None:
        """The stored blame of a trace (attributed by any replica sharing the store), or None; a store
        that cannot be read answers None, so the caller falls back to what it holds itself."""
        try:
            return self.store.run(trace_id)
        except Exception as error:
            log.warning("blame store: cannot read trace %s (%s)", trace_id, error)
            return None

    def on_close(self, callback: Callable[[], None]) -> None:
        self._on_close.append(callback)

    def close(self) -> None:
        for callback in self._on_close:
            callback()
        self.durable.close()
        self.store.close()


def processor_ui(
    store_config: StoreConfig,
    *,
    wal_dir: Path,
    auth_token: Any,
    llm: Any = None,
    jaeger_url_template: str | None = None,
    tempo_url_template: str | None = None,
    max_upload_bytes: int | None = None,
    secure_cookies: bool = False,
    max_agents: int = 500,
    count_undecided: bool = False,
) -> ProcessorUI:
    """Open the store the configuration names (SQLite next to the WAL by default) and build the UI."""
    store = open_store(store_config, wal_dir=wal_dir)
    settings = UISettings(
        auth_token=auth_token,
        secure_cookies=secure_cookies,
        count_undecided=count_undecided,
        jaeger_url_template=jaeger_url_template,
        tempo_url_template=tempo_url_template,
        llm=llm if llm is not None and (llm.base_url or llm.api_key) else None,
        **({"max_upload_bytes": max_upload_bytes} if max_upload_bytes else {}),
    )
    count_as = CountAs(store_config.replica_name(), max_agents, count_undecided)
    log.info(
        "blame store: %s; web UI on /ui/, API on /api/; culprit counters of replica %r",
        store.dialect,
        count_as.replica,
    )
    outbox = BlameOutbox(wal_dir / OUTBOX_FILE, store_config.outbox_max_bytes)
    return ProcessorUI(store, settings, count_as, outbox)
