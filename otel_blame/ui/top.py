"""``otel-blame top``: the culprit leaderboard of a running processor, refreshed in the terminal."""

from __future__ import annotations

import time

import httpx
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from otel_blame.store.records import CulpritReport


class TopError(Exception):
    """The endpoint cannot be read; the message says why."""


def fetch_culprits(endpoint: str, since: str, token: str | None, timeout: float = 5.0) -> CulpritReport:
    url = endpoint.rstrip("/") + "/api/culprits"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(url, params={"window": since}, headers=headers, timeout=timeout)
    except httpx.HTTPError as error:
        raise TopError(f"cannot reach {url}: {error}") from None
    if response.status_code == 401:
        raise TopError(f"{url} needs a token: pass --token or set OTEL_BLAME_UI_TOKEN")
    if response.status_code != 200:
        raise TopError(f"{url} answered {response.status_code}: {response.text[:200]}")
    try:
        return CulpritReport.model_validate_json(response.content)
    except ValueError as error:
        raise TopError(f"{url} did not answer a culprit report: {error}") from None


def fit_buckets(counts: list[int], most: int) -> list[int]:
    """At most ``most`` buckets: neighbours are summed, so a narrow terminal shows the whole window."""
    if len(counts) <= most or most < 1:
        return counts
    size = -(-len(counts) // most)  # ceil
    return [sum(counts[i : i + size]) for i in range(0, len(counts), size)]


def _sparkline(counts: list[int]) -> str:
    blocks = " ▁▂▃▄▅▆▇█"
    peak = max(counts, default=0)
    if not peak:
        return "·" * len(counts)
    return "".join(blocks[min(8, round(8 * n / peak))] if n else "·" for n in counts)


def render(report: CulpritReport, endpoint: str, since: str, limit: int = 20, width: int = 120) -> Group:
    """The leaderboard, fitting ``width`` columns: at 80 the sparkline keeps every bucket it shows
    (buckets are merged to 12), long names are cut with an ellipsis and the share is left out."""
    narrow = width < 110
    spark = 12 if narrow else 24
    table = Table(
        title=f"culprits over the last {since}",
        title_justify="left",
        expand=False,
        box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD,
        pad_edge=not narrow,
    )
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("agent", style="bold", no_wrap=True, overflow="ellipsis", max_width=14 if narrow else 32)
    table.add_column("service", no_wrap=True, overflow="ellipsis", max_width=10 if narrow else 24)
    table.add_column("blames", justify="right", style="bold red", no_wrap=True)
    if not narrow:  # at 80 columns the share goes: the blames say it
        table.add_column("share", justify="right", no_wrap=True)
    table.add_column("methods", overflow="fold", min_width=13 if narrow else None, max_width=30)
    table.add_column("over time", no_wrap=True, min_width=spark)
    table.add_column("last", justify="right", no_wrap=True)
    now = time.time()
    series = {(s.service, s.agent): s.counts for s in report.series}
    for position, culprit in enumerate(report.culprits[:limit], start=1):
        share = culprit.count / report.total if report.total else 0.0
        ago = int(now - culprit.last_seen)
        shares = [] if narrow else [f"{100 * share:.0f}%"]
        table.add_row(
            str(position),
            culprit.agent,
            culprit.service or "-",
            str(culprit.count),
            *shares,
            ("\n" if narrow else ", ").join(f"{m} {n}" for m, n in sorted(culprit.methods.items())),
            _sparkline(fit_buckets(series.get((culprit.service, culprit.agent), []), spark)),
            _ago(ago, narrow),
        )
    footer = Text(
        f"{report.total} blames · {endpoint} · updated {time.strftime('%H:%M:%S')} · Ctrl-C to quit",
        style="dim",
    )
    if not report.culprits:
        return Group(Text(f"no agent blamed in the last {since}", style="green"), footer)
    return Group(table, footer)


def _ago(seconds: int, narrow: bool) -> str:
    value = f"{seconds // 60} min" if seconds >= 60 else f"{seconds} s"
    return value if narrow else f"{value} ago"


def run_top(
    endpoint: str, since: str, token: str | None, interval: float, once: bool, console: Console | None = None
) -> None:
    console = console or Console()
    if once:
        console.print(render(fetch_culprits(endpoint, since, token), endpoint, since, width=console.width))
        return
    with Live(console=console, refresh_per_second=4, screen=False) as live:
        while True:
            try:
                report = fetch_culprits(endpoint, since, token)
                live.update(render(report, endpoint, since, width=console.width))
            except TopError as error:
                live.update(Text(f"{error} (retrying every {interval:g} s)", style="yellow"))
            time.sleep(interval)
