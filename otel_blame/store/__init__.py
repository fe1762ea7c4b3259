"""The blame store: every attributed failure, kept durably for the web UI, `otel-blame top`, the API,
`/v1/verdicts` and the culprit counters on `/metrics`.

SQLite next to the write-ahead log by default; one shared PostgreSQL (``store.url``) when several
processor replicas must show the same failures. Needs the ``ui`` extra (SQLAlchemy); PostgreSQL
also the ``postgres`` extra (psycopg).
"""

from otel_blame.store.blame_store import BlameStore, CountAs, open_store
from otel_blame.store.config import StoreConfig
from otel_blame.store.records import (
    CulpritCount,
    CulpritReport,
    CulpritSeries,
    FailurePage,
    FailureSummary,
    StoredRun,
    build_run,
)

__all__ = [
    "BlameStore",
    "CountAs",
    "CulpritCount",
    "CulpritReport",
    "CulpritSeries",
    "FailurePage",
    "FailureSummary",
    "StoreConfig",
    "StoredRun",
    "build_run",
    "open_store",
]
