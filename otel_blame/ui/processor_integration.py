"""The blame store and the web UI inside ``otel-blame serve``: one listener, one set of routes.

The processor calls :class:`StoreWriter` with every attribution it finishes (its analyser's
listener hook) and mounts :meth:`BlameUI.routes` on its HTTP port, so ``/ui/`` and ``/api/``
answer there exactly as under ``otel-blame ui``. The UI checks the processor's own
``receivers.auth_token`` itself: the API by Bearer header, the pages through the sign-in form.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

from otel_blame.attribution.result import Attribution
from otel_blame.store.blame_store import BlameStore, open_store
from otel_blame.store.config import StoreConfig
from otel_blame.store.records import build_run
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


class StoreWriter:
    """An attribution listener: keeps each finished attribution in the blame store."""

    def __init__(self, store: BlameStore) -> None:
        self.store = store

    def __call__(self, finished: FinishedAttributionLike) -> None:
        run = build_run(
            finished.trajectory,
            finished.attribution,
            trace_id=finished.trace_id,
            service=finished.service,
            attributed_at=finished.finished_at_unix,
        )
        self.store.add(run)


class ProcessorUI:
    """What ``serve`` adds: the store, its writer (a listener) and the UI routes."""

    def __init__(self, store: BlameStore, settings: UISettings) -> None:
        self.store = store
        self.writer = StoreWriter(store)
        self.ui = BlameUI(store, settings)

    def routes(self) -> list[Any]:
        return self.ui.routes()

    def close(self) -> None:
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
) -> ProcessorUI:
    """Open the store the configuration names (SQLite next to the WAL by default) and build the UI."""
    store = open_store(store_config, wal_dir=wal_dir)
    settings = UISettings(
        auth_token=auth_token,
        secure_cookies=secure_cookies,
        jaeger_url_template=jaeger_url_template,
        tempo_url_template=tempo_url_template,
        llm=llm if llm is not None and (llm.base_url or llm.api_key) else None,
        **({"max_upload_bytes": max_upload_bytes} if max_upload_bytes else {}),
    )
    log.info("blame store: %s; web UI on /ui/, API on /api/", store.dialect)
    return ProcessorUI(store, settings)
