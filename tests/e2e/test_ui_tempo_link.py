"""The run view's "Open in Tempo" link, followed to a real Grafana Tempo.

`otel-blame serve` (a subprocess, configured through the environment as a deployment would be)
exports to real Tempo (the cached binary, the shipped deploy/tempo/tempo.yaml on loopback) and
serves the web UI with the Grafana Explore link template that docs/ui.md documents. Chromium opens
the run page of a blamed trace and reads the link. Grafana itself is not run here (no Grafana
binary is built for the tests), so the test checks what Grafana does with that link: the Explore
pane names the Tempo data source provisioned in deploy/grafana (uid ``tempo``) and queries the
trace id, and the trace-by-id lookup the data source makes, ``GET /api/traces/{id}`` on Tempo,
answers the trace with its culprit span. The plain Tempo API template (``/api/traces/{trace_id}``)
is followed too: Chromium opens it and gets the trace.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
import uuid
from pathlib import Path

import pytest
import yaml

from otel_blame import semconv as sc
from otel_blame.ui.settings import UISettings
from tests.ui.browser import chromium, off_loopback, requested_urls

from .harness import REPO, BlameServer, ProcessGroup, http_get, missing_binary_reason, wait_until
from .test_tempo_e2e import TEMPO_BIN, Tempo, otlp_json_attributes, send_runs

GRAFANA_DATASOURCES = REPO / "deploy" / "grafana" / "provisioning" / "datasources" / "datasources.yml"
GRAFANA = "http://grafana.example:3000"
# the template docs/ui.md documents: a Grafana Explore pane on the provisioned Tempo data source,
# querying the trace id (the TraceQL editor takes a trace id as a lookup); URL-encoded except the
# {trace_id} placeholder
PANES = {
    "blame": {
        "datasource": "tempo",
        "queries": [
            {
                "refId": "A",
                "datasource": {"type": "tempo", "uid": "tempo"},
                "queryType": "traceql",
                "query": "{trace_id}",
            }
        ],
        "range": {"from": "now-7d", "to": "now"},
    }
}
EXPLORE_TEMPLATE = f"{GRAFANA}/explore?schemaVersion=1&orgId=1&panes=" + urllib.parse.quote(
    json.dumps(PANES, separators=(",", ":")), safe=""
).replace("%7Btrace_id%7D", "{trace_id}")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(
        missing_binary_reason(TEMPO_BIN) is not None, reason=str(missing_binary_reason(TEMPO_BIN))
    ),
]


def _tempo_trace(url: str) -> list[dict]:
    """The spans of the trace a Tempo trace-by-id URL answers (OTLP JSON, v1 ``batches`` form)."""
    status, body = http_get(url, timeout=10)
    assert status == 200, (url, status, body[:300])
    answer = json.loads(body)
    batches = answer.get("batches") or answer.get("resourceSpans") or []
    return [span for batch in batches for scope in batch.get("scopeSpans", []) for span in scope["spans"]]


def _culprit(spans: list[dict]) -> dict:
    (culprit,) = [s for s in spans if otlp_json_attributes(s.get("attributes", [])).get(sc.BLAME_CULPRIT)]
    return otlp_json_attributes(culprit["attributes"])


def test_the_tempo_link_of_a_run_opens_its_trace_in_tempo(group: ProcessGroup, tmp_path: Path) -> None:
    tempo = Tempo(group)
    blame = BlameServer(
        group,
        "otel-blame",
        downstream=tempo.otlp_grpc_endpoint,
        wal_dir=tmp_path / "wal",
        extra_env={"OTEL_BLAME_UI__TEMPO_URL_TEMPLATE": EXPLORE_TEMPLATE},
    )
    service = f"e2e-tempo-link-{uuid.uuid4().hex[:8]}"
    ids = send_runs(service, blame.otlp_grpc_endpoint)
    trace_id = ids["coder"][0]
    ui = f"http://127.0.0.1:{blame.http_port}"

    def stored_run() -> dict | None:
        status, body = http_get(f"{ui}/api/runs/{trace_id}")
        return json.loads(body) if status == 200 else None

    stored = wait_until(stored_run, timeout=60, what="the blamed run in the blame store")
    by_id = f"{tempo.base_url}/api/traces/{trace_id}"
    try:
        wait_until(
            lambda: http_get(by_id, timeout=10)[0] == 200, timeout=90, what="the trace in Tempo", interval=1
        )
    except TimeoutError as error:
        raise AssertionError(f"{error}\n{group.logs()}") from None

    with chromium() as browser:
        browser.get(f"{ui}/ui/runs/{trace_id}")
        link = browser.find_element("partial link text", "Open in Tempo").get_attribute("href")
        assert off_loopback(requested_urls(browser)) == []
    # the link is the template with the run's trace id, nothing else changed
    assert link == EXPLORE_TEMPLATE.replace("{trace_id}", trace_id)

    # what Grafana makes of it: an Explore pane on the provisioned Tempo data source, looking up the id
    parts = urllib.parse.urlsplit(link)
    assert parts.path == "/explore"
    (pane,) = json.loads(urllib.parse.parse_qs(parts.query)["panes"][0]).values()
    (query,) = pane["queries"]
    assert query["query"] == trace_id and query["queryType"] == "traceql"
    provisioned = {d["uid"]: d for d in yaml.safe_load(GRAFANA_DATASOURCES.read_text())["datasources"]}
    datasource = provisioned[query["datasource"]["uid"]]
    assert (
        datasource["type"] == "tempo" == query["datasource"]["type"]
        and pane["datasource"] == datasource["uid"]
    )
    # the data source looks the id up on the Tempo its URL names (deploy/: tempo:3200; here, loopback)
    assert urllib.parse.urlsplit(datasource["url"]).port == 3200  # Tempo's HTTP port in deploy/
    culprit = _culprit(_tempo_trace(f"{tempo.base_url}/api/traces/{query['query']}"))
    assert culprit[sc.BLAME_AGENT] == stored["agent"] == "coder"
    assert culprit[sc.BLAME_STEP] == stored["step"]

    # the plain Tempo API template: the link the run page makes, opened in Chromium, is the trace
    direct = UISettings(tempo_url_template=f"{tempo.base_url}/api/traces/{{trace_id}}").trace_links(trace_id)
    assert direct == [("Tempo", by_id)]
    with chromium() as browser:
        browser.get(by_id)
        raw = browser.find_element("tag name", "pre").text  # Chromium shows a JSON answer in a <pre>
    answer = json.loads(raw)
    spans = [span for batch in answer["batches"] for scope in batch["scopeSpans"] for span in scope["spans"]]
    assert _culprit(spans)[sc.BLAME_AGENT] == "coder"
    assert {span["traceId"] for span in spans} <= {
        trace_id,
        base64.b64encode(bytes.fromhex(trace_id)).decode(),
    }
