"""Without the processor extra, the command and `serve` say in one line what to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

HINT = "pip install 'otel-blame[processor]'"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "hidden", ["uvicorn", "starlette", "prometheus_client", "pydantic_settings", "tenacity"]
)
def test_the_console_script_names_the_missing_module_and_the_extra_in_one_line(hidden: str) -> None:
    # sys.modules[name] = None makes the module as absent as an install without the extra would
    result = _run(
        f"import sys; sys.modules[{hidden!r}] = None; sys.argv = ['otel-blame', 'serve', '--help']\n"
        "from otel_blame.console_script import main; main()"
    )
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert hidden in lines[0] and HINT in lines[0]
    assert "Traceback" not in result.stderr and not result.stdout


def test_serve_without_the_http_receiver_says_which_extra_in_one_line() -> None:
    # `python -m otel_blame.cli serve` skips the console script's check: serve itself must say it
    result = _run(
        "import sys; sys.modules['uvicorn'] = None\n"
        "from otel_blame.cli import main\n"
        "main(['serve', '--downstream', '127.0.0.1:4317'])"
    )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "uvicorn" in lines[0] and HINT in lines[0]
