"""Suite-wide hooks: the no-silent-skips policy (tests/skip_policy.py, tests/allowed_skips.toml)."""

from tests.skip_policy import pytest_addoption, pytest_configure  # noqa: F401 - pytest hooks
