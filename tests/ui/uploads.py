"""Uploading a file through the attribute page, as a person's browser does (the page first, for its
CSRF cookie)."""

from __future__ import annotations

from pathlib import Path

import httpx
from starlette.testclient import TestClient

from otel_blame.attribution.registry import DEFAULT_METHOD
from otel_blame.ui.security import CSRF_COOKIE


def upload(client: TestClient, file: Path, method: str = DEFAULT_METHOD) -> httpx.Response:
    """POST ``file`` to ``/ui/attribute`` with ``method`` (by default what the API uses when none is
    given); the answer is a redirect to the run's page."""
    client.get("/ui/attribute")
    return client.post(
        "/ui/attribute",
        files={"file": (file.name, file.read_bytes(), "application/json")},
        data={"method": method, "csrf_token": client.cookies.get(CSRF_COOKIE)},
    )
