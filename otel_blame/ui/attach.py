"""How ``otel-blame serve`` gets its blame store and web UI, importing them only when enabled.

Called once when the processor starts: opens the store the configuration names (SQLite next to
the WAL unless ``store.url``), adds the store writer to the analyser's listeners and the UI's
routes to the HTTP receiver's, and has the culprit metrics read their counters from the store.
Nothing here runs when ``store.enabled`` is false (the metrics then count in memory).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


class BlameUIUnavailable(OSError):
    """The store was asked for but cannot be opened; the message says why."""


def attach_blame_ui(config: Any, listeners: list[Any], http_routes: list[Any], metrics: Any = None) -> Any:
    """Open the store and wire it in; return the object to ``close()`` on stop, or None.

    ``metrics`` (a :class:`~otel_blame.alerting.metrics.CulpritMetrics`) then reads its blame
    counters from the store until ``close()``."""
    if not config.store.enabled:
        return None
    try:
        from otel_blame.ui.processor_integration import processor_ui
    except ImportError as error:
        if config.store.url is not None:
            message = f"store.url is set but the blame store cannot load ({error})"
            raise BlameUIUnavailable(f"{message}; pip install 'otel-blame[postgres]'") from None
        log.warning("blame store and web UI off: %s (pip install 'otel-blame[ui]')", error)
        return None
    try:
        attached = processor_ui(
            config.store,
            wal_dir=config.wal.dir,
            auth_token=config.receivers.auth_token,
            llm=config.attribution.llm,
            jaeger_url_template=config.ui.jaeger_url_template,
            tempo_url_template=config.ui.tempo_url_template,
            max_upload_bytes=config.ui.max_upload_bytes,
            secure_cookies=config.ui.secure_cookies,
            count_undecided=config.alerting.count_undecided,
            **({"max_agents": metrics.max_agents} if metrics is not None else {}),
        )
    except Exception as error:  # an unreachable database, a bad URL, an unwritable file
        raise BlameUIUnavailable(f"cannot open the blame store: {type(error).__name__}: {error}") from None
    listeners.append(attached.writer)
    if config.ui.enabled:
        http_routes.extend(attached.routes())
    if metrics is not None:
        metrics.count_blames_in(attached)
        attached.on_close(lambda: metrics.count_blames_in(None))
    return attached
