"""``otel-blame top``: the culprit leaderboard of a running processor, in the terminal."""

from __future__ import annotations

import click

_MISSING_EXTRA = "otel-blame top needs the 'ui' extra: pip install 'otel-blame[ui]'"


@click.command("top")
@click.option(
    "--since", default="1h", show_default=True, help="Window to count blames over: 15m, 1h, 24h, 7d."
)
@click.option(
    "--endpoint",
    default="http://127.0.0.1:4318",
    show_default=True,
    envvar="OTEL_BLAME_ENDPOINT",
    help="The processor's HTTP address (serve's receivers.http_endpoint) or an `otel-blame ui` server.",
)
@click.option(
    "--token", envvar="OTEL_BLAME_UI_TOKEN", default=None, help="Bearer token, when the server needs one."
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.2),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option("--once", is_flag=True, help="Print the table once and exit (for scripts).")
def top_command(since: str, endpoint: str, token: str | None, interval: float, once: bool) -> None:
    """The culprit leaderboard of a running processor, refreshed live in the terminal."""
    try:
        from otel_blame.ui.top import TopError, run_top
        from otel_blame.ui.views import parse_duration
    except ImportError as error:
        raise click.ClickException(f"{_MISSING_EXTRA} ({error})") from None
    try:
        parse_duration(since)
    except (ValueError, KeyError):
        message = f"{since!r}: expected a duration such as 15m, 1h, 24h or 7d"
        raise click.BadParameter(message, param_hint="--since") from None
    try:
        run_top(endpoint, since, token, interval, once)
    except TopError as error:
        raise click.ClickException(str(error)) from None
    except KeyboardInterrupt:
        pass
