"""At 80 columns the CLI's tables stay readable: `attribute`'s step table shows the steps' text, and
`top`'s sparkline is whole (both were cut before: "Yo…", a truncated sparkline)."""

from __future__ import annotations

import re
import time

from click.testing import CliRunner
from rich.console import Console

from otel_blame.cli import main
from otel_blame.loaders import load_trajectory
from otel_blame.store.records import CulpritCount, CulpritReport, CulpritSeries
from otel_blame.ui.top import render
from tests.store.runs import WHO_AND_WHEN


def test_the_step_table_fits_80_columns_and_shows_the_text() -> None:
    file = WHO_AND_WHEN / "Hand-Crafted" / "1.json"
    result = CliRunner().invoke(main, ["attribute", str(file)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines if not line.startswith("file:")) <= 80
    first_words = " ".join(load_trajectory(file).steps[0].content.split())[:30]
    row = next(line for line in lines if line.strip().startswith("0 "))
    assert first_words in row, row


def _report(agents: int) -> CulpritReport:
    now = time.time()
    counts = [(i * 7) % 5 for i in range(24)]
    culprits = [
        CulpritCount(
            service="checkout-service-eu",
            agent=f"Validation_Expert_{i}",
            count=sum(counts),
            methods={"heuristic": sum(counts) - 1, "all_at_once": 1},
            last_seen=now - 90,
            last_trace_id="ab" * 16,
        )
        for i in range(agents)
    ]
    return CulpritReport(
        window_seconds=86400,
        since=now - 86400,
        until=now,
        total=sum(c.count for c in culprits),
        culprits=culprits,
        bucket_seconds=3600,
        bucket_starts=[now - 86400 + 3600 * i for i in range(24)],
        series=[CulpritSeries(service=c.service, agent=c.agent, counts=counts) for c in culprits],
    )


def test_top_s_sparkline_is_whole_at_80_columns() -> None:
    console = Console(width=80, record=True, force_terminal=False)
    console.print(render(_report(3), "http://127.0.0.1:4318", "24h", width=80))
    output = console.export_text()
    lines = output.splitlines()
    assert max(len(line) for line in lines) <= 80
    row = next(line for line in lines if "Validation" in line)
    sparkline = re.search(r"[ ▁▂▃▄▅▆▇█·]{12,}", row)
    assert sparkline is not None and len(sparkline.group(0).strip()) == 12, row  # 24 buckets merged in pairs
    assert "heuristic 46" in output  # the methods column is not squeezed away
