"""A throwaway PostgreSQL cluster on loopback (Debian's server), shared by every test of one session.

Session-scoped and defined once (the suite's conftest imports ``postgres_url``), so the store tests
and the two-replica processor test use the same cluster instead of starting one per directory.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ports import reserve_port

PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def _pg_bin(name: str) -> str | None:
    for directory in PG_BIN_DIRS:
        if (directory / name).exists():
            return str(directory / name)
    return shutil.which(name)


class PostgresCluster:
    """One throwaway cluster in a temporary directory: ``start()`` / ``stop()`` as often as a test
    needs (the data and the port stay), ``remove()`` at the end."""

    def __init__(self) -> None:
        self.initdb, self.pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
        if not self.initdb or not self.pg_ctl:
            pytest.skip(
                "PostgreSQL server binaries missing: make system-packages installs Debian's postgresql"
            )
        self.prefix: list[str] = []
        owner = None
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("running as root without a 'postgres' user to run the server as")
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.root = Path(tempfile.mkdtemp(prefix="otel-blame-pg-"))
        self.data = self.root / "data"
        if owner is not None:
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        self.port = reserve_port()
        self.env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
        subprocess.run(
            [*self.prefix, self.initdb, "-D", str(self.data), "--auth=trust", "--username=postgres"]
            + ["-E", "UTF8", "--no-sync"],
            check=True,
            capture_output=True,
            env=self.env,
            timeout=120,
        )
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            [*self.prefix, self.pg_ctl, "-D", str(self.data), "-o", options]
            + ["-l", str(self.root / "server.log"), "-w", "-t", "60", "start"],
            check=True,
            capture_output=True,
            env=self.env,
            timeout=90,
        )

    def stop(self) -> None:
        subprocess.run(
            [*self.prefix, self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            env=self.env,
            timeout=60,
        )

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """Start a fresh cluster with initdb/pg_ctl (as the postgres user when run as root)."""
    cluster = PostgresCluster()
    cluster.start()
    try:
        yield cluster.url
    finally:
        cluster.remove()


def empty_store_tables(url: str) -> None:
    """Drop every row the blame store keeps, so a test starts from an empty shared database."""
    from otel_blame.store import StoreConfig, open_store
    from otel_blame.store.cross_run import metadata as cross_run_metadata
    from otel_blame.store.schema import metadata

    store = open_store(StoreConfig(url=url))
    cross_run_metadata.create_all(store.engine, checkfirst=True)
    with store.engine.begin() as connection:
        for table in [*reversed(metadata.sorted_tables), *reversed(cross_run_metadata.sorted_tables)]:
            connection.execute(table.delete())
    store.close()
