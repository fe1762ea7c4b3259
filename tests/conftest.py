"""Suite-wide hooks: the no-silent-skips policy (tests/skip_policy.py, tests/allowed_skips.toml), the
session's one throwaway PostgreSQL cluster (tests/postgres_cluster.py; one per pytest-xdist worker),
and no LLM endpoint from the developer's environment (with one, the offline default would escalate its
undecided verdicts to it)."""

import pytest

from tests.postgres_cluster import postgres_url  # noqa: F401 - a session fixture
from tests.skip_policy import pytest_addoption, pytest_configure  # noqa: F401 - pytest hooks

_LLM_ENVIRONMENT = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OTEL_BLAME_MODEL", "OTEL_BLAME_ESCALATION")


@pytest.fixture(autouse=True)
def _no_llm_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests that want an endpoint set one (a scripted server's URL, or the variables themselves)."""
    for name in _LLM_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
