"""What a user of the verdicts gets: how many are decided and how often those are right, and the
risk–coverage table (keeping only the most confident verdicts, how often are the kept ones right?).

A decided verdict is one the method stands behind (``blame.decided``: alerts and ``otel-blame top``
count only those), so its accuracy is the figure a user lives with; the undecided rest are ranked
guesses. The risk–coverage table shows what a stricter or looser cut would have given.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

COVERAGES: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class Decided(BaseModel):
    """The decided verdicts of one group of runs."""

    runs: int
    decided: int
    right: int  # of the decided

    @property
    def share(self) -> float | None:
        return self.decided / self.runs if self.runs else None

    @property
    def accuracy(self) -> float | None:
        return self.right / self.decided if self.decided else None


def decided_summary(verdicts: Sequence[tuple[bool, bool]]) -> Decided:
    """``verdicts``: (decided, right) per run."""
    return Decided(
        runs=len(verdicts),
        decided=sum(1 for decided, _ in verdicts if decided),
        right=sum(1 for decided, right in verdicts if decided and right),
    )


def risk_coverage(verdicts: Sequence[tuple[float, bool]]) -> list[tuple[float, float]]:
    """``verdicts``: (confidence, right) per run. For each share of ``COVERAGES``: the accuracy of the
    most confident verdicts making up that share (ties broken by the order given)."""
    if not verdicts:
        return []
    ordered = sorted(range(len(verdicts)), key=lambda position: -verdicts[position][0])
    found = []
    for coverage in COVERAGES:
        count = max(1, round(coverage * len(ordered)))
        found.append((coverage, sum(verdicts[position][1] for position in ordered[:count]) / count))
    return found


def percent(value: float | None) -> str:
    """A share as a percentage to one decimal (``–`` when there is none): a table cell."""
    return "–" if value is None else f"{100 * value:.1f}"


Verdicts = Sequence[tuple[float, bool]]


def coverage_lines(groups: Sequence[tuple[str, Verdicts]], what: str = "agent") -> list[str]:
    """The risk–coverage table, one line per group (80 columns): the accuracy (``what``) of the most
    confident verdicts at 10, 20, 30, 50 and 100 % of the runs kept."""
    shown = (0.1, 0.2, 0.3, 0.5, 1.0)
    lines = [
        f"most confident verdicts kept: {what} right % (risk-coverage)",
        f"{'':<20}" + "".join(f"{round(100 * share):>7}%" for share in shown),
    ]
    for name, verdicts in groups:
        curve = dict(risk_coverage(verdicts))
        lines.append(f"{name[:20]:<20}" + "".join(f"{percent(curve.get(share)):>8}" for share in shown))
    return lines
