"""The pattern book in the blame store: the failure patterns every replica sharing the store assigns.

Each processor keeps the patterns it has read in memory (:class:`~otel_blame.patterns.PatternIndex`)
and answers from there when one of them takes a cause: a pattern is the *oldest* similar one of its
signature, and patterns are only ever added, so a replica's partial copy answers as the whole store
would. A cause none of them takes is settled in the database: in one transaction holding a lock on
its signature (PostgreSQL's ``pg_advisory_xact_lock``; SQLite's write lock), the signature's patterns
are read again and the cause joins one of them or opens a new one. Two replicas that meet the same
new cause at the same moment thus open one pattern, not two: the patterns and their counts are what
one processor seeing every run would have made.

A database that fails (down, refusing) costs the sharing, not the blame: for ``retry_seconds`` the
book answers from memory alone (a pattern opened then is kept with the blames that name it, which
carry its definition, once the store answers again).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time

from sqlalchemy import Connection, Engine, func, select, text
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError, SQLAlchemyError

from otel_blame.patterns import Cause, Known, PatternDefinition, PatternIndex, Signature
from otel_blame.store.schema import patterns

log = logging.getLogger(__name__)


def signature_hash(signature: Signature) -> str:
    """What the store files a signature's patterns under."""
    return hashlib.blake2b(signature.key().encode("utf-8"), digest_size=16).hexdigest()


def keep_patterns(connection: Connection, rows: list[dict[str, object]]) -> None:
    """Insert pattern rows; one whose id is kept already stays as it is."""
    if not rows:
        return
    if connection.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    connection.execute(insert(patterns).values(rows).on_conflict_do_nothing(index_elements=["id"]))


def definition_row(definition: PatternDefinition) -> dict[str, object]:
    """The table row of a pattern's definition (as a blame carries it)."""
    signature = definition.signature()
    return {
        "id": definition.id,
        "signature_hash": signature_hash(signature),
        "signature": signature.key(),
        "kind": definition.kind,
        "gist": definition.gist,
        "first_seen_ms": int((definition.first_seen or 0.0) * 1000),
    }


def definition_of(
    pattern_id: str, signature: str, kind: str, gist: str, first_seen_ms: int
) -> PatternDefinition:
    """A kept pattern's definition."""
    return PatternDefinition.from_signature(
        pattern_id, Signature.from_key(signature), kind, gist, first_seen_ms / 1000 if first_seen_ms else None
    )


def _lock_key(hashed: str) -> int:
    """A signed 64-bit advisory lock key for a signature."""
    return int.from_bytes(bytes.fromhex(hashed[:16]), "big", signed=True)


class StorePatternBook:
    """Thread-safe; any number of replicas on one PostgreSQL (one process on a SQLite store)."""

    def __init__(
        self,
        engine: Engine,
        *,
        similarity: float,
        max_per_signature: int,
        retry_seconds: float = 30.0,
    ) -> None:
        self.engine = engine
        self.retry_seconds = retry_seconds
        self.errors = 0  # assignments answered from memory because the database failed
        self._index = PatternIndex(similarity, max_per_signature)
        self._read_signatures: set[str] = set()
        self._lock = threading.Lock()
        self._down_until = 0.0
        self._schema_ready = False

    def __len__(self) -> int:
        return len(self._index)

    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        for attempt in range(3):  # replicas starting together may race to create the table
            try:
                patterns.create(self.engine, checkfirst=True)
                break
            except (IntegrityError, ProgrammingError, OperationalError):
                if attempt == 2:
                    raise
                time.sleep(0.2 * (attempt + 1))
        self._schema_ready = True

    def assign(self, cause: Cause, at: float) -> Known:
        at = int(at * 1000) / 1000  # as the store keeps it (milliseconds)
        hashed = signature_hash(cause.signature)
        with self._lock:
            if time.monotonic() < self._down_until:
                return self._index.assign(cause, at)[0]
            try:
                if hashed not in self._read_signatures:
                    self._ensure_schema()
                    with self.engine.connect() as connection:
                        self._read(connection, cause.signature, hashed)
                found = self._index.find(cause)
                if found is not None:
                    return found
                return self._open(cause, hashed, at)
            except SQLAlchemyError as error:
                self.errors += 1
                self._down_until = time.monotonic() + self.retry_seconds
                log.warning(
                    "pattern book (blame store): %s; patterns from memory for %.0f s",
                    error,
                    self.retry_seconds,
                )
                return self._index.assign(cause, at)[0]

    def _read(self, connection: Connection, signature: Signature, hashed: str) -> None:
        """The signature's patterns, oldest first, into the index."""
        rows = connection.execute(
            select(patterns.c.id, patterns.c.gist, patterns.c.first_seen_ms)
            .where(patterns.c.signature_hash == hashed)
            .order_by(patterns.c.seq)
        ).all()
        self._index.extend(signature, (Known(row[0], row[1], row[2] / 1000) for row in rows))
        self._read_signatures.add(hashed)

    def _open(self, cause: Cause, hashed: str, at: float) -> Known:
        """Settle a cause no known pattern takes, under the signature's lock."""
        with self.engine.begin() as connection:
            if self.engine.dialect.name == "postgresql":
                connection.execute(select(func.pg_advisory_xact_lock(_lock_key(hashed))))
            else:  # SQLite: take the write lock before reading, as BEGIN IMMEDIATE would
                connection.execute(text("DELETE FROM otel_blame_patterns WHERE 0"))
            self._read(connection, cause.signature, hashed)
            found = self._index.find(cause)
            if found is not None:
                return found
            opening = self._index.opening(cause, at)
            known = self._index.get(opening.id)  # the signature's 'other reasons', opened before
            if known is not None:
                return known
            keep_patterns(
                connection,
                [
                    {
                        "id": opening.id,
                        "signature_hash": hashed,
                        "signature": cause.signature.key(),
                        "kind": cause.kind,
                        "gist": opening.gist,
                        "first_seen_ms": int(opening.first_seen * 1000),
                    }
                ],
            )
        self._index.add(cause.signature, opening)
        return opening

    def close(self) -> None:
        """The engine belongs to the blame store, which disposes of it."""
