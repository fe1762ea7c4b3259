"""The campaign report as one self-contained HTML page: tables and inline SVG plots, no scripts,
no external stylesheet, fonts or CDN, so it can be attached to a ticket or opened offline."""

from __future__ import annotations

from collections.abc import Sequence

from jinja2 import Environment, PackageLoader
from markupsafe import Markup, escape

from otel_blame.inject.report import CalibrationBin, CampaignReport, Score

AGENT_COLOUR = "#3b6fb6"
STEP_COLOUR = "#e39b2d"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def accuracy_bars(groups: dict[str, Score], title: str) -> Markup:
    """Grouped horizontal bars: agent and step accuracy per group."""
    names = list(groups)
    row, left, width = 34, 180, 360
    height = 40 + row * max(1, len(names)) + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 80}" height="{height}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="4" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
    ]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        x = left + tick * width
        parts.append(f'<line x1="{x}" y1="26" x2="{x}" y2="{height - 24}" stroke="#ddd"/>')
        parts.append(
            f'<text x="{x}" y="{height - 8}" font-size="10" text-anchor="middle">{int(tick * 100)}%</text>'
        )
    for position, name in enumerate(names):
        y = 30 + position * row
        score = groups[name]
        parts.append(
            f'<text x="{left - 6}" y="{y + 16}" font-size="11" text-anchor="end">'
            f"{escape(name)} (n={score.runs})</text>"
        )
        for offset, value, colour in (
            (0, score.agent_accuracy, AGENT_COLOUR),
            (13, score.step_accuracy, STEP_COLOUR),
        ):
            bar = (value or 0.0) * width
            parts.append(f'<rect x="{left}" y="{y + offset}" width="{bar:.1f}" height="11" fill="{colour}"/>')
            parts.append(
                f'<text x="{left + bar + 4:.1f}" y="{y + offset + 10}" font-size="10">{_pct(value)}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def reliability_diagram(bins: Sequence[CalibrationBin]) -> Markup:
    """Accuracy against mean confidence per bin (dot area = runs); the diagonal is perfect calibration."""
    size, pad = 300, 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{size + 2 * pad}" height="{size + 2 * pad}" '
        'role="img" aria-label="reliability diagram">',
        '<text x="4" y="16" font-size="13" font-weight="bold">reliability per confidence bin</text>',
        f'<rect x="{pad}" y="{pad}" width="{size}" height="{size}" fill="none" stroke="#999"/>',
        f'<line x1="{pad}" y1="{pad + size}" x2="{pad + size}" y2="{pad}" stroke="#bbb" '
        'stroke-dasharray="4 3"/>',
        f'<text x="{pad + size / 2}" y="{pad + size + 30}" font-size="11" '
        'text-anchor="middle">confidence</text>',
        f'<text x="12" y="{pad + size / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {pad + size / 2})">accuracy</text>',
    ]
    for tick in (0, 0.5, 1.0):
        parts.append(
            f'<text x="{pad + tick * size}" y="{pad + size + 14}" font-size="10" '
            f'text-anchor="middle">{tick:g}</text>'
        )
        parts.append(
            f'<text x="{pad - 4}" y="{pad + size - tick * size + 3}" font-size="10" '
            f'text-anchor="end">{tick:g}</text>'
        )
    most = max((b.runs for b in bins), default=1) or 1
    for item in bins:
        if not item.runs or item.mean_confidence is None:
            continue
        for value, colour in ((item.agent_accuracy, AGENT_COLOUR), (item.step_accuracy, STEP_COLOUR)):
            if value is None:
                continue
            x = pad + item.mean_confidence * size
            y = pad + size - value * size
            radius = 3 + 9 * (item.runs / most) ** 0.5
            parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius:.1f}" fill="{colour}" fill-opacity="0.6">'
                f"<title>{item.lower:.1f}-{item.upper:.1f}: {item.runs} runs, {_pct(value)}</title></circle>"
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def _cell_colour(count: int, row_total: int, diagonal: bool) -> str:
    share = count / row_total if row_total else 0.0
    hue = 130 if diagonal else 5
    return f"hsl({hue}, 60%, {100 - 45 * share:.0f}%)"


def render_html(report: CampaignReport) -> str:
    environment = Environment(loader=PackageLoader("otel_blame.inject", "templates"), autoescape=True)
    blamed = sorted({b for row in report.confusion.values() for b in row} | set(report.confusion))
    return environment.get_template("report.html").render(
        report=report,
        pct=_pct,
        colour=_cell_colour,
        blamed=blamed,
        agent_colour=AGENT_COLOUR,
        step_colour=STEP_COLOUR,
        kind_plot=accuracy_bars(report.by_fault_kind, "accuracy by fault kind"),
        agent_plot=accuracy_bars(report.by_agent, "accuracy by planted agent"),
        reliability=reliability_diagram(report.calibration),
    )
