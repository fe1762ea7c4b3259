"""How long the web UI takes to answer a run page of 10, 130 and 1,000 steps.

Each run is built from real Who&When step texts (the Hand-Crafted logs under ``--dataset``, cycled
to the length wanted), attributed by the offline heuristic and kept in a SQLite blame store; the
server time is the median of ``--runs`` in-process requests (``GET /ui/runs/{id}``: the store
read, the view and the template), reported with its ratio to the 10-step page measured in the same
run. ``--browser`` also loads each page in headless Chromium (Debian's chromium + chromedriver) and
reports the navigation's ``loadEventEnd``. Usage::

    .venv/bin/python bench/ui_render.py --dataset /work/shared/who_and_when/dev --runs 7 --browser
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from starlette.testclient import TestClient

from otel_blame.attribution.heuristic import HeuristicAttribution
from otel_blame.loaders import load_trajectory
from otel_blame.store import StoreConfig, open_store
from otel_blame.store.records import build_run
from otel_blame.trajectory import Outcome, Trajectory

SIZES = (10, 130, 1000)


def long_run(dataset: Path, steps: int) -> Trajectory:
    texts = []
    for file in sorted((dataset / "Hand-Crafted").glob("*.json"), key=lambda p: int(p.stem)):
        texts.extend((step.agent, step.content) for step in load_trajectory(file).steps)
        if len(texts) >= steps:
            break
    built = [{"agent": agent, "content": content} for agent, content in texts[:steps]]
    return Trajectory.from_steps(built, outcome=Outcome.FAILURE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True, help="a directory with the Who&When layout")
    parser.add_argument("--runs", type=int, default=7, help="requests per page (median reported)")
    parser.add_argument("--browser", action="store_true", help="also time each page in headless Chromium")
    args = parser.parse_args()

    from otel_blame.ui.app import create_ui_app

    with tempfile.TemporaryDirectory() as folder:
        store = open_store(StoreConfig(path=Path(folder) / "blame-store.sqlite3"))
        method = HeuristicAttribution()
        ids = {}
        for size in SIZES:
            trajectory = long_run(args.dataset, size)
            trace_id = f"{size:032x}"
            store.add(build_run(trajectory, method.attribute(trajectory), trace_id=trace_id))
            ids[size] = trace_id
        app = create_ui_app(store)
        client = TestClient(app)
        server: dict[int, float] = {}
        sizes: dict[int, int] = {}
        for size, trace_id in ids.items():
            client.get(f"/ui/runs/{trace_id}")  # warm the template cache
            times = []
            for _ in range(args.runs):
                started = time.perf_counter()
                page = client.get(f"/ui/runs/{trace_id}")
                times.append(time.perf_counter() - started)
                assert page.status_code == 200
            server[size], sizes[size] = statistics.median(times), len(page.content)
        loaded: dict[int, float] = {}
        if args.browser:
            import sys

            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from tests.ui.browser import chromium, serving

            with serving(app) as base, chromium() as driver:
                for size, trace_id in ids.items():
                    times = []
                    for _ in range(max(1, args.runs // 2)):
                        driver.get(f"{base}/ui/runs/{trace_id}")
                        timing = driver.execute_script(
                            "var t = performance.getEntriesByType('navigation')[0];"
                            " return [t.startTime, t.loadEventEnd];"
                        )
                        times.append((timing[1] - timing[0]) / 1000)
                    loaded[size] = statistics.median(times)
        store.close()
    baseline = server[SIZES[0]]
    header = "| steps | page KiB | server median s | × 10-step page |"
    rule = "| --- | --- | --- | --- |"
    if loaded:
        header, rule = header + " Chromium load s |", rule + " --- |"
    print(header)
    print(rule)
    for size in SIZES:
        row = f"| {size} | {sizes[size] / 1024:.0f} | {server[size]:.3f} | {server[size] / baseline:.1f} |"
        if loaded:
            row += f" {loaded[size]:.2f} |"
        print(row)


if __name__ == "__main__":
    main()
