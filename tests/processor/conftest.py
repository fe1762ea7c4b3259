"""Fixtures for the processor tests: a recording downstream and an in-process processor."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_blame.processor import BlameProcessor, load_config
from tests.support import RecordingOTLPSink


@pytest.fixture
def sink() -> Iterator[RecordingOTLPSink]:
    with RecordingOTLPSink() as recording:
        yield recording


def processor_overrides(sink_endpoint: str, wal_dir: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    base: dict[str, Any] = {
        "receivers": {"grpc_endpoint": "127.0.0.1:0", "http_endpoint": "127.0.0.1:0"},
        "wal": {"dir": str(wal_dir)},
        "assembly": {"quiet_period": 0.2, "max_wait": 5.0},
        "exporter": {"endpoint": sink_endpoint, "initial_backoff": 0.05, "max_backoff": 0.5},
        "shutdown_timeout": 5.0,
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return base


@pytest.fixture
def make_processor(sink: RecordingOTLPSink, tmp_path: Path) -> Iterator[Callable[..., BlameProcessor]]:
    started: list[BlameProcessor] = []

    def make(**sections: dict[str, Any]) -> BlameProcessor:
        config = load_config(
            overrides=processor_overrides(sink.endpoint, tmp_path / "wal", **sections), environ={}
        )
        processor = BlameProcessor(config).start()
        started.append(processor)
        return processor

    yield make
    for processor in started:
        processor.stop(timeout=5)
