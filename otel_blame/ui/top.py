"""``otel-blame top``: the culprit leaderboard (or, ``--by pattern``, the failure patterns) of a running
processor or a store file, in the terminal; and the patterns table ``otel-blame patterns`` prints."""

from __future__ import annotations

import io
import time
from pathlib import Path
from types import TracebackType
from typing import Protocol

import httpx
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from otel_blame.patterns import PatternReport, PatternSummary
from otel_blame.store.records import CulpritCount, CulpritReport
from otel_blame.terminal import fit_name
from otel_blame.ui.views import parse_duration


class TopError(Exception):
    """The endpoint or the store cannot be read; the message says why."""


class CulpritSource(Protocol):
    """Where the leaderboard comes from: a server's ``/api/culprits``, or a store file."""

    name: str

    def fetch(self, since: str, count_undecided: bool) -> CulpritReport: ...

    def fetch_patterns(self, since: str) -> PatternReport: ...


class server_culprits:  # noqa: N801 - reads as the function it stands in for
    """A processor's or an ``otel-blame ui`` server's ``/api/culprits``."""

    def __init__(self, endpoint: str, token: str | None, timeout: float = 5.0) -> None:
        self.name = endpoint
        self._url = endpoint.rstrip("/") + "/api/culprits"
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout

    def fetch(self, since: str, count_undecided: bool) -> CulpritReport:
        params = {"window": since, "undecided": "1" if count_undecided else "0"}
        return self._get(self._url, params, CulpritReport, "a culprit report")

    def fetch_patterns(self, since: str) -> PatternReport:
        url = self._url.removesuffix("/api/culprits") + "/api/patterns"
        return self._get(url, {"window": since}, PatternReport, "a patterns report")

    def _get(self, url: str, params: dict[str, str], model, what: str):  # noqa: ANN001, ANN202
        try:
            response = httpx.get(url, params=params, headers=self._headers, timeout=self._timeout)
        except httpx.HTTPError as error:
            raise TopError(f"cannot reach {url}: {error}") from None
        if response.status_code == 401:
            raise TopError(f"{url} needs a token: pass --token or set OTEL_BLAME_UI_TOKEN")
        if response.status_code != 200:
            raise TopError(f"{url} answered {response.status_code}: {response.text[:200]}")
        try:
            return model.model_validate_json(response.content)
        except ValueError as error:
            raise TopError(f"{url} did not answer {what}: {error}") from None


class StoreCulprits:
    """A blame store file (``--store``), read as the UI reads it; a context manager that closes it."""

    def __init__(self, path: Path) -> None:
        from otel_blame.store import StoreConfig, open_store

        self.name = str(path)
        try:
            self._store = open_store(StoreConfig(path=path))
            self._store.count()
        except Exception as error:  # not SQLite, not a blame store, unreadable
            why = f"{type(error).__name__}: {error}"
            raise TopError(f"{path} cannot be read as a blame store: {why}") from None

    def fetch(self, since: str, count_undecided: bool) -> CulpritReport:
        try:
            return self._store.culprits(parse_duration(since), count_undecided=count_undecided)
        except Exception as error:
            raise TopError(f"{self.name}: {type(error).__name__}: {error}") from None

    def fetch_patterns(self, since: str) -> PatternReport:
        try:
            return self._store.patterns(parse_duration(since))
        except Exception as error:
            raise TopError(f"{self.name}: {type(error).__name__}: {error}") from None

    def __enter__(self) -> StoreCulprits:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._store.close()


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


def _shrink(agent: int, service: int, excess: int, least: int = 8) -> tuple[int, int]:
    """Take ``excess`` columns from the agent and service widths, from the wider first, to ``least``."""
    while excess > 0 and (agent > least or service > least):
        if agent >= service and agent > least:
            agent -= 1
        elif service > least:
            service -= 1
        else:
            agent -= 1
        excess -= 1
    return agent, service


def render(
    report: CulpritReport,
    source: str,
    since: str,
    limit: int = 20,
    width: int = 120,
    live: bool = False,
) -> Group:
    """The leaderboard, fitting ``width`` columns: at 80 the sparkline keeps every bucket it shows
    (buckets are merged to 12) and the share is left out; agent and service names are whole unless
    the table would not fit, and then cut at a word, the wider column first. ``live``: the refreshing
    view, whose footer says how to quit."""
    narrow = width < 110
    rows = report.culprits[:limit]
    agent = max((len(c.agent) for c in rows), default=5)
    service = max((len(c.service or "-") for c in rows), default=7)
    table = _table(report, rows, since, narrow, agent, service)
    for _ in range(3):  # the names' widths only change the table's by as much: one shrink fits, as a rule
        excess = _rendered_width(table) - width
        if excess <= 0:
            break
        agent, service = _shrink(agent, service, excess)
        table = _table(report, rows, since, narrow, agent, service)
    counted = (
        "decided and undecided verdicts"
        if report.undecided_counted
        else "decided verdicts"
        + (f"; {report.undecided} undecided not counted (--all counts them)" if report.undecided else "")
    )
    said = f"{report.total} blames ({counted}) · {source} · updated {time.strftime('%H:%M:%S')}"
    footer = Text(said + (" · Ctrl-C to quit" if live else ""), style="dim")
    if not report.culprits:
        return Group(Text(f"no agent blamed in the last {since}", style="green"), footer)
    return Group(table, footer)


def _rendered_width(table: Table) -> int:
    """How wide the table prints when nothing limits it."""
    console = Console(width=10_000, record=True, file=io.StringIO())
    console.print(table)
    return max((len(line) for line in console.export_text().splitlines()), default=0)


def _table(
    report: CulpritReport, rows: list[CulpritCount], since: str, narrow: bool, agent: int, service: int
) -> Table:
    spark = 12 if narrow else 24
    table = Table(
        title=f"culprits over the last {since}",
        title_justify="left",
        expand=False,
        box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD,
        pad_edge=not narrow,
        collapse_padding=narrow,
    )
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("agent", style="bold", no_wrap=True, min_width=min(agent, 5))
    table.add_column("service", no_wrap=True, min_width=min(service, 7))
    table.add_column("blames", justify="right", style="bold red", no_wrap=True)
    if not narrow:  # at 80 columns the share goes: the blames say it
        table.add_column("share", justify="right", no_wrap=True)
    table.add_column("methods", no_wrap=narrow, overflow="fold", max_width=None if narrow else 30)
    table.add_column("over time", no_wrap=True, min_width=spark)
    table.add_column("last", justify="right", no_wrap=True)
    now = time.time()
    series = {(s.service, s.agent): s.counts for s in report.series}
    for position, culprit in enumerate(rows, start=1):
        share = culprit.count / report.total if report.total else 0.0
        ago = int(now - culprit.last_seen)
        shares = [] if narrow else [f"{100 * share:.0f}%"]
        table.add_row(
            str(position),
            fit_name(culprit.agent, agent),
            fit_name(culprit.service or "-", service),
            str(culprit.count),
            *shares,
            ("\n" if narrow else ", ").join(f"{m} {n}" for m, n in sorted(culprit.methods.items())),
            _sparkline(fit_buckets(series.get((culprit.service, culprit.agent), []), spark)),
            _ago(ago, narrow),
        )
    return table


def _ago(seconds: int, narrow: bool) -> str:
    value = f"{seconds // 60} min" if seconds >= 60 else f"{seconds} s"
    return value if narrow else f"{value} ago"


def render_patterns(
    report: PatternReport,
    source: str,
    since: str | None,
    limit: int = 20,
    width: int = 120,
    live: bool = False,
) -> Group:
    """The failure patterns, most runs first, fitting ``width`` columns: at 80 a pattern's id, what it
    is (wrapped at words), its runs, a sparkline and when it was last seen; wider, also its workflow,
    first sighting and agents. Then how many undecided runs no pattern counts."""
    narrow = width < 110
    table = _patterns_table(report.patterns[:limit], since, narrow)
    undecided = (
        f"; {report.undecided_runs} undecided runs in no pattern (nothing decided about their cause)"
        if report.undecided_runs
        else ""
    )
    said = f"{report.total} runs in {len(report.patterns)} patterns{undecided} · {source}"
    if live:
        said += f" · updated {time.strftime('%H:%M:%S')} · Ctrl-C to quit"
    footer = Text(said, style="dim")
    if not report.patterns:
        window = f" in the last {since}" if since else ""
        return Group(Text(f"no failure pattern{window}", style="green"), footer)
    return Group(table, footer)


def _patterns_table(rows: list[PatternSummary], since: str | None, narrow: bool) -> Table:
    spark = 12 if narrow else 24
    table = Table(
        title=f"failure patterns over the last {since}" if since else "failure patterns",
        title_justify="left",
        expand=False,
        box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD,
        pad_edge=not narrow,
        collapse_padding=narrow,
    )
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("pattern", no_wrap=True)
    table.add_column("cause", min_width=20, ratio=1)
    if not narrow:
        table.add_column("workflow", no_wrap=True, max_width=28)
    table.add_column("runs", justify="right", style="bold red", no_wrap=True)
    table.add_column("over time", no_wrap=True, min_width=spark)
    if not narrow:
        table.add_column("first", justify="right", no_wrap=True)
        table.add_column("agents", no_wrap=True, max_width=24)
    table.add_column("last", justify="right", no_wrap=True)
    now = time.time()
    for position, pattern in enumerate(rows, start=1):
        cells = [str(position), pattern.id, pattern.title]
        if not narrow:
            cells.append(fit_name(f"{pattern.service or '-'}/{pattern.workflow}", 28))
        cells += [str(pattern.count), _sparkline(fit_buckets(pattern.series, spark))]
        if not narrow:
            cells.append(_age(now - pattern.first_seen))
            cells.append(fit_name(", ".join(f"{a} {n}" for a, n in list(pattern.agents.items())[:3]), 24))
        cells.append(_age(now - pattern.last_seen))
        table.add_row(*cells)
    return table


def _age(seconds: float) -> str:
    """How long ago, in the largest unit that keeps it short: 45 s, 12 min, 5 h, 3 d."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 120 * 60:
        return f"{seconds // 60} min"
    if seconds < 48 * 3600:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def run_top(
    source: CulpritSource,
    since: str,
    count_undecided: bool,
    interval: float,
    once: bool,
    console: Console | None = None,
    by: str = "agent",
) -> None:
    console = console or Console()

    def view(live: bool) -> Group:
        if by == "pattern":
            return render_patterns(
                source.fetch_patterns(since), source.name, since, width=console.width, live=live
            )
        return render(
            source.fetch(since, count_undecided), source.name, since, width=console.width, live=live
        )

    if once:
        console.print(view(False))
        return
    with Live(console=console, refresh_per_second=4, screen=False) as live:
        while True:
            try:
                live.update(view(True))
            except TopError as error:
                live.update(Text(f"{error} (retrying every {interval:g} s)", style="yellow"))
            time.sleep(interval)
