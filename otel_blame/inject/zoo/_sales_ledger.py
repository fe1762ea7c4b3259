"""The crew app's local data: a sales ledger and a refunds register per region and quarter.

Figures are drawn from the run's seed. Each region sells four product lines and books an
``Intercompany recharge`` line (services billed to a sister company) that the finance policy
excludes from revenue. The tools return what a finance data service would: JSON with the rows,
the currency and the snapshot the figures come from.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

REGIONS = ("EMEA", "North America", "APAC", "LATAM")
PRODUCT_LINES = ("Payments Gateway", "Fraud Shield", "Payouts", "Billing Suite")
INTERCOMPANY = "Intercompany recharge"
QUARTERS = ("2025-Q1", "2025-Q2", "2025-Q3", "2025-Q4")


def previous_quarter(quarter: str) -> str:
    year, q = quarter.split("-Q")
    return f"{int(year) - 1}-Q4" if q == "1" else f"{year}-Q{int(q) - 1}"


@dataclass(frozen=True)
class Row:
    product_line: str
    gross_sales: float
    orders: int
    refunds: float
    refund_count: int


@dataclass
class Ledger:
    """Every (region, quarter) the tools can answer for."""

    rows: dict[tuple[str, str], list[Row]]

    def net_revenue(self, region: str, quarter: str, *, include_intercompany: bool = False) -> float:
        return round(
            sum(
                r.gross_sales - r.refunds
                for r in self.rows[(region, quarter)]
                if include_intercompany or r.product_line != INTERCOMPANY
            ),
            2,
        )

    def top_line(self, region: str, quarter: str) -> str:
        rows = [r for r in self.rows[(region, quarter)] if r.product_line != INTERCOMPANY]
        return max(rows, key=lambda r: r.gross_sales - r.refunds).product_line

    def ledger_json(self, region: str, quarter: str) -> str:
        rows = self.rows.get((region, quarter))
        if rows is None:
            return json.dumps({"error": f"no ledger snapshot for region {region!r} and quarter {quarter!r}"})
        return json.dumps(
            {
                "region": region,
                "quarter": quarter,
                "currency": "USD",
                "snapshot": f"finance-ledger {quarter} close",
                "lines": [
                    {
                        "product_line": r.product_line,
                        "gross_sales": f"{r.gross_sales:.2f}",
                        "orders": r.orders,
                    }
                    for r in rows
                ],
            }
        )

    def refunds_json(self, region: str, quarter: str) -> str:
        rows = self.rows.get((region, quarter))
        if rows is None:
            return json.dumps({"error": f"no refunds register for region {region!r} and quarter {quarter!r}"})
        return json.dumps(
            {
                "region": region,
                "quarter": quarter,
                "currency": "USD",
                "lines": [
                    {
                        "product_line": r.product_line,
                        "refunds": f"{r.refunds:.2f}",
                        "refund_count": r.refund_count,
                    }
                    for r in rows
                ],
            }
        )


def draw_ledger(rng: random.Random, region: str, quarter: str) -> Ledger:
    """The ledger for ``region`` in ``quarter`` and the quarter before (and two other regions as noise)."""
    rows: dict[tuple[str, str], list[Row]] = {}
    regions = [region, *rng.sample([r for r in REGIONS if r != region], 2)]
    for each_region in regions:
        base = {line: rng.randrange(80, 900) * 1000 + rng.randrange(0, 1000) for line in PRODUCT_LINES}
        for each_quarter in (previous_quarter(quarter), quarter):
            lines = []
            for line in PRODUCT_LINES:
                gross = round(base[line] * rng.uniform(0.8, 1.35) + rng.randrange(0, 100) / 100, 2)
                refunds = round(gross * rng.uniform(0.005, 0.06), 2)
                lines.append(
                    Row(line, gross, int(gross // rng.randrange(90, 400)), refunds, rng.randrange(3, 120))
                )
            recharge = round(sum(r.gross_sales for r in lines) * rng.uniform(0.04, 0.12), 2)
            lines.append(Row(INTERCOMPANY, recharge, rng.randrange(2, 9), 0.0, 0))
            rows[(each_region, each_quarter)] = lines
    return Ledger(rows)
