"""The shipped ranker with another decided threshold, so a test chooses which verdicts are decided
(the real threshold is fitted, and moves)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from otel_blame.attribution import ranker

ALWAYS_DECIDED = 0.0  # every verdict's confidence reaches it
NEVER_DECIDED = 1.01  # no confidence reaches it (the ranker's is at most 0.95)


def set_decided_threshold(monkeypatch: pytest.MonkeyPatch, threshold: float) -> None:
    """In this process, until the test ends: the packaged model with ``decided_threshold`` replaced."""
    model = replace(ranker._packaged_model(), decided_threshold=threshold)
    monkeypatch.setattr(ranker, "_packaged_model", lambda: model)
