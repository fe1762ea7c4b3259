"""The shipped model's verdicts on zoo campaigns, by planted fault kind: how many are decided, and how
many of those name the planted agent (issue 32: the zoo's mechanical faults are decided).

    PYTHONPATH=$PWD .venv/bin/python bench/decided_by_fault.py /work/zoo-data/r2

Use a seed the shipped model was not fitted on (its runs are then out of sample; the apps are not).
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from otel_blame.attribution.ranker import RankerModel
from otel_blame.training import ranker_fit as rf
from otel_blame.training import runs as lr


def main() -> None:
    runs = lr.zoo_runs([Path(folder) for folder in sys.argv[1:]])
    verdicts = rf.predict(RankerModel.load(), runs)
    by_kind: dict[str, list[rf.Scored]] = {}
    for item in verdicts:
        by_kind.setdefault(item.run.kind or "(none)", []).append(item)
    table = Table(title=f"Decided verdicts by planted fault kind ({len(verdicts)} runs)")
    for column in ("fault kind", "runs", "agent right %", "decided %", "decided right %"):
        table.add_column(column, justify="left" if column == "fault kind" else "right")
    for kind, items in sorted(by_kind.items()):
        decided = [item for item in items if item.decided]
        table.add_row(
            kind,
            str(len(items)),
            f"{100 * sum(item.agent_correct for item in items) / len(items):.1f}",
            f"{100 * len(decided) / len(items):.1f}",
            f"{100 * sum(item.agent_correct for item in decided) / len(decided):.1f}" if decided else "–",
        )
    Console(width=100).print(table)


if __name__ == "__main__":
    main()
