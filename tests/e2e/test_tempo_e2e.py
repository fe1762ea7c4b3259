"""Blamed traces in a real Grafana Tempo, found with TraceQL; the Grafana dashboard's queries run.

Real Tempo (built from the Go module proxy by deploy/build_components.sh) runs the shipped
deploy/tempo/tempo.yaml with loopback addresses, free ports and temporary paths put in (and its
flush timers shortened for a test). `otel-blame serve` exports to Tempo over OTLP/gRPC. Failed
runs blamed on `coder` and on `planner`, and a successful run, go through it. Then:
- the issue's TraceQL query `{ span.blame.culprit = true && span.blame.agent = "coder" }` finds
  exactly the runs blamed on `coder`, through Tempo's HTTP search API;
- the culprit span in Tempo carries `blame.*` and the `gen_ai.evaluation.result` event;
- every query of deploy/grafana/dashboards/otel-blame.json runs: its `agent` variable against real
  Prometheus (Debian package) scraping otel-blame, the Prometheus panels against the same
  Prometheus, and the Tempo panel's TraceQL (with `$agent` filled in as Grafana does) against Tempo.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_blame import semconv as sc
from otel_blame.alerting.metrics import ATTRIBUTIONS_TOTAL
from otel_blame.instrumentation import (
    configure,
    current_trace_id,
    record_message,
    reset_configuration,
    set_outcome,
    task,
)
from tests.ports import reserve_port

from .harness import (
    E2E_BIN_DIR,
    PROMETHEUS_BIN,
    REPO,
    BlameServer,
    ManagedProcess,
    ProcessGroup,
    Prometheus,
    http_get,
    missing_binary_reason,
    missing_system_binary_reason,
    wait_ready,
    wait_until,
)

TEMPO_BIN = E2E_BIN_DIR / "tempo"
TEMPO_CONFIG = REPO / "deploy" / "tempo" / "tempo.yaml"
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "otel-blame.json"
ISSUE_QUERY = '{ span.blame.culprit = true && span.blame.agent = "coder" }'

_missing = missing_binary_reason(TEMPO_BIN) or missing_system_binary_reason(PROMETHEUS_BIN)
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(_missing is not None, reason=str(_missing)),
]


def tempo_test_config(base: Mapping[str, Any], data_dir: Path, ports: Mapping[str, int]) -> dict:
    """The shipped config on loopback: free ports, paths under ``data_dir``, short flush timers."""
    config = copy.deepcopy(dict(base))
    config["server"].update(
        http_listen_address="127.0.0.1",
        http_listen_port=ports["http"],
        grpc_listen_address="127.0.0.1",
        grpc_listen_port=ports["grpc"],
    )
    config["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] = f"127.0.0.1:{ports['otlp']}"
    config["memberlist"].update(bind_addr=["127.0.0.1"], bind_port=ports["memberlist"])
    ingester = config["ingester"]
    ingester.update(trace_idle_period="1s", flush_check_period="1s")
    ingester["lifecycler"]["min_ready_duration"] = "0s"
    trace = config["storage"]["trace"]
    trace["wal"]["path"] = str(data_dir / "wal")
    trace["local"]["path"] = str(data_dir / "blocks")
    return config


class Tempo:
    """Real Grafana Tempo on loopback, single binary, local storage in the group's log directory."""

    def __init__(self, group: ProcessGroup, name: str = "tempo"):
        self.ports = {key: reserve_port() for key in ("http", "grpc", "otlp", "memberlist")}
        config = tempo_test_config(yaml.safe_load(TEMPO_CONFIG.read_text()), group.log_dir / name, self.ports)
        config_path = group.log_dir / f"{name}.yaml"
        config_path.write_text(yaml.safe_dump(config))
        self.proc: ManagedProcess = group.start(name, [str(TEMPO_BIN), f"-config.file={config_path}"])
        wait_ready(self.proc, f"{self.base_url}/ready", timeout=120)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['http']}"

    @property
    def otlp_grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.ports['otlp']}"

    def _api(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        status, body = http_get(f"{self.base_url}{path}{query}", timeout=10)
        if status != 200:
            raise RuntimeError(f"Tempo {path} answered {status}: {body[:500]!r}")
        return json.loads(body)

    def search(self, traceql: str, limit: int = 50, spss: int = 10) -> list[dict]:
        """TraceQL through Tempo's HTTP search API, over the last hour (ingesters and blocks)."""
        now = int(time.time())
        params = {"q": traceql, "start": now - 3600, "end": now + 60, "limit": limit, "spss": spss}
        return self._api("/api/search", params).get("traces", [])

    def trace(self, trace_id: str) -> list[dict]:
        """The spans of one trace (OTLP JSON as Tempo returns it)."""
        body = self._api(f"/api/v2/traces/{trace_id}")
        resource_spans = body.get("trace", body).get("resourceSpans") or body.get("batches") or []
        return [
            span for rs in resource_spans for scope in rs.get("scopeSpans", []) for span in scope["spans"]
        ]


def otlp_json_attributes(attributes: list[dict]) -> dict[str, Any]:
    """OTLP JSON ``[{key, value: {stringValue|intValue|...}}]`` -> {key: value}."""
    out: dict[str, Any] = {}
    for attribute in attributes:
        ((kind, value),) = attribute["value"].items()
        out[attribute["key"]] = int(value) if kind == "intValue" else value
    return out


def span_id_hex(value: str) -> str:
    """Tempo's span ids: hex in search results, base64 in OTLP JSON traces; hex either way here."""
    if re.fullmatch(r"[0-9a-f]{1,16}", value):
        return value.rjust(16, "0")
    return base64.b64decode(value).hex()


# --- the runs ---------------------------------------------------------------------------------------

CODER_RUN = [
    ("planner", "Plan: the coder computes 6*7 and the reviewer checks it."),
    ("coder", "I computed it: 6*7 = 41. The answer is 41."),
    ("reviewer", "Looks fine to me."),
]
PLANNER_RUN = [
    ("planner", "We already know the result is 41; coder, just format it."),
    ("coder", "Formatted result: 41"),
    ("reviewer", "Approved."),
]
GOOD_RUN = [
    ("planner", "Plan: the coder computes 6*7."),
    ("coder", "6*7 = 42. The answer is 42."),
]


def send_runs(service: str, endpoint: str, rounds: int = 1, first: int = 0) -> dict[str, list[str]]:
    """``rounds`` x (a failed run of each kind), one successful run; trace ids by expected culprit."""
    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: service}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True)))
    configure(tracer_provider=provider)
    ids: dict[str, list[str]] = {"coder": [], "planner": [], "none": []}
    plan = [("coder", CODER_RUN, False), ("planner", PLANNER_RUN, False)] * rounds + [
        ("none", GOOD_RUN, True)
    ]
    try:
        for index, (culprit, steps, success) in enumerate(plan, start=first):
            with task(f"multiply-{index}", input="What is 6*7?", expected_output="42"):
                ids[culprit].append(current_trace_id() or "")
                for agent, text in steps:
                    record_message(agent, text)
                final = "42" if success else "41"
                set_outcome(success, final_output=final, reason=None if success else "answered 41, not 42")
    finally:
        reset_configuration()
        provider.shutdown()
    return ids


# --- the dashboard ----------------------------------------------------------------------------------


def dashboard_queries() -> tuple[dict, list[tuple[str, str]], list[tuple[str, str]]]:
    """(the agent variable, [(panel title, PromQL)], [(panel title, TraceQL)]) of the shipped dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "agent"]
    promql, traceql = [], []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            kind = (target.get("datasource") or panel["datasource"])["type"]
            if kind == "prometheus":
                promql.append((panel["title"], target["expr"]))
            elif kind == "tempo":
                assert target["queryType"] == "traceql", panel["title"]
                traceql.append((panel["title"], target["query"]))
    return variable, promql, traceql


def with_agent(query: str, variable: dict, agent: str | None) -> str:
    """``$agent`` as Grafana fills it in: the chosen value, or the variable's allValue for All."""
    return query.replace("$agent", variable["allValue"] if agent is None else agent)


def label_values_query(variable: dict) -> tuple[str, str]:
    """``label_values(metric, label)`` -> (metric, label)."""
    match = re.fullmatch(
        r"label_values\((?P<metric>[a-z_:]+),\s*(?P<label>[a-z_]+)\)", variable["definition"]
    )
    assert match, variable["definition"]
    assert variable["query"]["query"] == variable["definition"]
    return match["metric"], match["label"]


def test_blamed_traces_are_found_in_tempo_by_traceql_and_the_dashboard_queries_run(
    group: ProcessGroup, tmp_path: Path
):
    service = f"e2e-tempo-{uuid.uuid4().hex[:8]}"
    tempo = Tempo(group)
    blame = BlameServer(
        group,
        "otel-blame",
        downstream=tempo.otlp_grpc_endpoint,
        wal_dir=tmp_path / "wal",
        # every verdict on the culprit counters, decided or not: what is tested is that the dashboard's
        # queries run and find both agents (decided-only counting: tests/alerting/test_decided_only.py)
        extra_env={"OTEL_BLAME_ALERTING__COUNT_UNDECIDED": "true"},
    )
    prometheus = Prometheus(
        group,
        {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {
                    "job_name": "otel-blame",
                    "metrics_path": "/metrics",
                    "static_configs": [{"targets": [f"127.0.0.1:{blame.http_port}"]}],
                }
            ],
        },
    )

    def explain() -> str:
        return f"\n{group.logs()}"

    # a first round before Prometheus has the series and a second after: increase() and rate()
    # count only what a scrape saw grow, as in production where the counters exist long before
    ids = send_runs(service, blame.otlp_grpc_endpoint)
    try:
        wait_until(
            lambda: prometheus.query(f'{ATTRIBUTIONS_TOTAL}{{service="{service}"}}'),
            timeout=30,
            what="the first round scraped",
        )
    except TimeoutError as error:
        raise AssertionError(f"{error}\n{group.logs()}") from None
    for culprit, trace_ids in send_runs(service, blame.otlp_grpc_endpoint, first=10).items():
        ids[culprit] += trace_ids
    blamed = set(ids["coder"]) | set(ids["planner"])
    service_filter = f'resource.service.name = "{service}"'
    try:
        found = wait_until(
            lambda: len(tempo.search(f"{{ span.blame.culprit = true && {service_filter} }}")) == len(blamed),
            timeout=90,
            what="every blamed trace searchable in Tempo",
            interval=1.0,
        )
        assert found
        wait_until(
            lambda: len(tempo.search(f"{{ {service_filter} }}")) == len(blamed) + len(ids["none"]),
            timeout=60,
            what="the successful trace in Tempo too",
            interval=1.0,
        )
    except TimeoutError as error:
        raise AssertionError(f"{error}{explain()}") from None

    # the issue's query finds exactly the runs blamed on coder, each with its culprit span
    coder = tempo.search(ISSUE_QUERY)
    assert {t["traceID"].rjust(32, "0") for t in coder} == set(ids["coder"]), explain()
    for found_trace in coder:
        (span_set,) = found_trace["spanSets"]
        assert span_set["matched"] == 1  # one culprit per trace

    # in Tempo the culprit span carries blame.* and the GenAI evaluation event
    trace_id = ids["coder"][0]
    spans = tempo.trace(trace_id)
    culprits = [s for s in spans if otlp_json_attributes(s.get("attributes", [])).get(sc.BLAME_CULPRIT)]
    assert len(culprits) == 1
    culprit_attrs = otlp_json_attributes(culprits[0]["attributes"])
    assert culprit_attrs[sc.BLAME_AGENT] == "coder" and culprit_attrs[sc.GEN_AI_AGENT_NAME] == "coder"
    (searched,) = [t for t in coder if t["traceID"].rjust(32, "0") == trace_id]
    assert span_id_hex(searched["spanSets"][0]["spans"][0]["spanID"]) == span_id_hex(culprits[0]["spanId"])
    events = {e["name"]: otlp_json_attributes(e.get("attributes", [])) for e in culprits[0].get("events", [])}
    evaluation = events[sc.GEN_AI_EVALUATION_RESULT_EVENT]
    assert evaluation[sc.GEN_AI_EVALUATION_NAME] == "failure_attribution"
    assert evaluation[sc.GEN_AI_EVALUATION_SCORE_LABEL] == "culprit"
    assert evaluation[sc.GEN_AI_EVALUATION_EXPLANATION] == culprit_attrs[sc.BLAME_REASON]
    assert sc.BLAME_ASSIGNED_EVENT in events
    # ... and its failure pattern: TraceQL finds the pattern's traces by blame.pattern
    pattern = culprit_attrs[sc.BLAME_PATTERN]
    same = tempo.search(f'{{ span.{sc.BLAME_PATTERN} = "{pattern}" && {service_filter} }}')
    found_ids = {t["traceID"].rjust(32, "0") for t in same}
    assert trace_id in found_ids and found_ids <= blamed
    for other in sorted(found_ids)[:3]:
        tagged = {
            otlp_json_attributes(s.get("attributes", [])).get(sc.BLAME_PATTERN) for s in tempo.trace(other)
        }
        assert pattern in tagged
    # ... and TraceQL can select on the event, as GenAI-aware queries do
    by_event = tempo.search(
        f'{{ {service_filter} && event:name = "{sc.GEN_AI_EVALUATION_RESULT_EVENT}" '
        f'&& event.{sc.GEN_AI_EVALUATION_NAME} = "failure_attribution" }}'
    )
    assert {t["traceID"].rjust(32, "0") for t in by_event} == blamed

    # the dashboard: its agent variable, its Prometheus panels, its Tempo panel
    variable, promql, traceql = dashboard_queries()
    assert promql and traceql
    metric, label = label_values_query(variable)
    assert metric == ATTRIBUTIONS_TOTAL
    try:
        wait_until(
            lambda: prometheus.query(f'{metric}{{service="{service}"}}'), timeout=30, what=f"{metric} scraped"
        )
        time.sleep(3.0)  # a few more scrapes, so rate() and increase() have two samples or more
    except TimeoutError as error:
        raise AssertionError(f"{error}{explain()}") from None
    values = prometheus._api(f"/api/v1/label/{label}/values", {"match[]": metric})
    assert {"coder", "planner"} <= set(values)

    answers = {title: prometheus.query(expr) for title, expr in promql}  # each must parse and run
    per_agent = {
        s["metric"]["agent"]: float(s["value"][1])
        for title, result in answers.items()
        if "Top culprit agents" in title
        for s in result
    }
    assert per_agent.get("coder", 0) > 0 and per_agent.get("planner", 0) > 0, answers
    blamed_rate = [title for title, result in answers.items() if "blamed, per agent" in title]
    assert blamed_rate and answers[blamed_rate[0]], answers
    outcomes = [r for title, result in answers.items() if "by outcome" in title for r in result]
    assert {r["metric"]["outcome"] for r in outcomes} >= {"failure"}, answers

    for title, query in traceql:
        for agent, expected in (
            ("coder", set(ids["coder"])),
            ("planner", set(ids["planner"])),
            (None, blamed),
        ):
            rendered = with_agent(query, variable, agent)
            assert "$" not in rendered
            traces = tempo.search(rendered)
            mine = {t["traceID"].rjust(32, "0") for t in traces if t.get("rootServiceName") == service}
            assert mine == expected, f"{title}: {rendered} found {mine}, expected {expected}"
