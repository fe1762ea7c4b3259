"""The web UI in a real headless Chromium: upload a Who&When log, look at stored runs and culprits,
hostile agent content stays text, and no request leaves loopback. Saves the docs' screenshots."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_blame.attribution.registry import create_method
from otel_blame.loaders import load_trajectory
from otel_blame.store import BlameStore, StoreConfig, open_store
from otel_blame.store.records import StoredRun
from otel_blame.ui.app import create_ui_app
from otel_blame.ui.settings import UISettings
from otel_blame.ui.views import colour_classes
from tests.store.runs import attributed_runs, hostile_run, who_and_when_files
from tests.ui.browser import (
    DOCS_IMAGES,
    SCREENSHOTS,
    chromium,
    off_loopback,
    requested_urls,
    screenshot,
    serving,
)

HOSTILE_TRACE = "0badc0de" * 4
JAEGER = "http://127.0.0.1:16686/trace/{trace_id}"


def _showcase_times(count: int, now: float) -> list[float]:
    """Blames over the last 24 h, thicker in the last few hours (a culprit getting worse)."""
    times = []
    for position in range(count):
        fraction = position / max(count - 1, 1)
        times.append(now - 23.5 * 3600 * (1 - fraction) ** 2 - 60)
    return times


@pytest.fixture(scope="module")
def showcase(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BlameStore, list[StoredRun]]]:
    now = time.time()
    store = open_store(StoreConfig(path=tmp_path_factory.mktemp("store") / "blame-store.sqlite3"))
    runs = attributed_runs(
        30, start=0, spacing=0, subset="Hand-Crafted", services=("research-agents", "web-tasks"),
        times=_showcase_times(30, now),
    )  # fmt: skip
    # the hostile run is old, so it sits at the end of the list and outside the culprits window
    runs.append(hostile_run(HOSTILE_TRACE, now - 5 * 86400))
    for run in runs:
        store.add(run)
    yield store, runs
    store.close()


@pytest.fixture(scope="module")
def site(showcase) -> Iterator[str]:  # noqa: ANN001
    app = create_ui_app(showcase[0], UISettings(jaeger_url_template=JAEGER))
    with serving(app) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def all_requests(browser) -> list[str]:  # noqa: ANN001
    """Every URL the browser requested during this module (checked by the last test)."""
    return []


@pytest.fixture(autouse=True)
def _collect_requests(browser, all_requests: list[str]) -> Iterator[None]:  # noqa: ANN001
    yield
    all_requests.extend(requested_urls(browser))


def _by_id(driver, element_id: str):  # noqa: ANN001, ANN202
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, element_id)


def _all(driver, selector: str):  # noqa: ANN001, ANN202
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def _submit_and_wait(driver, button) -> None:  # noqa: ANN001
    """Click a submit button and wait until the next page replaced this one."""
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element("tag name", "html")
    button.click()
    WebDriverWait(driver, 30).until(expected_conditions.staleness_of(page))


def _no_alert(driver) -> None:  # noqa: ANN001
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018


def test_failures_page_lists_newest_first(browser, site: str, showcase) -> None:  # noqa: ANN001
    browser.get(f"{site}/ui/")
    rows = _all(browser, "table.failures tbody tr")
    newest = sorted(showcase[1], key=lambda r: -r.attributed_at)
    assert len(rows) == len(newest)
    first_link = rows[0].find_elements("css selector", "a.agent-link")[0]
    assert first_link.text == newest[0].agent
    assert first_link.get_attribute("href").endswith(f"/ui/runs/{newest[0].trace_id}")
    screenshot(browser, "ui-failures.png")
    # filter by service through the form
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("name", "service")).select_by_visible_text("web-tasks")
    _submit_and_wait(browser, browser.find_element("css selector", "form.filters button[type=submit]"))
    rows = _all(browser, "table.failures tbody tr")
    assert len(rows) == sum(r.service == "web-tasks" for r in showcase[1])


def _decided_log() -> tuple[Path, object]:
    """The first Hand-Crafted log whose offline verdict is decided, with that verdict."""
    method = create_method("heuristic")
    for path in who_and_when_files(30, "Hand-Crafted")[7:]:
        verdict = method.attribute(load_trajectory(path))
        if verdict.decided:
            return path, verdict
    raise AssertionError("no Hand-Crafted log of the first 30 gets a decided verdict")


def test_upload_a_who_and_when_log_and_see_who_and_when(browser, site: str) -> None:  # noqa: ANN001
    path, expected = _decided_log()
    browser.get(f"{site}/ui/attribute")
    _by_id(browser, "file").send_keys(str(path))
    assert path.name in _by_id(browser, "file-name").text  # the page's script shows the chosen file
    screenshot(browser, "ui-attribute.png")
    _submit_and_wait(browser, _by_id(browser, "attribute-submit"))
    assert _all(browser, "#culprit-agent"), browser.find_element("css selector", "main").text[:500]
    assert _by_id(browser, "culprit-agent").text == expected.agent
    assert _by_id(browser, "culprit-step").text == f"step {expected.step}"
    culprit = _by_id(browser, f"step-{expected.step}")
    assert "culprit" in culprit.get_attribute("class").split()
    assert culprit.get_attribute("data-agent") == expected.agent
    assert len(_all(browser, "li.step.culprit")) == 1
    log = json.loads(path.read_text())
    assert len(_all(browser, "li.step")) == len(log["history"])


def test_a_bad_upload_shows_a_message_not_a_stack_trace(browser, site: str, tmp_path: Path) -> None:  # noqa: ANN001
    bad = tmp_path / "notes.json"
    bad.write_text('{"rows": [1, 2, 3]}')
    browser.get(f"{site}/ui/attribute")
    _by_id(browser, "file").send_keys(str(bad))
    _submit_and_wait(browser, _by_id(browser, "attribute-submit"))
    message = _by_id(browser, "upload-error").text
    assert "unrecognised format" in message and "Traceback" not in browser.page_source


def test_a_stored_run_shows_lanes_heat_and_the_culprit(browser, site: str, showcase) -> None:  # noqa: ANN001
    run = max((r for r in showcase[1][:-1] if r.decided), key=lambda r: r.attributed_at)
    browser.get(f"{site}/ui/runs/{run.trace_id}")
    assert _by_id(browser, "culprit-agent").text == run.agent
    assert _by_id(browser, "culprit-step").text == f"step {run.step}"
    assert _by_id(browser, "culprit-method").text == run.method
    culprit = _by_id(browser, f"step-{run.step}")
    assert "culprit" in culprit.get_attribute("class").split()
    # one colour per agent, none shared: every step of an agent has the agent's colour class
    lanes: dict[str, set[str]] = {}
    for step in _all(browser, "li.step"):
        lane = next(c for c in step.get_attribute("class").split() if c.startswith("c") and c[1:].isdigit())
        lanes.setdefault(step.get_attribute("data-agent"), set()).add(lane)
    classes = colour_classes(run.trajectory.agents)
    assert lanes == {agent: {f"c{classes[agent]}"} for agent in lanes}
    assert len(set(classes.values())) == len(classes)
    # the culprit's bubble is drawn differently from the others (red border)
    colour = culprit.find_element("css selector", ".bubble").value_of_css_property("border-top-color")
    other = _all(browser, "li.step:not(.culprit) .bubble")[0].value_of_css_property("border-top-color")
    assert colour != other
    # heat bars: the culprit's bar is the widest
    widths = {
        int(step.get_attribute("data-step")): float(
            step.find_elements("css selector", ".heat rect")[1].get_attribute("width")
        )
        for step in _all(browser, "li.step")
    }
    assert widths[run.step] == max(widths.values()) > 0
    jaeger = browser.find_element("partial link text", "Open in Jaeger")
    assert jaeger.get_attribute("href") == JAEGER.format(trace_id=run.trace_id)
    screenshot(browser, "ui-run.png")


def test_the_culprits_page_plots_blames_over_time(browser, site: str, showcase) -> None:  # noqa: ANN001
    browser.get(f"{site}/ui/culprits?window=24h")
    rows = _all(browser, "table.leaderboard tbody tr")
    recent = [r for r in showcase[1] if r.attributed_at >= time.time() - 86400 and r.decided]
    counts: dict[tuple[str, str], int] = {}
    for run in recent:
        counts[(run.agent, run.service)] = counts.get((run.agent, run.service), 0) + 1
    top = max(counts.values())
    assert rows and int(rows[0].find_element("css selector", "td.count").text) == top
    assert len(rows) == len(counts)
    bars = _all(browser, "#blames-plot rect.bar")
    assert bars, "the plot has no bars"
    heights = [float(bar.get_attribute("height")) for bar in bars]
    assert all(h > 0 for h in heights)
    plot = _by_id(browser, "blames-plot")
    assert plot.size["width"] > 300 and plot.size["height"] > 100
    assert sum(int(li.text.split()[-1]) for li in _all(browser, ".culprits-grid ul.legend li")) == len(recent)
    screenshot(browser, "ui-culprits.png")


def test_script_in_agent_content_renders_as_text_and_runs_nothing(browser, site: str) -> None:  # noqa: ANN001
    browser.get(f"{site}/ui/runs/{HOSTILE_TRACE}")
    _no_alert(browser)
    contents = [element.text for element in _all(browser, "pre.content")]
    assert "<script>alert(1)</script>" in contents
    assert "</pre><script>alert(3)</script>" in contents
    assert _all(browser, "li.step")[1].get_attribute("data-agent") == "<img src=x onerror=alert(2)>"
    assert not _all(browser, "main img"), "agent text became an element"
    # the page ran no script from agent content: only the UI's own script element exists
    scripts = [s.get_attribute("src") for s in _all(browser, "script")]
    assert scripts == [f"{site}/ui/static/ui.js"]
    browser.get(f"{site}/ui/?since=7d")
    _no_alert(browser)
    assert "<script>alert(4)</script>" in browser.find_element("css selector", "table.failures").text


def test_the_overview_strip_leads_to_every_step_of_a_long_run(browser, site: str, showcase) -> None:  # noqa: ANN001
    run = max(showcase[1][:-1], key=lambda r: r.steps)  # the longest Hand-Crafted run
    assert run.steps >= 100
    browser.get(f"{site}/ui/runs/{run.trace_id}")
    strip = _by_id(browser, "overview-strip")
    assert strip.size["width"] > 800 and strip.size["height"] >= 30
    marks = _all(browser, "#overview-strip a.mark")
    assert [int(m.get_attribute("data-step")) for m in marks] == list(range(run.steps))
    culprits = _all(browser, "#overview-strip a.is-culprit")
    assert [int(m.get_attribute("data-step")) for m in culprits] == ([run.step] if run.decided else [])
    assert len(_all(browser, "#overview-strip a.is-candidate")) == len(run.candidates)
    first = culprits[0] if culprits else marks[run.step]  # undecided: its top candidate
    screenshot(browser, "ui-long-run.png")
    # most of the run is folded away; the culprit is not
    collapsed = _all(browser, "details.quiet")
    assert collapsed and not any(d.get_attribute("open") for d in collapsed)
    assert _by_id(browser, f"step-{run.step}").is_displayed()
    # clicking a folded step's mark opens its fold and shows the step
    folded = int(collapsed[-1].get_attribute("data-first"))
    assert not _by_id(browser, f"step-{folded}").is_displayed()
    browser.execute_script(
        "arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", marks[folded]
    )
    time.sleep(0.3)
    assert browser.current_url.endswith(f"#step-{folded}")
    assert _by_id(browser, f"step-{folded}").is_displayed()
    # and the culprit's (or the top candidate's) mark goes to that step
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", first)
    time.sleep(0.3)
    assert browser.current_url.endswith(f"#step-{run.step}")


def test_a_successful_run_uploaded_is_shown_without_a_culprit(browser, site: str, tmp_path: Path) -> None:  # noqa: ANN001
    log = json.loads(who_and_when_files(30, "Hand-Crafted")[3].read_text())
    log["is_correct"] = True
    log.pop("is_corrected", None)
    succeeded = tmp_path / "succeeded.json"
    succeeded.write_text(json.dumps(log))
    browser.get(f"{site}/ui/attribute")
    # the drop zone says which file is chosen once: the browser's own file input is hidden
    assert _by_id(browser, "file").size["width"] <= 1
    assert browser.find_element("css selector", "main").text.lower().count("no file chosen") == 1
    _by_id(browser, "file").send_keys(str(succeeded))
    _submit_and_wait(browser, _by_id(browser, "attribute-submit"))
    assert _by_id(browser, "decision-why").text == "The run succeeded: nothing to blame."
    assert _by_id(browser, "decision-outcome").text == "success"
    assert not _all(browser, "#culprit-agent") and not _all(browser, "li.step.culprit")
    assert not _all(browser, ".culprit-badge") and not _all(browser, "#overview-strip a.is-culprit")
    assert len(_all(browser, "li.step")) == len(log["history"])
    screenshot(browser, "ui-success.png")


def test_no_request_left_loopback(browser, site: str, all_requests: list[str]) -> None:  # noqa: ANN001
    all_requests.extend(requested_urls(browser))
    assert any(url.startswith(site) for url in all_requests), "the performance log recorded nothing"
    assert off_loopback(all_requests) == []


def test_a_normal_run_leaves_the_committed_screenshots_alone() -> None:
    """The screenshots go to docs/images only with OTEL_BLAME_UI_SCREENSHOTS=1 (a test run must not
    dirty the work tree); otherwise to a temporary directory."""
    asked = os.environ.get("OTEL_BLAME_UI_SCREENSHOTS", "").lower() in ("1", "true", "yes")
    target = SCREENSHOTS.resolve()
    docs = DOCS_IMAGES.resolve()
    assert (target == docs) == asked
    assert asked or not target.is_relative_to(docs.parents[1])  # not anywhere in the repository
