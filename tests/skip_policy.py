"""No silent skips: a pytest plugin that fails the run when a test skipped without being allowed to.

A skipped test is a promise nobody checked, and a green run that hides it is worse than a red one.
With ``--strict-skips`` (or ``OTEL_BLAME_STRICT_SKIPS=1``, which ``.ci/run`` sets) every skip must
match an entry of the allow-list, ``tests/allowed_skips.toml`` (or ``--allowed-skips PATH``): a
node-id pattern and the documented reason. Any other skip makes pytest exit with status 1 after
the usual report, and a section of the terminal summary names each one with its skip reason.
Without the switch, skips are only listed. Loaded by ``tests/conftest.py``; other projects'
pytest runs load it with ``-p tests.skip_policy``.
"""

from __future__ import annotations

import fnmatch
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ENV_STRICT = "OTEL_BLAME_STRICT_SKIPS"
DEFAULT_ALLOW_LIST = Path("tests") / "allowed_skips.toml"


@dataclass(frozen=True)
class AllowedSkip:
    """One allow-list entry: ``test`` is a node id or an fnmatch pattern of node ids."""

    test: str
    reason: str

    def covers(self, nodeid: str) -> bool:
        return nodeid == self.test or fnmatch.fnmatchcase(nodeid, self.test)


class AllowListError(ValueError):
    """The allow-list file is malformed; the message names the file and the entry."""


def load_allow_list(path: Path) -> list[AllowedSkip]:
    """Read ``[[allowed]]`` entries (``test``, ``reason``); a missing file allows nothing."""
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise AllowListError(f"{path}: not valid TOML: {error}") from None
    entries = data.get("allowed", [])
    if not isinstance(entries, list):
        raise AllowListError(f"{path}: 'allowed' must be an array of tables ([[allowed]])")
    allowed = []
    for number, entry in enumerate(entries, start=1):
        test = entry.get("test") if isinstance(entry, dict) else None
        reason = entry.get("reason") if isinstance(entry, dict) else None
        if not isinstance(test, str) or not test.strip():
            raise AllowListError(f"{path}: entry {number} has no 'test' (a node id or pattern)")
        if not isinstance(reason, str) or not reason.strip():
            raise AllowListError(f"{path}: entry {number} ({test}) has no 'reason'; say why it may skip")
        allowed.append(AllowedSkip(test.strip(), reason.strip()))
    return allowed


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr or "").strip()


def _strict_from_env() -> bool:
    return os.environ.get(ENV_STRICT, "").strip().lower() in {"1", "true", "yes", "on"}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("skip-policy", "no silent skips (tests/skip_policy.py)")
    group.addoption(
        "--strict-skips",
        action="store_true",
        default=_strict_from_env(),
        help=f"Fail the run on any skip not on the allow-list (default on when {ENV_STRICT}=1).",
    )
    group.addoption(
        "--allowed-skips",
        default=None,
        metavar="PATH",
        help=f"The allow-list of skips, TOML [[allowed]] test/reason (default: {DEFAULT_ALLOW_LIST}).",
    )


class SkipPolicy:
    """Collects every skip of the session and judges it against the allow-list at the end."""

    def __init__(self, strict: bool, allowed: list[AllowedSkip], source: Path) -> None:
        self.strict = strict
        self.allowed = allowed
        self.source = source
        self.skipped: dict[str, str] = {}

    def _allowed_by(self, nodeid: str) -> AllowedSkip | None:
        return next((entry for entry in self.allowed if entry.covers(nodeid)), None)

    def unlisted(self) -> dict[str, str]:
        return {nodeid: reason for nodeid, reason in self.skipped.items() if self._allowed_by(nodeid) is None}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skipped.setdefault(report.nodeid, _skip_reason(report))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:  # a module-level skip or importorskip
            self.skipped.setdefault(report.nodeid, _skip_reason(report))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        ok = (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
        if self.strict and self.unlisted() and session.exitstatus in ok:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:  # noqa: ANN001 - pytest's TerminalReporter
        if not self.skipped:
            return
        unlisted = self.unlisted()
        for nodeid in sorted(self.skipped):
            entry = self._allowed_by(nodeid)
            if entry is not None:
                terminalreporter.write_line(f"allowed skip: {nodeid} ({entry.reason})")
        if not unlisted:
            return
        title = "skips not on the allow-list" + (" (these fail the run)" if self.strict else "")
        terminalreporter.section(title, sep="=", red=self.strict, yellow=not self.strict)
        for nodeid, reason in sorted(unlisted.items()):
            terminalreporter.write_line(f"{nodeid}: {reason}")
        terminalreporter.write_line(
            f"Make the test run here, or add it with its reason to {self.source} if skipping is right."
        )


def pytest_configure(config: pytest.Config) -> None:
    option = config.getoption("--allowed-skips")
    source = Path(option) if option else Path(config.rootpath) / DEFAULT_ALLOW_LIST
    try:
        allowed = load_allow_list(source)
    except AllowListError as error:
        raise pytest.UsageError(str(error)) from None
    config.pluginmanager.register(
        SkipPolicy(bool(config.getoption("--strict-skips")), allowed, source), "otel-blame-skip-policy"
    )
