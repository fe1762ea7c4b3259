"""Where the blame store lives and how much it keeps."""

from __future__ import annotations

import socket
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

MiB = 1024 * 1024
DEFAULT_FILE_NAME = "blame-store.sqlite3"


class StoreConfig(BaseModel):
    """``url`` (a shared PostgreSQL) wins over ``path``; with neither, the store sits next to the WAL."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    enabled: bool = Field(default=True, description="false: attributions are not kept for the UI")
    url: SecretStr | None = Field(
        default=None, description="postgresql://user:pass@host/db for a store shared by replicas"
    )
    path: Path | None = Field(default=None, description=f"SQLite file; default <wal.dir>/{DEFAULT_FILE_NAME}")
    max_age_seconds: float = Field(default=7 * 24 * 3600.0, gt=0, description="older failures are dropped")
    max_bytes: int = Field(default=512 * MiB, gt=0, description="past this, the oldest failures are dropped")
    outbox_max_bytes: int = Field(
        default=64 * MiB,
        gt=0,
        description="blames the store cannot take wait in <wal.dir>/blame-outbox.sqlite, up to this size",
    )
    prune_every: int = Field(default=50, ge=1, description="check the bounds every N writes (and on open)")
    replica: str | None = Field(
        default=None,
        max_length=256,
        description="this processor's name on its culprit counters in the store; default: the host name",
    )

    def replica_name(self) -> str:
        """Whose culprit counters this processor keeps and serves (unique per replica of a shared store)."""
        return self.replica or socket.gethostname() or "otel-blame"

    def sqlite_path(self, wal_dir: Path | None) -> Path:
        """The SQLite file this configuration means, given the processor's WAL directory."""
        if self.path is not None:
            return self.path
        return (wal_dir or Path(".")) / DEFAULT_FILE_NAME
