"""Layout (issue 26 item 6): agent colours told apart and never shared within a run, long names
ellipsised on one line, the culprits plot's labels readable; measured in a real headless Chromium
where it is about what the page looks like."""

from __future__ import annotations

import itertools
import math
import re
import time
from collections.abc import Iterator

import pytest

from otel_blame.attribution.result import Attribution, Candidate
from otel_blame.store import BlameStore, StoreConfig, open_store
from otel_blame.store.records import build_run
from otel_blame.trajectory import Outcome, Task, Trajectory
from otel_blame.ui.app import create_ui_app
from otel_blame.ui.views import PALETTE, colour_classes
from tests.ui.browser import chromium, serving

LONG_NAME = "a-forty-character-agent-name-for-testing"
EIGHT = ["planner", "coder", "executor", "reviewer", "WebSurfer", "FileSurfer", "Orchestrator", "critic"]


# --- the palette, by the numbers -------------------------------------------------------------------


def _lab(colour: str) -> tuple[float, float, float]:
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(int(colour[i : i + 2], 16) / 255) for i in (1, 3, 5))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def delta_e_2000(one: str, other: str) -> float:
    """CIEDE2000 colour difference (Sharma, Wu & Dalal 2005)."""
    (l1, a1, b1), (l2, a2, b2) = _lab(one), _lab(other)
    c_mean = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_mean**7 / (c_mean**7 + 25**7)))
    a1, a2 = (1 + g) * a1, (1 + g) * a2
    c1, c2 = math.hypot(a1, b1), math.hypot(a2, b2)
    h1, h2 = math.degrees(math.atan2(b1, a1)) % 360, math.degrees(math.atan2(b2, a2)) % 360
    dh = 0.0 if c1 * c2 == 0 else (h2 - h1 if abs(h2 - h1) <= 180 else h2 - h1 - math.copysign(360, h2 - h1))
    dl, dc, dhh = l2 - l1, c2 - c1, 2 * math.sqrt(c1 * c2) * math.sin(math.radians(dh / 2))
    l_mean, cp_mean = (l1 + l2) / 2, (c1 + c2) / 2
    if c1 * c2 == 0:
        h_mean = h1 + h2
    elif abs(h1 - h2) <= 180:
        h_mean = (h1 + h2) / 2
    else:
        h_mean = (h1 + h2 + 360) / 2 if h1 + h2 < 360 else (h1 + h2 - 360) / 2
    t = (
        1
        - 0.17 * math.cos(math.radians(h_mean - 30))
        + 0.24 * math.cos(math.radians(2 * h_mean))
        + 0.32 * math.cos(math.radians(3 * h_mean + 6))
        - 0.20 * math.cos(math.radians(4 * h_mean - 63))
    )
    s_l = 1 + 0.015 * (l_mean - 50) ** 2 / math.sqrt(20 + (l_mean - 50) ** 2)
    s_c, s_h = 1 + 0.045 * cp_mean, 1 + 0.015 * cp_mean * t
    r_t = (
        -math.sin(math.radians(60 * math.exp(-(((h_mean - 275) / 25) ** 2))))
        * 2
        * math.sqrt(cp_mean**7 / (cp_mean**7 + 25**7))
    )
    return math.sqrt((dl / s_l) ** 2 + (dc / s_c) ** 2 + (dhh / s_h) ** 2 + r_t * (dc / s_c) * (dhh / s_h))


def _contrast_with_white(colour: str) -> float:
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(int(colour[i : i + 2], 16) / 255) for i in (1, 3, 5))
    return 1.05 / (0.2126 * r + 0.7152 * g + 0.0722 * b + 0.05)


def test_delta_e_2000_matches_the_published_test_data() -> None:
    assert delta_e_2000("#000000", "#ffffff") == pytest.approx(100.0, abs=0.01)
    assert delta_e_2000("#cc79a7", "#cc79a7") == 0.0


def test_the_palette_has_twelve_hues_told_apart_and_readable_under_white_text() -> None:
    assert len(PALETTE) >= 12 and len(set(PALETTE)) == len(PALETTE)
    closest = min(delta_e_2000(a, b) for a, b in itertools.combinations(PALETTE, 2))
    assert closest >= 15, closest  # the old palette's closest pair: 5.8 (#cc79a7, #b07aa1)
    for colour in PALETTE:
        assert delta_e_2000(colour, "#d7301f") >= 20  # not the culprit's red
        assert delta_e_2000(colour, "#9aa0a6") >= 15  # nor the "other agents" grey
        assert _contrast_with_white(colour) >= 3, colour  # the chip's white text


def test_no_two_agents_of_a_run_share_a_colour() -> None:
    for size in (2, 8, 12):
        agents = [f"agent-{i}" for i in range(size)]
        assert len(set(colour_classes(agents).values())) == size
    # names that hash to one colour (the two agents on #cc79a7) still get two
    from otel_blame.ui.views import agent_class

    same = {}
    for i in range(500):
        same.setdefault(agent_class(f"a{i}"), []).append(f"a{i}")
    pair = next(names[:2] for names in same.values() if len(names) >= 2)
    assert len(set(colour_classes(pair).values())) == 2


# --- in Chromium -----------------------------------------------------------------------------------


def _run(agents: list[str], culprit: int, trace: str, task: str = "What is the total?") -> object:
    trajectory = Trajectory.from_steps(
        [{"agent": agent, "content": f"{agent}: step {i} of the work"} for i, agent in enumerate(agents * 2)],
        task=Task(input=task),
        outcome=Outcome.FAILURE,
    )
    attribution = Attribution(
        agent=agents[culprit],
        step=culprit,
        confidence=0.8,
        decided=True,
        reason=f"Step {culprit} by {agents[culprit]}: a value nothing before it gave first appears here.",
        method="ranker",
        candidates=[Candidate(step=culprit, agent=agents[culprit], score=0.5)],
    )
    return build_run(trajectory, attribution, trace_id=trace, service="research-agents")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BlameStore]:
    opened = open_store(StoreConfig(path=tmp_path_factory.mktemp("layout") / "blame-store.sqlite3"))
    task = "Where can I take martial arts classes within a five-minute walk from the New York Stock Exchange?"
    opened.add(_run(["planner", LONG_NAME, "reviewer"], 1, "a1" * 16, task))
    opened.add(_run(EIGHT, 3, "a2" * 16))
    now = time.time()
    for i, agent in enumerate(EIGHT[:6] * 2):
        opened.add(
            _run(EIGHT, EIGHT.index(agent), f"{i + 16:032x}").model_copy(update={"attributed_at": now - 600})
        )
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def site(store: BlameStore) -> Iterator[str]:
    with serving(create_ui_app(store)) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium(width=1280, height=900) as driver:
        yield driver


def _css(driver, selector: str) -> list:  # noqa: ANN001
    return driver.find_elements("css selector", selector)


def _line_height(element) -> float:  # noqa: ANN001
    return float(element.value_of_css_property("line-height").removesuffix("px") or 20)


def test_a_40_character_agent_name_stays_on_one_line(browser, site: str) -> None:  # noqa: ANN001
    browser.get(f"{site}/ui/runs/{'a1' * 16}")
    chip = browser.find_element("id", "culprit-agent")
    assert chip.get_attribute("title") == LONG_NAME
    assert chip.size["height"] < 1.6 * _line_height(chip), chip.size  # one line, not a two-line oval
    for name in _css(browser, f'.agent-name[title="{LONG_NAME}"]'):
        assert name.size["height"] < 1.6 * _line_height(name)
    browser.get(f"{site}/ui/")
    row = next(
        r for r in _css(browser, "table.failures tbody tr") if LONG_NAME in r.get_attribute("innerHTML")
    )
    agent = row.find_element("css selector", "td.agent-cell")
    assert agent.get_attribute("title").startswith(LONG_NAME)
    task = row.find_element("css selector", "td.task summary")  # the task, cut at a word (whole on hover)
    assert task.size["height"] <= 2.6 * _line_height(task), task.size  # the Task column is not squeezed


def test_eight_agents_of_one_run_have_eight_colours(browser, site: str) -> None:  # noqa: ANN001
    browser.get(f"{site}/ui/runs/{'a2' * 16}")
    swatches = {
        item.get_attribute("title"): item.find_element("css selector", ".swatch").value_of_css_property(
            "background-color"
        )
        for item in _css(browser, "ul.legend li[title]")
    }
    assert set(swatches) == set(EIGHT)
    assert len(set(swatches.values())) == 8, swatches
    lanes = {
        step.get_attribute("data-agent"): step.get_attribute("class") for step in _css(browser, "li.step")
    }
    classes = {agent: re.search(r"\bc(\d+)\b", cls).group(1) for agent, cls in lanes.items()}
    assert len(set(classes.values())) == 8


def test_the_culprits_plot_labels_are_at_least_11_px(browser, site: str) -> None:  # noqa: ANN001
    for width in (1280, 1000):
        browser.set_window_size(width, 900)
        browser.get(f"{site}/ui/culprits?window=1h")
        sizes = browser.execute_script(
            "return [...document.querySelectorAll('#blames-plot text')].map(t => "
            "parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a)"
        )
        assert sizes and min(sizes) >= 11, (width, sizes)
    browser.set_window_size(1280, 900)
