"""The failure patterns page in a real headless Chromium, and ``/api/patterns``: each pattern with its
count, first and last seen, a sparkline, the agents and dependencies it spans and example runs; the
workflows' undecided runs apart with their suspects. Saves the docs' screenshot of the page."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from otel_blame.store import BlameStore, StoreConfig, open_store
from otel_blame.store.patterns import StorePatternBook
from otel_blame.store.records import StoredRun
from otel_blame.ui.app import create_ui_app
from tests.store.runs import pattern_runs
from tests.ui.browser import chromium, off_loopback, requested_urls, screenshot, serving


@pytest.fixture(scope="module")
def showcase(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BlameStore, list[StoredRun]]]:
    store = open_store(StoreConfig(path=tmp_path_factory.mktemp("store") / "blame-store.sqlite3"))
    book = StorePatternBook(store.engine, similarity=90, max_per_signature=100)
    runs = pattern_runs(book, time.time())
    store.add_many(runs)
    yield store, runs
    store.close()


def _counts(runs: list[StoredRun]) -> Counter[str]:
    return Counter(run.pattern for run in runs if run.pattern_definition.kind == "cause")


def test_the_api_answers_the_patterns_of_a_window(showcase) -> None:  # noqa: ANN001
    store, runs = showcase
    client = TestClient(create_ui_app(store))
    report = client.get("/api/patterns?window=24h&buckets=12").json()
    expected = _counts(runs)
    assert [(p["id"], p["count"]) for p in report["patterns"]] == sorted(
        expected.items(), key=lambda item: -item[1]
    )
    assert report["total"] == sum(expected.values()) and len(report["bucket_starts"]) == 12
    dependency = next(p for p in report["patterns"] if p["dependency"] == "orders_api")
    assert dependency["category"] == "dependency" and dependency["action"] == "tool:orders_api"
    assert dependency["agents"] == {"lookup": 16} and dependency["dependencies"] == ["orders_api"]
    (undecided,) = report["undecided"]
    assert undecided["count"] == 7 and undecided["examples"][0]["candidates"] == ["writer", "planner"]
    assert client.get("/api/patterns?window=1h").json()["total"] < report["total"]
    assert client.get("/api/patterns?window=soon").status_code == 400


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as driver:
        yield driver


def test_the_patterns_page_shows_each_pattern_and_leads_to_its_runs(browser, showcase) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    store, runs = showcase
    expected = _counts(runs)
    with serving(create_ui_app(store)) as site:
        browser.get(f"{site}/ui/patterns?window=24h")
        rows = browser.find_elements(By.CSS_SELECTOR, "#patterns tbody tr")
        assert [row.get_attribute("data-pattern") for row in rows] == [
            pattern for pattern, _ in sorted(expected.items(), key=lambda item: -item[1])
        ]
        first = rows[0]
        assert int(first.find_element(By.CSS_SELECTOR, "td.count").text) == max(expected.values())
        bars = first.find_elements(By.CSS_SELECTOR, "svg.sparkline rect")
        assert (
            len(bars) == 24 and sum(int(bar.text or bar.get_attribute("textContent")) for bar in bars) == 16
        )
        assert first.find_element(By.CSS_SELECTOR, "svg.sparkline").size["width"] == 120
        assert "orders_api" in first.text and "lookup" in first.text
        newest = browser.find_element(By.CSS_SELECTOR, "tr[data-pattern] .pattern-title")
        assert newest.text == "lookup · dependency · orders_api · tool:orders_api"
        undecided = browser.find_elements(By.CSS_SELECTOR, "#undecided-groups tbody tr")
        assert len(undecided) == 1 and "writer or planner" in undecided[0].text
        screenshot(browser, "ui-patterns.png")
        # an example leads to its run, the id to the pattern's failures
        example = first.find_elements(By.CSS_SELECTOR, "td:last-child a")[0]
        href = example.get_attribute("href")
        first.find_element(By.CSS_SELECTOR, ".pattern-cell a").click()
        listed = browser.find_elements(By.CSS_SELECTOR, "table.failures tbody tr")
        assert len(listed) == max(expected.values())
        browser.get(href)
        assert browser.find_element(By.ID, "culprit-agent").text == "lookup"
        assert not off_loopback(requested_urls(browser))
