"""The analysis workers: they give the CPU to receiving and exporting first (a lower priority)."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor

from otel_blame.processor import analysis
from otel_blame.processor.config import AttributionConfig, DetectionConfig


def test_a_worker_runs_at_the_configured_lower_priority() -> None:
    config = AttributionConfig(worker_niceness=7)
    with ProcessPoolExecutor(
        1, initializer=analysis.start_worker, initargs=(config, DetectionConfig(), None, os.getpid())
    ) as pool:
        worker_nice = pool.submit(os.nice, 0).result(timeout=60)
    assert worker_nice == min(19, os.nice(0) + 7)
