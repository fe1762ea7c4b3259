"""Suite-wide hooks: the no-silent-skips policy (tests/skip_policy.py, tests/allowed_skips.toml), and
the session's one throwaway PostgreSQL cluster (tests/postgres_cluster.py)."""

from tests.postgres_cluster import postgres_url  # noqa: F401 - a session fixture
from tests.skip_policy import pytest_addoption, pytest_configure  # noqa: F401 - pytest hooks
