"""A child process for ``test_blame_kept_before_export``: ``serve``'s processor, with the blame store
plugged in as ``serve`` plugs it, whose writes take half a second longer (a slow disk or database).

Run as ``python -m tests.processor.slow_store_serve WAL_DIR DOWNSTREAM``; prints one JSON line with
the gRPC endpoint when ready, then runs until it is killed."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from otel_blame.commands.serve import load_serve_config, serving_processor
from otel_blame.store.blame_store import BlameStore

WRITE_DELAY = 0.5


def _slow_writes() -> None:
    write = BlameStore.add_many

    def slow_add_many(self: BlameStore, runs: Any, **options: Any) -> int:
        time.sleep(WRITE_DELAY)
        return write(self, runs, **options)

    BlameStore.add_many = slow_add_many  # type: ignore[method-assign]


def main(wal_dir: str, downstream: str) -> None:
    _slow_writes()
    config = load_serve_config(
        overrides={
            "receivers": {"grpc_endpoint": "127.0.0.1:0", "http_endpoint": None},
            "wal": {"dir": wal_dir},
            "assembly": {"quiet_period": 0.1},
            "exporter": {"endpoint": downstream, "initial_backoff": 0.05, "max_backoff": 0.5},
        },
        environ={},
    )
    processor = serving_processor(config).start()
    print(json.dumps({"grpc": processor.grpc_endpoint}), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
