"""The JSON API: filters, paging, 404, uploads good and bad, auth on every path, CSRF."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from otel_blame.store import BlameStore
from otel_blame.store.records import StoredRun
from otel_blame.ui.app import create_ui_app
from otel_blame.ui.security import CONTENT_SECURITY_POLICY, CSRF_COOKIE, SESSION_COOKIE
from otel_blame.ui.settings import UISettings
from tests.store.runs import who_and_when_files
from tests.support.decided import ALWAYS_DECIDED, set_decided_threshold

TOKEN = "s3cret-token-for-tests"
PAGES = ["/ui/", "/ui/culprits", "/ui/attribute", "/ui/runs/" + "1".rjust(32, "0")]
API_GETS = ["/api/failures", "/api/culprits?window=1h", "/api/runs/" + "1".rjust(32, "0")]


@pytest.fixture
def client(seeded: tuple[BlameStore, list[StoredRun]]) -> TestClient:
    return TestClient(create_ui_app(seeded[0], UISettings(max_upload_bytes=2 * 1024 * 1024)))


@pytest.fixture
def locked(seeded: tuple[BlameStore, list[StoredRun]]) -> TestClient:
    return TestClient(create_ui_app(seeded[0], UISettings(auth_token=TOKEN)), follow_redirects=False)


def test_failures_newest_first_with_paging(client: TestClient, seeded) -> None:  # noqa: ANN001
    runs = sorted(seeded[1], key=lambda r: -r.attributed_at)
    first = client.get("/api/failures?limit=10").json()
    assert first["total"] == 31 and first["limit"] == 10 and first["offset"] == 0
    assert [f["trace_id"] for f in first["failures"]] == [r.trace_id for r in runs[:10]]
    last = client.get("/api/failures?limit=10&offset=30").json()
    assert [f["trace_id"] for f in last["failures"]] == [runs[30].trace_id]
    assert client.get("/api/failures?limit=10&offset=40").json()["failures"] == []


def test_failure_filters(client: TestClient, seeded) -> None:  # noqa: ANN001
    runs = seeded[1]
    agent = runs[4].agent
    by_agent = client.get("/api/failures", params={"agent": agent}).json()
    assert by_agent["total"] == sum(r.agent == agent for r in runs)
    assert {f["agent"] for f in by_agent["failures"]} == {agent}
    search = client.get("/api/failures", params={"service": "search"}).json()
    assert search["total"] == sum(r.service == "search" for r in runs)
    recent = client.get("/api/failures", params={"since": "50m"}).json()
    assert recent["total"] == sum(r.attributed_at >= time.time() - 3000 for r in runs)
    iso = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 3000))
    assert client.get("/api/failures", params={"since": iso}).json()["total"] == recent["total"]
    assert client.get("/api/failures", params={"method": "heuristic"}).json()["total"] == 31
    assert client.get("/api/failures", params={"method": "binary_search"}).json()["total"] == 0
    both = client.get("/api/failures", params={"agent": agent, "service": runs[4].service}).json()
    assert both["total"] == sum(r.agent == agent and r.service == runs[4].service for r in runs)


@pytest.mark.parametrize(
    "query", ["limit=zero", "limit=0", "limit=501", "offset=-1", "since=yesterday-ish", "window=forever"]
)
def test_bad_query_parameters_are_400(client: TestClient, query: str) -> None:
    path = "/api/culprits" if query.startswith("window") else "/api/failures"
    response = client.get(f"{path}?{query}")
    assert response.status_code == 400
    assert query.split("=")[0] in response.json()["error"]


def test_a_run_and_an_unknown_run(client: TestClient, seeded) -> None:  # noqa: ANN001
    run = seeded[1][7]
    answer = client.get(f"/api/runs/{run.trace_id}").json()
    assert answer["agent"] == run.agent and answer["step"] == run.step
    assert len(answer["scores"]) == len(answer["trajectory"]["steps"])
    assert client.get("/api/runs/" + "e" * 32).status_code == 404
    assert client.get("/api/runs/not-a-trace-id").status_code == 404
    assert client.get("/ui/runs/" + "e" * 32).status_code == 404


def test_culprits_match_the_store(client: TestClient, seeded) -> None:  # noqa: ANN001
    """Decided verdicts by default, every verdict with ?undecided=1."""
    runs = seeded[1]
    assert 0 < sum(run.decided for run in runs) < len(runs)  # the seeded runs have both kinds
    for query, counted in (("", [r for r in runs if r.decided]), ("&undecided=1", runs)):
        report = client.get(f"/api/culprits?window=24h&buckets=12{query}").json()
        expected: dict[tuple[str, str], int] = {}
        for run in counted:
            expected[(run.service, run.agent)] = expected.get((run.service, run.agent), 0) + 1
        assert {(c["service"], c["agent"]): c["count"] for c in report["culprits"]} == expected
        assert len(report["bucket_starts"]) == 12 and report["total"] == len(counted)
        assert report["undecided"] == len(runs) - len(counted)


def test_attribute_a_who_and_when_log_as_body_and_as_file(client: TestClient) -> None:
    path = who_and_when_files(1)[0]
    log = json.loads(path.read_text())
    as_body = client.post("/api/attribute?method=heuristic", content=path.read_bytes(),
                          headers={"content-type": "application/json"})  # fmt: skip
    assert as_body.status_code == 200, as_body.text
    answer = as_body.json()
    for key in ("agent", "step", "confidence", "reason", "method", "scores"):
        assert key in answer
    assert answer["method"] == "heuristic"
    assert len(answer["scores"]) == len(log["history"])
    assert answer["agent"] in answer["agents"]
    as_file = client.post(
        "/api/attribute", files={"file": (path.name, path.read_bytes(), "application/json")}
    )
    assert as_file.status_code == 200
    assert {k: as_file.json()[k] for k in ("agent", "step")} == {k: answer[k] for k in ("agent", "step")}


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"", 400, "empty"),
        (b"   \n", 400, "empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), 415, "binary"),
        (b'\xff\xfe{"history": []}', 415, "UTF-8"),
        (b'{"rows": [1, 2, 3]}', 422, "unrecognised format"),
        (b'{"history": "not a list"}', 422, "list of messages"),
        (b'{"history": []}', 422, "no messages"),
        (b"[1, 2", 422, "line 1"),
    ],
)
def test_bad_uploads_get_a_clear_4xx(client: TestClient, body: bytes, status: int, words: str) -> None:
    for response in (
        client.post("/api/attribute", content=body, headers={"content-type": "application/json"}),
        client.post("/api/attribute", files={"file": ("trace.json", body, "application/json")}),
    ):
        assert response.status_code == status, response.text
        assert words.lower() in response.json()["error"].lower()
        assert "Traceback" not in response.text


def test_a_50_mb_upload_is_refused_with_413(client: TestClient) -> None:
    big = b'{"history": [' + b'{"content": "x", "name": "a"},' * (50 * 1024 * 1024 // 30 + 100) + b"{}]}"
    assert len(big) > 50 * 1024 * 1024
    response = client.post("/api/attribute", content=big, headers={"content-type": "application/json"})
    assert response.status_code == 413 and "MiB" in response.json()["error"]
    multipart = client.post("/api/attribute", files={"file": ("big.json", big, "application/json")})
    assert multipart.status_code == 413


def test_unknown_and_unconfigured_methods(client: TestClient) -> None:
    body = who_and_when_files(1)[0].read_bytes()
    unknown = client.post("/api/attribute?method=oracle", content=body)
    assert unknown.status_code == 400 and "unknown method" in unknown.json()["error"]
    llm = client.post("/api/attribute?method=all_at_once", content=body)
    assert llm.status_code == 400 and "no" in llm.json()["error"] and "LLM" in llm.json()["error"]


def test_every_path_needs_the_token(locked: TestClient) -> None:
    body = who_and_when_files(1)[0].read_bytes()
    for path in API_GETS:
        response = locked.get(path)
        assert response.status_code == 401, path
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert locked.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert locked.get(path, headers={"Authorization": f"Bearer {TOKEN}"}).status_code in (200, 404)
    assert locked.post("/api/attribute", content=body).status_code == 401
    ok = locked.post("/api/attribute", content=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200
    for path in PAGES:
        response = locked.get(path)
        assert response.status_code == 303 and response.headers["location"].startswith("/ui/login?next="), (
            path
        )
    assert locked.post("/ui/attribute", data={"text": "{}"}).status_code == 303
    # the sign-in page itself and the static assets are open (the form needs its stylesheet)
    assert locked.get("/ui/login").status_code == 200
    assert locked.get("/ui/static/ui.css").status_code == 200


def _sign_in(client: TestClient, token: str = TOKEN):  # noqa: ANN202
    form = client.get("/ui/login")
    csrf = client.cookies.get(CSRF_COOKIE)
    assert csrf and f'value="{csrf}"' in form.text
    return client.post("/ui/login?next=/ui/culprits", data={"token": token, "csrf_token": csrf})


def test_sign_in_sets_an_httponly_samesite_cookie(locked: TestClient) -> None:
    wrong = _sign_in(locked, "nope")
    assert wrong.status_code == 401 and "not right" in wrong.text
    response = _sign_in(locked)
    assert response.status_code == 303 and response.headers["location"] == "/ui/culprits"
    cookie = next(h for h in response.headers.get_list("set-cookie") if h.startswith(SESSION_COOKIE))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    for path in PAGES[:3]:
        assert locked.get(path).status_code == 200, path
    assert locked.get("/api/failures").status_code == 200  # the pages' own session works for GETs
    # a forged session cookie is refused
    locked.cookies.clear()
    locked.cookies.set(SESSION_COOKIE, "9999999999.deadbeef")
    assert locked.get("/ui/").status_code == 303


def test_state_changing_requests_need_the_csrf_token(
    locked: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_decided_threshold(monkeypatch, ALWAYS_DECIDED)  # the surface, not the threshold
    _sign_in(locked)
    text = who_and_when_files(1)[0].read_text()
    csrf = locked.cookies.get(CSRF_COOKIE)
    no_token = locked.post("/ui/attribute", data={"text": text, "method": "heuristic"})
    assert no_token.status_code == 403 and "expired or came from another site" in no_token.text
    wrong = locked.post("/ui/attribute", data={"text": text, "csrf_token": "x" * 43})
    assert wrong.status_code == 403
    ok = locked.post("/ui/attribute", data={"text": text, "method": "heuristic", "csrf_token": csrf})
    assert ok.status_code == 303 and ok.headers["location"].startswith("/ui/runs/")
    assert 'id="culprit-agent"' in locked.get(ok.headers["location"]).text
    # cross-site: another Origin is refused even with the token
    evil = locked.post("/ui/attribute", data={"text": text, "csrf_token": csrf},
                       headers={"Origin": "https://evil.example"})  # fmt: skip
    assert evil.status_code == 403
    # the API through the session cookie needs the header; through Bearer it does not
    assert locked.post("/api/attribute", content=text).status_code == 403
    assert locked.post("/api/attribute", content=text, headers={"X-CSRF-Token": csrf}).status_code == 200
    # sign-out is a POST with the token too
    assert locked.post("/ui/logout", data={}).status_code == 403
    out = locked.post("/ui/logout", data={"csrf_token": csrf})
    assert out.status_code == 303
    assert locked.get("/ui/").status_code == 303


def test_without_a_token_cross_site_posts_are_still_refused(client: TestClient) -> None:
    text = who_and_when_files(1)[0].read_text()
    evil = client.post("/api/attribute", content=text, headers={"Origin": "https://evil.example"})
    assert evil.status_code == 403
    assert client.post("/ui/attribute", data={"text": text}).status_code == 403  # no CSRF token


def test_every_answer_has_a_strict_csp(client: TestClient) -> None:
    for path in [*PAGES, *API_GETS]:
        response = client.get(path)
        csp = response.headers["content-security-policy"]
        assert csp == CONTENT_SECURITY_POLICY
        assert "'unsafe-inline'" not in csp and "script-src 'self'" in csp and "default-src 'none'" in csp
        assert response.headers["x-content-type-options"] == "nosniff"


def test_agent_content_is_escaped_in_every_page(client: TestClient) -> None:
    from tests.ui.conftest import HOSTILE_TRACE

    for path in [f"/ui/runs/{HOSTILE_TRACE}", "/ui/", "/ui/culprits?window=24h"]:
        html = client.get(path).text
        assert "<script>alert" not in html and "<img src=x" not in html and "<b>bold" not in html
    html = client.get(f"/ui/runs/{HOSTILE_TRACE}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "<script" not in html.replace('<script src="/ui/static/ui.js" defer></script>', "")


def test_ui_pages_render(client: TestClient, seeded, tmp_path: Path) -> None:  # noqa: ANN001
    run = seeded[1][0]
    assert run.agent in client.get("/ui/").text
    page = client.get(f"/ui/runs/{run.trace_id}").text
    assert f'id="step-{run.step}"' in page and "culprit" in page
    assert client.get("/ui/?agent=nobody").status_code == 200
    assert client.get("/ui/?page=2").status_code == 200
    assert client.get("/ui/?since=bogus").status_code == 400
    assert client.get("/").status_code == 200  # redirected to /ui/


def test_the_kind_of_failure_and_the_cross_run_evidence_are_kept_and_shown(tmp_path: Path) -> None:
    """blame.category / dependency / failure_mode and the cross-run suspiciousness reach the API and
    the run page; a record kept before they existed still reads (they are None)."""
    from otel_blame.attribution.result import Attribution
    from otel_blame.store import StoreConfig, open_store
    from otel_blame.store.records import build_run
    from otel_blame.trajectory import Outcome, Task, Trajectory

    store = open_store(StoreConfig(path=tmp_path / "blame-store.sqlite3"))
    try:
        trajectory = Trajectory.from_steps(
            [
                {"agent": "Planner", "content": "Search the web for the 2023 figure."},
                {"agent": "Researcher", "content": "web_search failed: HTTP 503 Service Unavailable."},
                {"agent": "Writer", "content": "The figure is 12."},
            ],
            task=Task(input="What was the 2023 figure?"),
            outcome=Outcome.FAILURE,
        )
        attribution = Attribution(
            agent="Researcher",
            step=1,
            confidence=0.7,
            reason="its search failed",
            method="heuristic",
            category="dependency",
            dependency="web_search",
            failure_mode="no_or_incomplete_verification",
            cross_run_suspiciousness=0.82,
        )
        trace_id = "ab" * 16
        store.add(build_run(trajectory, attribution, trace_id=trace_id, service="research"))
        client = TestClient(create_ui_app(store, UISettings()))
        answer = client.get(f"/api/runs/{trace_id}").json()
        assert (answer["category"], answer["dependency"]) == ("dependency", "web_search")
        assert answer["failure_mode"] == "no_or_incomplete_verification"
        assert answer["cross_run_suspiciousness"] == 0.82
        page = client.get(f"/ui/runs/{trace_id}").text
        assert 'id="culprit-category">dependency<' in page and 'id="culprit-dependency">web_search<' in page
        assert 'id="culprit-failure-mode">no_or_incomplete_verification<' in page
        assert 'id="culprit-cross-run">82%<' in page
        older = json.loads(StoredRun.model_validate(answer).model_dump_json())
        for key in ("category", "dependency", "failure_mode", "cross_run_suspiciousness"):
            older.pop(key)
        assert StoredRun.model_validate(older).category is None
    finally:
        store.close()


def test_a_gzipped_span_tree_is_attributed_and_a_gzip_bomb_refused(client: TestClient) -> None:
    import gzip

    from tests.conventions import span_trees

    packed = gzip.compress(json.dumps(span_trees.gaia_run()).encode())
    response = client.post(
        "/api/attribute?assume_failed=1", files={"file": ("gaia.json.gz", packed, "application/gzip")}
    )
    assert response.status_code == 200, response.text
    assert response.json()["agent"] in {"CodeAgent", "search_agent", "answer_single_question"}
    bomb = gzip.compress(b" " * (400 * 1024 * 1024), compresslevel=9)  # 400 MiB of spaces, 0.4 MiB packed
    refused = client.post("/api/attribute", files={"file": ("bomb.json.gz", bomb, "application/gzip")})
    assert refused.status_code == 415 and "once decompressed" in refused.json()["error"]
    cut = client.post("/api/attribute", files={"file": ("cut.json.gz", packed[:100], "application/gzip")})
    assert cut.status_code == 415 and "gzip" in cut.json()["error"]
