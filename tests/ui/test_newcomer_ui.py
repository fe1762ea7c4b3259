"""What a newcomer trips on in the web UI and its API (issue 26), each pinned by a test that failed
before its fix; and the surfaces of ``Attribution.decided`` there (issue 27): an undecided verdict
says "Undecided: X at step 3 or Y at step 7", never a red culprit card."""

from __future__ import annotations

import html
import json
import os
import re
import time
from pathlib import Path

from starlette.testclient import TestClient

from otel_blame.attribution.decision import undecided_sentence
from otel_blame.attribution.result import Attribution, Candidate
from otel_blame.store import BlameStore, StoreConfig, open_store
from otel_blame.store.records import build_run
from otel_blame.trajectory import Outcome, Task, Trajectory
from otel_blame.ui.app import create_ui_app
from tests.store.runs import WHO_AND_WHEN
from tests.ui.uploads import upload

HAND_CRAFTED = WHO_AND_WHEN / "Hand-Crafted"


def _visible(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _run(agents: list[str], *, decided: bool, culprit: int = 1, trace: str = "ab" * 16) -> tuple:
    trajectory = Trajectory.from_steps(
        [{"agent": agent, "content": f"{agent} says {i}"} for i, agent in enumerate(agents)],
        task=Task(input="What is the total?"),
        outcome=Outcome.FAILURE,
    )
    others = [i for i in range(len(agents)) if i != culprit]
    candidates = [Candidate(step=culprit, agent=agents[culprit], score=0.4)] + [
        Candidate(step=i, agent=agents[i], score=0.3 - i / 100) for i in others[:2]
    ]
    attribution = Attribution(
        agent=agents[culprit],
        step=culprit,
        confidence=0.7 if decided else 0.3,
        decided=decided,
        reason=f"Step {culprit} by {agents[culprit]}: a value nothing before it gave first appears here.",
        method="ranker",
        candidates=candidates,
    )
    return build_run(trajectory, attribution, trace_id=trace, service="svc"), attribution


# --- 1. one name per method; and an upload's id is made of its file and its method ----------------


def test_signals_is_reported_and_listed_as_signals(client: TestClient) -> None:
    body = (HAND_CRAFTED / "1.json").read_bytes()
    signals = client.post("/api/attribute?method=signals", content=body).json()
    ranker = client.post("/api/attribute?method=ranker", content=body).json()
    assert signals["method"] == "signals" and ranker["method"] == "ranker"
    assert signals["url"] != ranker["url"]  # the same file under two methods: two verdicts, two links
    listed = client.get("/api/failures").json()["failures"]
    assert sorted(f["method"] for f in listed) == ["ranker", "signals"]
    page = client.get("/ui/").text
    assert "<code>signals</code>" in page and "<code>ranker</code>" in page


def test_the_same_file_under_two_methods_gets_two_links(client: TestClient) -> None:
    file = HAND_CRAFTED / "1.json"
    first = upload(client, file, "ranker").headers["location"]
    second = upload(client, file, "signals").headers["location"]
    assert first != second and client.get("/api/failures").json()["total"] == 2


# --- 2. agent names compared case- and space-insensitively ----------------------------------------


def test_the_known_answer_matches_whatever_the_case(client: TestClient, tmp_path: Path) -> None:
    first = client.post("/api/attribute", content=(HAND_CRAFTED / "11.json").read_bytes()).json()
    log = json.loads((HAND_CRAFTED / "11.json").read_text())
    log["mistake_agent"], log["mistake_step"] = first["agent"].lower(), first["step"]
    file = tmp_path / "11-lower.json"
    file.write_text(json.dumps(log))
    page = client.get(upload(client, file).headers["location"]).text
    assert "the verdict agent and step match" in _visible(page)


def test_an_agent_filter_finds_the_agent_whatever_the_case(store: BlameStore, client: TestClient) -> None:
    run, _ = _run(["Orchestrator", "WebSurfer", "Assistant"], decided=True)
    store.add(run)
    for asked in ("websurfer", "Web Surfer", "WEBSURFER"):
        assert client.get("/api/failures", params={"agent": asked}).json()["total"] == 1, asked
        page = client.get("/ui/", params={"agent": asked}).text
        assert 'id="unknown-agent"' not in page and "<option selected>WebSurfer</option>" in page


# --- 4. a successful run shows no culprit-like mark -----------------------------------------------


def test_a_successful_run_shows_no_heat_and_its_known_answer_as_plain_text(
    client: TestClient, tmp_path: Path
) -> None:
    log = json.loads((HAND_CRAFTED / "11.json").read_text())
    log["is_correct"] = True
    log.pop("is_corrected", None)
    file = tmp_path / "succeeded.json"
    file.write_text(json.dumps(log))
    page = upload(client, file)
    assert page.status_code == 200
    text = page.text
    assert 'class="heat"' not in text and "annotated-badge" not in text and "annotated-mark" not in text
    assert not re.search(r'<li class="step[^"]* annotated', text)
    known = re.search(r'<p class="muted" id="annotation">(.*?)</p>', text)
    assert known is not None and "<a " not in known.group(1)  # plain text, no link to a step
    assert "Websurfer at step 24" in known.group(1)


# --- 9. the UI survives its store file being replaced ---------------------------------------------


def test_the_ui_reads_a_store_file_replaced_under_it(tmp_path: Path) -> None:
    path = tmp_path / "blame-store.sqlite3"
    store = open_store(StoreConfig(path=path))
    try:
        client = TestClient(create_ui_app(store))
        first, _ = _run(["planner", "coder"], decided=True, trace="01" * 16)
        store.add(first)
        assert client.get("/api/failures").json()["total"] == 1
        # another process writes a new store and moves it over this one (a demo run, a restore)
        replacement = tmp_path / "new.sqlite3"
        other = open_store(StoreConfig(path=replacement))
        for trace in ("02" * 16, "03" * 16):
            other.add(_run(["planner", "coder"], decided=True, trace=trace)[0])
        other.close()
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        os.replace(replacement, path)
        listed = client.get("/api/failures").json()
        assert sorted(f["trace_id"] for f in listed["failures"]) == ["02" * 16, "03" * 16]
        # and a deleted one: an empty store, not an error
        path.unlink()
        assert client.get("/api/failures").json()["total"] == 0
        assert client.get("/ui/").status_code == 200
    finally:
        store.close()


# --- 10. uploads are told apart by their file name ------------------------------------------------


def test_uploads_are_listed_with_their_file_name_and_keep_their_first_name(client: TestClient) -> None:
    file = HAND_CRAFTED / "1.json"
    link = upload(client, file).headers["location"]
    again = client.post("/api/attribute", content=file.read_bytes()).json()  # the same content
    assert again["url"] == link
    [listed] = client.get("/api/failures").json()["failures"]
    assert listed["source"] == "upload: 1.json"  # not renamed "the request body"
    page = client.get("/ui/").text
    assert '<span class="upload-name" title="1.json">1.json</span>' in page
    assert "<h1>Attribution of 1.json</h1>" in client.get(link).text
    named = client.post("/api/attribute?name=run-42.json", content=(HAND_CRAFTED / "7.json").read_bytes())
    assert named.json()["url"] and "run-42.json" in client.get("/ui/").text


# --- 6. layout: long names ellipsised with their whole name as a title ----------------------------


def test_a_long_agent_name_has_its_whole_name_as_a_title(store: BlameStore, client: TestClient) -> None:
    long_name = "a-forty-character-agent-name-for-testing"
    assert len(long_name) == 40
    run, _ = _run(["planner", long_name, "reviewer"], decided=True)
    store.add(run)
    page = client.get(f"/ui/runs/{run.trace_id}").text
    assert f'id="culprit-agent" title="{long_name}"' in page
    assert f'<span class="agent-name" title="{long_name}">' in page
    assert f'<td class="agent-cell" title="{long_name}">' in client.get("/ui/").text


# --- issue 27: an undecided verdict on the page and in the API ------------------------------------


def test_an_undecided_verdict_is_said_as_such_not_as_a_culprit(store: BlameStore, client: TestClient) -> None:
    run, attribution = _run(["planner", "coder", "executor", "reviewer"], decided=False, culprit=2)
    store.add(run)
    page = client.get(f"/ui/runs/{run.trace_id}").text
    said = _visible(re.search(r'<p class="undecided-line" id="undecided">(.*?)</p>', page, re.S).group(1))
    assert said == undecided_sentence(attribution.candidates, attribution.agent, attribution.step)
    assert said == "Undecided: executor at step 2 or planner at step 0"
    assert 'id="culprit-agent"' not in page and "culprit-badge" not in page and "is-culprit" not in page
    assert not re.search(r'<li class="step[^"]* culprit', page)
    assert "candidate 1" in page  # its top pick is a candidate, first of them
    failures = client.get("/api/failures").json()["failures"]
    assert failures[0]["decided"] is False
    assert client.get(f"/api/runs/{run.trace_id}").json()["decided"] is False
    assert "undecided" in _visible(client.get("/ui/").text)
    decided, _ = _run(["planner", "coder"], decided=True, trace="cd" * 16)
    store.add(decided)
    assert 'id="culprit-agent"' in client.get(f"/ui/runs/{decided.trace_id}").text


def test_the_api_s_answer_says_whether_the_verdict_is_decided(client: TestClient) -> None:
    answers = [
        client.post("/api/attribute", content=(HAND_CRAFTED / name).read_bytes()).json()
        for name in ("1.json", "7.json", "11.json", "14.json", "24.json")
    ]
    assert {answer["decided"] for answer in answers} == {True, False}  # both kinds among these
    for answer in answers:
        if answer["decided"]:
            assert answer["verdict"] == f"{answer['agent']} at step {answer['step']}"
        else:
            assert answer["verdict"].startswith(f"Undecided: {answer['agent']} at step {answer['step']}")


def test_the_culprits_page_counts_decided_verdicts_unless_asked(
    store: BlameStore, client: TestClient
) -> None:
    now = time.time()
    for position, decided in enumerate((True, True, False)):
        run, _ = _run(["planner", "coder"], decided=decided, trace=f"{position + 1:032x}")
        store.add(run.model_copy(update={"attributed_at": now - 60}))
    default = client.get("/api/culprits?window=1h").json()
    assert (default["total"], default["undecided"], default["undecided_counted"]) == (2, 1, False)
    every = client.get("/api/culprits?window=1h&undecided=1").json()
    assert (every["total"], every["undecided_counted"]) == (3, True)
    page = _visible(client.get("/ui/culprits?window=1h").text)
    assert "Decided verdicts only: 1 undecided verdict in this window is not counted." in page
    counted = TestClient(create_ui_app(store, settings=None)).get("/api/culprits?window=1h&undecided=yes")
    assert counted.json()["total"] == 3
    assert client.get("/api/culprits?window=1h&undecided=maybe").status_code == 400
