"""The ``otel-blame`` console script: the command line when its dependencies are installed, else a
clear message saying which extra to install (``pip install otel-blame`` alone is the light,
instrumentation-only install)."""

from __future__ import annotations

import importlib.util
import sys

# top-level modules of the `processor` extra that the command line imports
REQUIRED_MODULES = ("click", "pydantic", "yaml", "grpc", "openai", "rich", "opentelemetry.exporter.otlp")


def missing_modules() -> list[str]:
    missing = []
    for name in REQUIRED_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:  # a parent package is missing
            found = False
        if not found:
            missing.append(name)
    return missing


def main() -> None:
    missing = missing_modules()
    if missing:
        sys.stderr.write(
            "otel-blame: this install has the instrumentation only; the command line needs the "
            f"processor's dependencies (missing: {', '.join(missing)}).\n"
            "Install them with:  pip install 'otel-blame[processor]'\n"
        )
        sys.exit(2)
    from otel_blame.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
