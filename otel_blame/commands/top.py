"""``otel-blame top``: the culprit leaderboard (or ``--by pattern`` the failure patterns) of a running
processor or of a store file, in the terminal."""

from __future__ import annotations

from pathlib import Path

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
    "--store",
    "store_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Read a blame store file (SQLite, e.g. out/demo/blame-store.sqlite3) instead of a server.",
)
@click.option(
    "--token", envvar="OTEL_BLAME_UI_TOKEN", default=None, help="Bearer token, when the server needs one."
)
@click.option(
    "--all",
    "count_undecided",
    is_flag=True,
    help="Count undecided verdicts too (their likeliest candidate); default: decided verdicts only.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.2),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option("--once", is_flag=True, help="Print the table once and exit (for scripts).")
@click.option(
    "--by",
    type=click.Choice(["agent", "pattern"]),
    default="agent",
    show_default=True,
    help="agent: the culprit leaderboard; pattern: the failure patterns (what keeps breaking).",
)
def top_command(
    since: str,
    endpoint: str,
    store_path: Path | None,
    token: str | None,
    count_undecided: bool,
    interval: float,
    once: bool,
    by: str,
) -> None:
    """The culprit leaderboard of a running processor (or of a store file), refreshed live in the
    terminal; decided verdicts only, unless --all. --by pattern: its failure patterns instead."""
    try:
        from otel_blame.ui.top import StoreCulprits, TopError, run_top, server_culprits
        from otel_blame.ui.views import parse_duration
    except ImportError as error:
        raise click.ClickException(f"{_MISSING_EXTRA} ({error})") from None
    try:
        parse_duration(since)
    except (ValueError, KeyError):
        message = f"{since!r}: expected a duration such as 15m, 1h, 24h or 7d"
        raise click.BadParameter(message, param_hint="--since") from None
    try:
        if store_path is not None:
            with StoreCulprits(store_path) as source:
                run_top(source, since, count_undecided, interval, once, by=by)
        else:
            run_top(server_culprits(endpoint, token), since, count_undecided, interval, once, by=by)
    except TopError as error:
        raise click.ClickException(str(error)) from None
    except KeyboardInterrupt:
        pass
