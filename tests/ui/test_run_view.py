"""The run page on long runs and the smaller defects of issue 21, each pinned by a test that failed
before its fix: known answer, relative heat, overview strip, collapsed runs, no ``None``, colours
from the name, no chat-API role labels, cut columns readable, unknown filters said, drop zone text
once, uploads kept with their source and link (and not counted among culprits)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from sqlalchemy import create_engine, text
from starlette.testclient import TestClient

from otel_blame.attribution.known_answer import compare
from otel_blame.attribution.result import Attribution, Candidate
from otel_blame.demo.scenario import mismatch_reason
from otel_blame.loaders import load_saved_run
from otel_blame.store import BlameStore, StoreConfig, open_store
from otel_blame.store.records import build_run
from otel_blame.trajectory import Outcome, Task, Trajectory
from otel_blame.ui.views import agent_class
from tests.store.runs import WHO_AND_WHEN
from tests.ui.uploads import upload

HAND_CRAFTED = WHO_AND_WHEN / "Hand-Crafted"


def _long_run(steps: int, culprit: int, *, top: float = 0.085) -> tuple[Trajectory, Attribution]:
    agents = ("Orchestrator", "WebSurfer", "Assistant")
    trajectory = Trajectory.from_steps(
        [{"agent": agents[i % 3], "content": f"step {i}: nothing much happened here"} for i in range(steps)],
        task=Task(input="Find the figure."),
        outcome=Outcome.FAILURE,
    )
    candidates = [
        Candidate(step=culprit, agent=agents[culprit % 3], score=top),
        Candidate(step=culprit + 3, agent=agents[(culprit + 3) % 3], score=top / 2),
    ]
    attribution = Attribution(
        agent=agents[culprit % 3],
        step=culprit,
        confidence=0.3,
        decided=True,
        reason="it stated facts it had not established",
        method="heuristic",
        candidates=candidates,
    )
    return trajectory, attribution


def test_the_known_answer_is_on_the_page_in_the_cli_s_words(client: TestClient) -> None:
    file = HAND_CRAFTED / "1.json"
    answer = client.post("/api/attribute", content=file.read_bytes()).json()
    page = client.get(answer["url"]).text
    saved = load_saved_run(file)
    said, quality = compare(saved.annotation, Attribution.model_validate(
        {**{k: answer[k] for k in ("agent", "step", "confidence", "reason", "method")}}
    ))  # fmt: skip
    line = re.search(r'<dd id="annotation" class="text-fact annotation-(\w+)">(.*?)</dd>', page, re.S)
    assert line is not None
    assert line.group(1) == quality
    shown = re.sub(r"<[^>]+>", "", line.group(2))
    assert shown == f"{saved.annotation.agent} at step {saved.annotation.step}: the verdict {said}"


def test_heat_is_relative_to_the_run_s_top_score(store: BlameStore, client: TestClient) -> None:
    trajectory, attribution = _long_run(130, 40, top=0.085)
    store.add(build_run(trajectory, attribution, trace_id="a1" * 16))
    page = client.get(f"/ui/runs/{'a1' * 16}").text
    culprit = page[page.index('id="step-40"') : page.index('id="step-41"')]
    # the top score fills its bar; half of it fills half
    assert '<rect width="100.0" height="10" rx="2"' in culprit and ">0.09</span>" in culprit
    half = page[page.index('id="step-43"') : page.index('id="step-44"')]
    assert '<rect width="50.0" height="10" rx="2"' in half
    assert (
        "relative to this run&#39;s top score, 0.09" in page
        or "relative to this run's top score, 0.09" in page
    )


def test_the_overview_strip_has_every_step_and_marks_culprit_and_candidates(
    store: BlameStore, client: TestClient
) -> None:
    trajectory, attribution = _long_run(130, 40)
    store.add(build_run(trajectory, attribution, trace_id="a2" * 16))
    page = client.get(f"/ui/runs/{'a2' * 16}").text
    strip = page[page.index('id="overview-strip"') : page.index("</svg>", page.index('id="overview-strip"'))]
    links = re.findall(r'<a href="#step-(\d+)" class="mark([^"]*)"', strip)
    assert [int(step) for step, _ in links] == list(range(130))
    assert [int(s) for s, cls in links if "is-culprit" in cls] == [40]
    assert sorted(int(s) for s, cls in links if "is-candidate" in cls) == [40, 43]
    # each mark is in its agent's colour, the one the steps below have
    colours = re.findall(r'<rect x="(\d+)" y="0" width="1" height="10" fill="(#[0-9a-f]{6})"/>', strip)
    assert len(colours) == 130 and colours[1][1] != colours[0][1]


def test_runs_of_unremarkable_steps_collapse(store: BlameStore, client: TestClient) -> None:
    trajectory, attribution = _long_run(130, 40)
    store.add(build_run(trajectory, attribution, trace_id="a3" * 16))
    page = client.get(f"/ui/runs/{'a3' * 16}").text
    summaries = re.findall(
        r'<details class="quiet" data-first="(\d+)" data-last="(\d+)"><summary>([^<]*)', page
    )
    assert [(int(a), int(b)) for a, b, _ in summaries] == [(1, 39), (44, 128)]  # 41-42: too short
    assert "steps 1–39: 39 unremarkable steps (WebSurfer 13, Assistant 13, Orchestrator 13)" in page
    # every step keeps its anchor (the strip and the candidates link to it); the culprit is not collapsed
    assert all(f'id="step-{i}"' in page for i in range(130))
    culprit_at = page.index('id="step-40"')
    assert not any(int(a) <= 40 <= int(b) for a, b, _ in summaries) and culprit_at > 0


def test_a_1000_step_run_renders(store: BlameStore, client: TestClient) -> None:
    trajectory, attribution = _long_run(1000, 500)
    store.add(build_run(trajectory, attribution, trace_id="a4" * 16))
    page = client.get(f"/ui/runs/{'a4' * 16}")
    assert page.status_code == 200 and page.text.count('<a href="#step-') >= 1000


def test_no_python_none_reaches_a_page(store: BlameStore, client: TestClient) -> None:
    reason = mismatch_reason("28.97 km", None)
    assert "None" not in reason
    trajectory = Trajectory.from_steps(
        [{"agent": "planner", "content": "Plan it."}, {"agent": "coder", "content": "Done."}],
        task=Task(input="How far?", expected_output="28.97 km", final_output=None),
        outcome=Outcome.FAILURE,
        outcome_reason=reason,
    )
    attribution = Attribution(agent="coder", step=1, confidence=0.5, reason="wrong", method="heuristic")
    store.add(build_run(trajectory, attribution, trace_id="b1" * 16))
    for path in (f"/ui/runs/{'b1' * 16}", "/ui/", "/ui/culprits"):
        visible = html.unescape(re.sub(r"<[^>]+>", " ", client.get(path).text))
        assert not re.search(r"\bNone\b", visible), path


def test_agent_colours_come_from_the_name_on_every_page(store: BlameStore, client: TestClient) -> None:
    def run(agents: list[str], trace: str) -> None:
        trajectory = Trajectory.from_steps(
            [{"agent": a, "content": f"{a} speaks"} for a in agents], outcome=Outcome.FAILURE
        )
        attribution = Attribution(agent="coder", step=agents.index("coder"), confidence=0.5, reason="r",
                                  method="heuristic", decided=True)  # fmt: skip
        store.add(build_run(trajectory, attribution, trace_id=trace, service="svc"))

    run(["planner", "coder", "executor"], "c1" * 16)
    run(["coder", "reviewer"], "c2" * 16)
    colour = f"c{agent_class('coder')}"
    for trace in ("c1" * 16, "c2" * 16):
        page = client.get(f"/ui/runs/{trace}").text
        assert f'class="agent-chip {colour}" id="culprit-agent"' in page
        assert re.search(rf'<li class="step kind-message {colour}[ "][^>]*data-agent="coder"', page)
    culprits = client.get("/ui/culprits?window=1h").text
    assert re.search(
        rf'<td class="nowrap agent-cell {colour}" title="coder"><span class="swatch"></span>'
        rf"<a [^>]*>coder</a>",
        culprits,
    )


def test_a_chat_api_role_is_not_shown_as_a_label(store: BlameStore, client: TestClient) -> None:
    trajectory = Trajectory.from_steps(
        [
            {"agent": "user", "role": "assistant", "content": "Please compute it."},
            {"agent": "Orchestrator", "role": "Orchestrator (thought)", "content": "Plan."},
        ],
        outcome=Outcome.FAILURE,
    )
    attribution = Attribution(agent="Orchestrator", step=1, confidence=0.5, reason="r", method="heuristic")
    store.add(build_run(trajectory, attribution, trace_id="d1" * 16))
    page = client.get(f"/ui/runs/{'d1' * 16}").text
    assert '<span class="muted role">assistant</span>' not in page
    assert '<span class="muted role">Orchestrator (thought)</span>' in page


def test_cut_columns_keep_their_full_text(store: BlameStore, client: TestClient) -> None:
    long_task = (
        "Where can I take martial arts classes within a five-minute walk from the New York Stock Exchange?"
    )
    long_reason = "Step 1 by coder: " + "it stated facts it had not established; " * 5
    trajectory = Trajectory.from_steps(
        [{"agent": "planner", "content": "p"}, {"agent": "coder", "content": "c"}],
        task=Task(input=long_task),
        outcome=Outcome.FAILURE,
    )
    attribution = Attribution(agent="coder", step=1, confidence=0.5, reason=long_reason, method="heuristic")
    store.add(build_run(trajectory, attribution, trace_id="e1" * 16))
    page = client.get("/ui/").text
    for full in (long_task, long_reason):
        escaped = html.escape(full, quote=True)
        assert f'title="{escaped}"' in page  # on hover
        assert f"<p>{html.escape(full, quote=False)}</p>" in page  # on click (details)
    summary = re.search(r'<summary title="[^"]*New York[^"]*">([^<]*)</summary>', page)
    assert summary is not None and summary.group(1).endswith("…")
    assert summary.group(1)[:-1].rstrip() in long_task and long_task.startswith(
        summary.group(1)[:-1].rstrip()
    )
    assert summary.group(1)[:-1].rstrip().split()[-1] in long_task.split()  # cut at a word, not inside one


def test_an_unknown_agent_filter_says_so(store: BlameStore, client: TestClient) -> None:
    trajectory, attribution = _long_run(10, 4)
    store.add(build_run(trajectory, attribution, trace_id="f1" * 16))
    page = client.get("/ui/?agent=nobody").text
    assert 'id="unknown-agent"' in page and "names the agent <strong>nobody</strong>" in page
    assert '<option selected value="nobody">nobody (none stored)</option>' in page
    known = client.get(f"/ui/?agent={attribution.agent}").text
    assert 'id="unknown-agent"' not in known


def test_the_drop_zone_says_no_file_chosen_once(client: TestClient) -> None:
    page = client.get("/ui/attribute").text
    assert page.lower().count("no file chosen") == 1
    assert 'class="file-input"' in page  # the browser's own "No file chosen" is hidden (ui.css)
    css = client.get("/ui/static/ui.css").text
    assert re.search(r"\.dropzone input\.file-input \{[^}]*opacity: 0", css)


def test_uploads_are_kept_with_their_source_and_a_link(store: BlameStore, client: TestClient) -> None:
    file = HAND_CRAFTED / "1.json"
    posted = upload(client, file)
    assert posted.status_code == 303
    link = posted.headers["location"]
    assert re.fullmatch(r"/ui/runs/[0-9a-f]{32}", link)
    page = client.get(link).text
    assert "<h1>Attribution of 1.json</h1>" in page and f'href="{link}" id="share-link"' in page
    assert 'id="verdict"' in page
    # the same file again: the same link
    assert upload(client, file).headers["location"] == link
    listed = client.get("/api/failures").json()["failures"]
    assert [(f["source"], f["trace_id"]) for f in listed] == [("upload: 1.json", link.rsplit("/", 1)[1])]
    # the API keeps it too and answers the link
    assert client.post("/api/attribute", content=file.read_bytes()).json()["url"] == link
    # kept for its link, not counted as a processor's blame
    assert client.get("/api/culprits?window=1h").json()["total"] == 0
    assert '<span class="upload-name" title="1.json">1.json</span>' in client.get("/ui/").text


def test_a_store_made_before_uploads_gets_the_source_column(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        connection.execute(text(
            "CREATE TABLE otel_blame_failures (id INTEGER PRIMARY KEY, trace_id VARCHAR(64) UNIQUE NOT NULL,"
            " service VARCHAR(256) NOT NULL, task VARCHAR(512) NOT NULL, outcome VARCHAR(32) NOT NULL,"
            " agent VARCHAR(256) NOT NULL, step INTEGER NOT NULL, confidence FLOAT NOT NULL,"
            " reason TEXT NOT NULL,"
            " method VARCHAR(256) NOT NULL, method_base VARCHAR(128) NOT NULL, model VARCHAR(256),"
            " attributed_at_ms BIGINT NOT NULL, steps INTEGER NOT NULL, size_bytes INTEGER NOT NULL,"
            " record TEXT NOT NULL)"
        ))  # fmt: skip
    engine.dispose()
    store = open_store(StoreConfig(path=path))
    try:
        trajectory, attribution = _long_run(5, 2)
        store.add(build_run(trajectory, attribution, trace_id="0f" * 16))
        assert store.failures().failures[0].source == ""
        assert json.loads(store.run("0f" * 16).model_dump_json())["source"] == ""
    finally:
        store.close()


def test_a_folded_step_s_long_text_is_on_its_own_page(store: BlameStore, client: TestClient) -> None:
    trajectory, attribution = _long_run(60, 30)
    long_text = "word " * 400
    steps = [s.model_copy(update={"content": long_text}) if s.index == 10 else s for s in trajectory.steps]
    trajectory = trajectory.model_copy(update={"steps": steps})
    store.add(build_run(trajectory, attribution, trace_id="9a" * 16))
    page = client.get(f"/ui/runs/{'9a' * 16}").text
    folded = page[page.index('id="step-10"') : page.index('id="step-11"')]
    assert (
        long_text not in page and f'href="/ui/runs/{"9a" * 16}/steps/10">show all 2000 characters' in folded
    )
    step = client.get(f"/ui/runs/{'9a' * 16}/steps/10")
    assert (
        step.status_code == 200 and f'<pre class="content" id="step-content">{long_text}</pre>' in step.text
    )
    assert client.get(f"/ui/runs/{'9a' * 16}/steps/60").status_code == 404
