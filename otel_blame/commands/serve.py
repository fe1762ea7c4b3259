"""``otel-blame serve`` (run the processor) and ``otel-blame verdict`` (report a late failure).

``serve`` is the composition root of the processor: its configuration is the processor's sections
plus the blame store's and the web UI's (:class:`ServeConfig`), and it plugs the store (a blame
listener, the source of ``/metrics``' culprit counters and of verdict answers) and the UI (routes
on the HTTP port) into the processor as an extension. ``otel_blame.processor`` imports neither.
"""

from __future__ import annotations

import gc
import json
import signal
import ssl
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from pydantic import Field

from otel_blame.processor.config import ConfigError, ProcessorConfig, load_config
from otel_blame.store.config import StoreConfig
from otel_blame.ui.settings import UIConfig

if TYPE_CHECKING:
    from otel_blame.processor.pipeline import BlameProcessor


class ServeConfig(ProcessorConfig):
    """What ``otel-blame serve`` reads: the processor's sections, the blame store's and the web UI's."""

    store: StoreConfig = Field(default_factory=StoreConfig)  # the blame store the web UI reads
    ui: UIConfig = Field(default_factory=UIConfig)  # /ui/ and /api/ on the HTTP port


def load_serve_config(
    path: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServeConfig:
    """YAML file (optional) <- environment <- overrides, as :func:`otel_blame.processor.load_config`."""
    config = load_config(path, overrides=overrides, environ=environ, schema=ServeConfig)
    assert isinstance(config, ServeConfig)
    return config


def serving_processor(config: ServeConfig, **options: Any) -> BlameProcessor:
    """A processor with the blame store and the web UI plugged in, as ``otel-blame serve`` runs it
    (``options``: :class:`~otel_blame.processor.pipeline.BlameProcessor`'s keyword arguments)."""
    from otel_blame.processor.pipeline import BlameProcessor
    from otel_blame.ui.attach import attach_blame_ui

    def blame_store_and_ui(listeners: list[Any], http_routes: list[Any], metrics: Any) -> Any:
        return attach_blame_ui(config, listeners, http_routes, metrics)

    extensions = [*options.pop("extensions", ()), blame_store_and_ui]
    return BlameProcessor(config, extensions=extensions, **options)


@click.command("serve")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML configuration file; the options below override it (docs/processor.md).",
)
@click.option("--grpc-endpoint", help="OTLP/gRPC listen address HOST:PORT (receivers.grpc_endpoint).")
@click.option("--http-endpoint", help="OTLP/HTTP listen address HOST:PORT (receivers.http_endpoint).")
@click.option("--downstream", help="Where to send spans: HOST:PORT for OTLP/gRPC (exporter.endpoint).")
@click.option(
    "--wal-dir", type=click.Path(file_okay=False, path_type=Path), help="Write-ahead log directory."
)
@click.option("--quiet-period", type=float, help="Seconds without spans after the root ended.")
@click.option("--method", help="Attribution method (attribution.method), default heuristic.")
def serve(
    config_file: Path | None,
    grpc_endpoint: str | None,
    http_endpoint: str | None,
    downstream: str | None,
    wal_dir: Path | None,
    quiet_period: float | None,
    method: str | None,
) -> None:
    """Run the blame processor: OTLP in, failed traces attributed, OTLP out.

    Configuration: FILE (YAML) <- OTEL_BLAME_<SECTION>__<KEY> environment variables <- flags.
    """
    try:
        import otel_blame.processor.pipeline  # noqa: F401 - the `processor` extra's dependencies
    except ModuleNotFoundError as error:  # run as `python -m otel_blame.cli` without the extra
        from otel_blame.console_script import missing_extra_message

        raise click.ClickException(missing_extra_message([error.name or str(error)])) from None

    overrides: dict[str, dict[str, Any]] = {}

    def put(section: str, key: str, value: object) -> None:
        if value is not None:
            overrides.setdefault(section, {})[key] = str(value) if isinstance(value, Path) else value

    put("receivers", "grpc_endpoint", grpc_endpoint)
    put("receivers", "http_endpoint", http_endpoint)
    put("exporter", "endpoint", downstream)
    put("wal", "dir", wal_dir)
    put("assembly", "quiet_period", quiet_period)
    put("attribution", "method", method)
    try:
        config = load_serve_config(config_file, overrides=overrides)
    except ConfigError as error:
        raise click.UsageError(str(error)) from None
    if not config.exporter.endpoint:
        raise click.UsageError("exporter.endpoint: set a downstream with --downstream HOST:PORT")
    try:
        processor = serving_processor(config)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        processor.start()
    except OSError as error:
        raise click.ClickException(f"cannot start: {error}") from None
    # Our own process: fewer, cheaper garbage collections (buffered traces are long-lived
    # objects that full collections would otherwise walk again and again).
    gc.freeze()
    gc.set_threshold(50_000, 50, 1_000)
    click.echo(
        json.dumps({"event": "ready", "grpc": processor.grpc_endpoint, "http": processor.http_endpoint}),
        err=False,
    )
    sys.stdout.flush()
    while not stop.wait(0.5):
        pass
    delivered = processor.stop()
    click.echo(json.dumps({"event": "stopped", "all_delivered": delivered}))


@click.command("verdict")
@click.argument("trace_id")
@click.option("--failed/--succeeded", default=True, show_default=True, help="The run's outcome.")
@click.option("--expected-output", help="What the run should have produced.")
@click.option(
    "--endpoint",
    default="http://127.0.0.1:4318",
    show_default=True,
    envvar="OTEL_BLAME_VERDICT_ENDPOINT",
    help="The processor's HTTP address.",
)
@click.option(
    "--token", envvar="OTEL_BLAME_RECEIVERS__AUTH_TOKEN", help="Bearer token, if the processor wants one."
)
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False), help="CA for an https endpoint.")
@click.option(
    "--timeout",
    type=float,
    default=180.0,
    show_default=True,
    help="Seconds to wait for the processor's answer (attribution may call an LLM).",
)
def verdict(
    trace_id: str,
    failed: bool,
    expected_output: str | None,
    endpoint: str,
    token: str | None,
    ca_file: str | None,
    timeout: float,
) -> None:
    """Report that trace TRACE_ID failed (known only later): the processor attributes it and adds a
    span 'blame {agent}' to the trace."""
    body: dict[str, Any] = {"trace_id": trace_id, "outcome": "failure" if failed else "success"}
    if expected_output is not None:
        body["expected_output"] = expected_output
    url = endpoint if "://" in endpoint else f"http://{endpoint}"
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/verdicts",
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            **({"Authorization": f"Bearer {token}"} if token else {}),
        },
        method="POST",
    )
    context = ssl.create_default_context(cafile=ca_file) if url.startswith("https") else None
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            click.echo(response.read().decode())
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace")
        raise click.ClickException(f"HTTP {error.code}: {detail}") from None
    except urllib.error.URLError as error:
        raise click.ClickException(f"cannot reach {url}: {error.reason}") from None
