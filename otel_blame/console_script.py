"""The ``otel-blame`` console script: the command line when its dependencies are installed, else a
clear message saying which extra to install (``pip install otel-blame`` alone is the light,
instrumentation-only install)."""

from __future__ import annotations

import importlib.util
import sys

# top-level modules of the `processor` extra that the command line (and `serve`) imports
REQUIRED_MODULES = (
    "click",
    "pydantic",
    "yaml",
    "grpc",
    "openai",
    "rich",
    "opentelemetry.exporter.otlp",
    "opentelemetry.proto",
    "starlette",
    "uvicorn",
    "prometheus_client",
    "pydantic_settings",
    "tenacity",
)
INSTALL_HINT = "pip install 'otel-blame[processor]'"


def missing_extra_message(missing: list[str]) -> str:
    """The one line the command prints when the processor extra is not (fully) installed."""
    return (
        f"otel-blame: the command line needs the processor extra (missing: {', '.join(missing)}); "
        f"install it with: {INSTALL_HINT}"
    )


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
        sys.stderr.write(missing_extra_message(missing) + "\n")
        sys.exit(2)
    from otel_blame.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
