"""`otel-blame attribute` on a small file with the offline method loads none of the heavy libraries
it does not use (the OpenAI SDK, gRPC, the web stack, the store, rich: its output is printed with
click; nor the redaction patterns, built at the first log line): start-up imports were most of its
1.2-1.4 s (docs/benchmarks.md has the timings)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.store.runs import WHO_AND_WHEN


def test_attribute_imports_only_what_it_uses() -> None:
    file = WHO_AND_WHEN / "Hand-Crafted" / "1.json"
    probe = (
        "import sys\n"
        "from otel_blame.cli import main\n"
        "try:\n"
        f"    main(['attribute', {str(file)!r}], prog_name='otel-blame')\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('openai', 'grpc', 'starlette', 'uvicorn', 'sqlalchemy', 'jinja2', 'opentelemetry', 'rich',"
        " 'otel_blame.processor', 'otel_blame.ui', 'otel_blame.store', 'httpx', 'tenacity',"
        " 'otel_blame.attribution.llm_methods', 'otel_blame.attribution.llm_client',"
        " 'otel_blame.redaction')\n"
        "print('LOADED', sorted({m for m in sys.modules if m.startswith(heavy)}))\n"
    )
    env_without_plugins = {"PYDANTIC_DISABLE_PLUGINS": "__all__"}  # the dev venv's logfire plugin
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, **env_without_plugins},
    )
    assert "outcome:" in result.stdout and "reason:" in result.stdout
    assert "LOADED []" in result.stdout, result.stdout[-2000:]


def test_the_registry_names_every_llm_method_without_importing_them() -> None:
    from otel_blame.attribution.llm_methods import LLM_METHODS
    from otel_blame.attribution.registry import LLM_METHOD_NAMES, create_method, is_llm_method

    assert LLM_METHOD_NAMES == tuple(LLM_METHODS)
    assert all(is_llm_method(name) for name in LLM_METHODS)
    assert create_method("heuristic").name == "heuristic"
    assert create_method("ranker").name == "ranker"
