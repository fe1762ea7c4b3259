"""The no-silent-skips policy (tests/skip_policy.py), run as CI runs it: a real pytest subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.skip_policy import AllowListError, load_allow_list

REPO = Path(__file__).resolve().parents[1]

SUITE = """
import pytest

def test_passes():
    assert True

def test_needs_a_tool():
    pytest.skip("frobnicator not installed")
"""


def _run(tmp_path: Path, *args: str, strict_env: str | None = None, files: dict[str, str] | None = None):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # this directory is the rootdir
    for name, text in (files or {"test_suite.py": SUITE}).items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "OTEL_BLAME_STRICT_SKIPS"}
    env["PYTHONPATH"] = str(REPO)
    if strict_env is not None:
        env["OTEL_BLAME_STRICT_SKIPS"] = strict_env
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.skip_policy", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_unlisted_skip_fails_a_strict_run_and_the_summary_still_prints(tmp_path: Path):
    result = _run(tmp_path, "--strict-skips")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "skips not on the allow-list (these fail the run)" in result.stdout
    assert "test_suite.py::test_needs_a_tool: frobnicator not installed" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith("1 passed, 1 skipped in ")


def test_the_environment_switch_is_what_ci_sets(tmp_path: Path):
    assert _run(tmp_path, strict_env="1").returncode == 1
    assert _run(tmp_path, strict_env="0").returncode == 0


def test_a_skip_on_the_allow_list_passes_with_its_reason_shown(tmp_path: Path):
    allow = tmp_path / "allowed.toml"
    allow.write_text(
        '[[allowed]]\ntest = "test_suite.py::test_needs_*"\nreason = "the frobnicator has no Linux build"\n'
    )
    result = _run(tmp_path, "--strict-skips", "--allowed-skips", str(allow))
    assert result.returncode == 0, result.stdout
    assert (
        "allowed skip: test_suite.py::test_needs_a_tool (the frobnicator has no Linux build)" in result.stdout
    )
    assert "not on the allow-list" not in result.stdout


def test_without_the_switch_skips_are_listed_but_do_not_fail(tmp_path: Path):
    result = _run(tmp_path)
    assert result.returncode == 0
    assert "skips not on the allow-list" in result.stdout and "these fail the run" not in result.stdout


def test_a_module_level_importorskip_counts(tmp_path: Path):
    module = "import pytest\npytest.importorskip('no_such_module_here')\n\ndef test_x():\n    pass\n"
    result = _run(tmp_path, "--strict-skips", files={"test_optional.py": module})
    assert result.returncode == 1, result.stdout
    assert "test_optional.py: could not import 'no_such_module_here'" in result.stdout


def test_a_failure_keeps_its_own_exit_status(tmp_path: Path):
    failing = SUITE + "\ndef test_fails():\n    assert False\n"
    result = _run(tmp_path, "--strict-skips", files={"test_suite.py": failing})
    assert result.returncode == 1 and "1 failed, 1 passed, 1 skipped" in result.stdout


def test_an_allow_list_entry_without_a_reason_is_a_usage_error(tmp_path: Path):
    allow = tmp_path / "allowed.toml"
    allow.write_text('[[allowed]]\ntest = "test_suite.py::test_needs_a_tool"\n')
    result = _run(tmp_path, "--strict-skips", "--allowed-skips", str(allow))
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert f"{allow}: entry 1 (test_suite.py::test_needs_a_tool) has no 'reason'" in result.stderr


def test_the_project_allow_list_is_valid_and_short(tmp_path: Path):
    entries = load_allow_list(REPO / "tests" / "allowed_skips.toml")
    assert len(entries) <= 5 and all(entry.reason for entry in entries)
    bad = tmp_path / "bad.toml"
    bad.write_text("[[allowed]\n")
    with pytest.raises(AllowListError, match="not valid TOML"):
        load_allow_list(bad)


@pytest.mark.parametrize(("strict", "status"), [("", 0), ("1", 2)])
def test_make_system_packages_fails_in_ci_when_it_cannot_install(tmp_path: Path, strict: str, status: int):
    """Not root and no sudo: outside CI a warning (the alerting tests will skip), in CI an error."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "id").write_text("#!/bin/sh\necho 1000\n")  # an unprivileged user; no sudo on PATH
    (fake_bin / "id").chmod(0o755)
    env = {"PATH": str(fake_bin), "OTEL_BLAME_STRICT_SKIPS": strict, "HOME": str(tmp_path)}
    make = shutil.which("make")
    assert make, "make is what .ci/run runs"
    result = subprocess.run(
        [make, "-s", "system-packages", "SYSTEM_BINARIES=/nonexistent/promtool"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == status, result.stdout + result.stderr
    assert ("ERROR: not root and no sudo" if strict else "WARNING: not root and no sudo") in result.stderr


def test_skips_on_xdist_workers_count_too(tmp_path: Path):
    """`make test` runs pytest-xdist: a skip in a worker, at run or at collection, reaches the policy."""
    module = "import pytest\npytest.importorskip('no_such_module_here')\n\ndef test_x():\n    pass\n"
    files = {"test_suite.py": SUITE, "test_optional.py": module}
    result = _run(tmp_path, "--strict-skips", "-n", "2", files=files)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "test_suite.py::test_needs_a_tool: frobnicator not installed" in result.stdout
    assert "test_optional.py: could not import 'no_such_module_here'" in result.stdout
