"""The store inside `serve` when it fails: a blame it cannot keep waits in the outbox and still
counts on /metrics, and a store that cannot be read serves its last counts, so an outage never
silences or rewinds the repeated-culprit counters."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from otel_blame.alerting.metrics import CulpritMetrics
from otel_blame.attribution.registry import create_method
from otel_blame.loaders import load_trajectory
from otel_blame.processor.analyser import FinishedAttribution
from otel_blame.store import StoreConfig
from otel_blame.ui.processor_integration import processor_ui
from tests.store.runs import who_and_when_files
from tests.support.decided import ALWAYS_DECIDED, set_decided_threshold


def _finished(position: int) -> FinishedAttribution:
    trajectory = load_trajectory(who_and_when_files(1)[0])
    return FinishedAttribution(
        trace_id=f"{position + 1:032x}",
        service="checkout",
        trajectory=trajectory,
        attribution=create_method("heuristic").attribute(trajectory),
        outcome="failure",
        finished_at_unix=time.time(),
        late=False,
    )


def _blames(metrics: CulpritMetrics) -> int:
    return sum(metrics.attributions().values())


def test_a_store_outage_neither_loses_nor_rewinds_a_blame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_decided_threshold(monkeypatch, ALWAYS_DECIDED)  # the surface, not the threshold
    attached = processor_ui(StoreConfig(replica="replica-a"), wal_dir=tmp_path / "wal", auth_token=None)
    metrics = CulpritMetrics()
    metrics.count_blames_in(attached)
    try:
        attached.writer(_finished(0))
        assert _blames(metrics) == 1 and attached.store.count() == 1
        dropped = OperationalError("INSERT", {}, ConnectionError("server closed the connection unexpectedly"))

        def refuse(*_args: object, **_kwargs: object) -> None:
            raise dropped

        # the database is gone: the blame waits in the outbox, and it is counted
        with monkeypatch.context() as outage:
            outage.setattr(attached.store, "add_many", refuse)
            outage.setattr(attached.store, "blame_counters", refuse)
            attached.writer(_finished(1))
            assert _blames(metrics) == 2  # the last stored count (1) plus the one it could not keep
            assert "otel_blame_attributions_total" in metrics.render()
            assert attached.store.count() == 1 and len(attached.durable.outbox) == 1
        # back: the blame that waited in the outbox is written, the new one after it, each counted once
        attached.writer(_finished(2))
        assert attached.durable.flush()
        assert _blames(metrics) == 3 and attached.store.count() == 3
    finally:
        attached.close()
