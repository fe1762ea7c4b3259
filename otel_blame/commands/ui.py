"""``otel-blame ui``: the web UI over a blame store, no processor needed."""

from __future__ import annotations

from pathlib import Path

import click

_MISSING_EXTRA = "the web UI needs the 'ui' extra: pip install 'otel-blame[ui]'"


@click.command("ui")
@click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("otel-blame-ui.sqlite3"),
    show_default=True,
    help="SQLite blame store to show (a processor's is <wal dir>/blame-store.sqlite3); created if missing.",
)
@click.option(
    "--store-url",
    envvar="OTEL_BLAME_STORE__URL",
    default=None,
    help="A shared PostgreSQL store instead (postgresql://user:pass@host/db); env OTEL_BLAME_STORE__URL.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8500, show_default=True, help="Port to listen on."
)
@click.option(
    "--auth-token",
    envvar="OTEL_BLAME_UI_TOKEN",
    default=None,
    help="Require this token: API as 'Authorization: Bearer', pages via a sign-in form "
    "(env OTEL_BLAME_UI_TOKEN).",
)
@click.option(
    "--jaeger-url", default=None, help="Link runs to Jaeger, e.g. http://localhost:16686/trace/{trace_id}."
)
@click.option("--tempo-url", default=None, help="Link runs to Grafana Tempo: a URL with {trace_id} in it.")
@click.option(
    "--max-upload-mib", type=click.FloatRange(min=0.001), default=16.0, show_default=True,
    help="Largest trace file accepted for attribution, in MiB.",
)  # fmt: skip
def ui_command(
    store_path: Path,
    store_url: str | None,
    host: str,
    port: int,
    auth_token: str | None,
    jaeger_url: str | None,
    tempo_url: str | None,
    max_upload_mib: float,
) -> None:
    """Serve the web UI and its JSON API (http://HOST:PORT/ui/): failures, runs, culprits, and
    attributing an uploaded trace file. LLM methods are offered when OPENAI_BASE_URL or
    OPENAI_API_KEY is set."""
    try:
        import uvicorn

        from otel_blame.store import StoreConfig, open_store
        from otel_blame.ui.app import create_ui_app
        from otel_blame.ui.settings import UISettings
    except ImportError as error:
        raise click.ClickException(f"{_MISSING_EXTRA} ({error})") from None
    from otel_blame.attribution.llm_settings import LLMSettings

    llm = LLMSettings.from_env()
    settings = UISettings(
        auth_token=auth_token or None,
        jaeger_url_template=jaeger_url,
        tempo_url_template=tempo_url,
        max_upload_bytes=int(max_upload_mib * 1024 * 1024),
        llm=llm if (llm.base_url or llm.api_key) else None,
    )
    try:
        store = open_store(StoreConfig(path=store_path, url=store_url or None))
    except Exception as error:  # a bad URL, an unreachable database, an unwritable file
        raise click.ClickException(f"cannot open the blame store: {error}") from None
    click.echo(f"otel-blame ui: http://{host}:{port}/ui/ (store: {store_url and 'PostgreSQL' or store_path})")
    try:
        uvicorn.run(create_ui_app(store, settings), host=host, port=port, log_level="warning")
    finally:
        store.close()
