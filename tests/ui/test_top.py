"""`otel-blame top` against a real server on loopback: the leaderboard, and clear errors."""

from __future__ import annotations

from click.testing import CliRunner

from otel_blame.cli import main
from otel_blame.ui.app import create_ui_app
from otel_blame.ui.settings import UISettings
from tests.ports import reserve_port
from tests.ui.browser import serving


def test_top_prints_the_leaderboard(seeded) -> None:  # noqa: ANN001
    store, runs = seeded
    counts: dict[tuple[str, str], int] = {}
    latest: dict[tuple[str, str], float] = {}
    for run in runs:
        counts[(run.agent, run.service)] = counts.get((run.agent, run.service), 0) + 1
        latest[(run.agent, run.service)] = max(latest.get((run.agent, run.service), 0.0), run.attributed_at)
    # The leaderboard's order: most blames first, the most recently blamed first among equals.
    (agent, service), most = max(counts.items(), key=lambda item: (item[1], latest[item[0]]))
    with serving(create_ui_app(store, UISettings(auth_token="t0ken"))) as url:
        result = CliRunner(env={"COLUMNS": "200"}).invoke(
            main, ["top", "--once", "--all", "--since", "24h", "--endpoint", url, "--token", "t0ken"]
        )
        assert result.exit_code == 0, result.output
        first_row = next(
            line for line in result.output.splitlines() if line.replace(" ", "").startswith("│1│")
        )
        assert agent in first_row and f" {most} " in first_row
        assert f"{len(runs)} blames" in result.output
        refused = CliRunner().invoke(main, ["top", "--once", "--endpoint", url])
        assert refused.exit_code == 1 and "needs a token" in refused.output


def test_top_says_when_nothing_answers() -> None:
    url = f"http://127.0.0.1:{reserve_port()}"
    result = CliRunner().invoke(main, ["top", "--once", "--endpoint", url])
    assert result.exit_code == 1 and "cannot reach" in result.output
    bad = CliRunner().invoke(main, ["top", "--once", "--since", "forever"])
    assert bad.exit_code == 2 and "--since" in bad.output
