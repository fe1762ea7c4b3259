"""The blame store's tables, defined once for SQLite and PostgreSQL (SQLAlchemy Core): the attributed
failures, and the culprit counters each processor replica serves on ``/metrics``."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    true,
)

metadata = MetaData()

failures = Table(
    "otel_blame_failures",
    metadata,
    Column("id", Integer().with_variant(BigInteger(), "postgresql"), primary_key=True, autoincrement=True),
    Column("trace_id", String(64), nullable=False, unique=True),
    Column("service", String(256), nullable=False, default=""),
    Column("task", String(512), nullable=False, default=""),
    Column("outcome", String(32), nullable=False),
    Column("agent", String(256), nullable=False),
    Column("step", Integer, nullable=False),
    Column("confidence", Float, nullable=False),
    Column(
        "decided",
        Boolean,
        nullable=False,
        default=True,
        server_default=true(),
        doc="blame.decided: the evidence supports the verdict (true in rows kept before it existed)",
    ),
    Column("reason", Text, nullable=False),
    Column("method", String(256), nullable=False),
    Column("method_base", String(128), nullable=False, doc="the method label the metrics use"),
    Column("model", String(256), nullable=True),
    Column("attributed_at_ms", BigInteger, nullable=False, doc="unix milliseconds"),
    Column("steps", Integer, nullable=False),
    Column("size_bytes", Integer, nullable=False, doc="length of the stored JSON, for the size bound"),
    Column("record", Text, nullable=False, doc="the whole StoredRun as JSON"),
    Column(
        "source",
        String(512),
        nullable=False,
        default="",
        server_default="",
        doc="empty for a processor's blame; 'upload: <name>' for a file attributed in the UI",
    ),
    Column("pattern", String(16), nullable=True, doc="blame.pattern: the failure pattern's id"),
    Index("ix_otel_blame_failures_time", "attributed_at_ms"),
    Index("ix_otel_blame_failures_agent", "agent", "attributed_at_ms"),
    Index("ix_otel_blame_failures_service", "service", "attributed_at_ms"),
)

# The failure patterns (otel_blame.patterns): each one's signature and the gist that opened it, in the
# order they were opened (``seq``). The processor's pattern book files them under a hash of the
# signature; every replica sharing the store reads and writes the same patterns.
patterns = Table(
    "otel_blame_patterns",
    metadata,
    Column("seq", Integer().with_variant(BigInteger(), "postgresql"), primary_key=True, autoincrement=True),
    Column("id", String(16), nullable=False, unique=True),
    Column("signature_hash", String(32), nullable=False, doc="blake2b of the signature's key"),
    Column("signature", Text, nullable=False, doc="the signature's key (JSON)"),
    Column("kind", String(16), nullable=False, doc="cause, or undecided (a workflow's undecided group)"),
    Column("gist", Text, nullable=False),
    Column("first_seen_ms", BigInteger, nullable=False, doc="unix milliseconds"),
    Index("ix_otel_blame_patterns_signature", "signature_hash", "seq"),
)

# Monotonic blame counters: one row per (replica, service, agent, method), incremented in the same
# transaction that keeps a failure. Unlike counting rows of ``otel_blame_failures`` (which the age
# and size bounds delete, and a later verdict replaces), these never go down, as Prometheus counters
# must not; the row id keeps the order in which series first appeared.
culprit_counts = Table(
    "otel_blame_culprit_counts",
    metadata,
    Column("id", Integer().with_variant(BigInteger(), "postgresql"), primary_key=True, autoincrement=True),
    Column("replica", String(256), nullable=False, doc="the processor replica that attributed"),
    Column("service", String(256), nullable=False),
    Column("agent", String(256), nullable=False, doc="the culprit, or 'other' past the label bound"),
    Column("method", String(128), nullable=False, doc="the base method, as on the metric"),
    Column("blames", BigInteger, nullable=False),
    Column("fallbacks", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False, doc="unix milliseconds of the last blame"),
    UniqueConstraint("replica", "service", "agent", "method", name="uq_otel_blame_culprit_counts"),
)
