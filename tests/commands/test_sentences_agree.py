"""Every sentence a surface shows agrees with the run's outcome and the verdict's category (issue 26
item 5): runs that failed, succeeded or do not say, each with and without "blame a step anyway",
whose failure is the agent's own, a failing dependency's or the task's, attributed by the default
method through the CLI, the JSON API and the web page. Before: "outcome unknown: nothing blamed.
Blamed anyway, as asked", over a reason saying "the run's failure follows from it"."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.testclient import TestClient

from otel_blame import semconv as sc
from otel_blame.attribution.registry import DEFAULT_METHOD
from otel_blame.cli import main
from otel_blame.conventions.otlp import sdk_spans_to_proto
from otel_blame.otlp_json import traces_to_json
from otel_blame.store import StoreConfig, open_store
from otel_blame.ui.app import create_ui_app
from otel_blame.ui.security import CSRF_COOKIE
from tests.processor.spans import output_messages

OUTCOMES = ("failure", "success", "unknown")
CATEGORIES = ("agent", "dependency", "specification")
RUNS = {
    "agent": [
        ("Planner", "Plan: Researcher finds six times seven, Solver reports it."),
        ("Researcher", "Looked it up: six times seven is 41, according to my notes."),
        ("Solver", "The answer is 41."),
    ],
    "specification": [
        ("Planner", "Plan: Researcher finds the figure the task asks for, Solver reports it."),
        (
            "Researcher",
            "These instructions are contradictory: the task asks for a total and a ratio at once.",
        ),
        ("Solver", "The answer is 41."),
    ],
    "dependency": [
        ("Planner", "Plan: Researcher searches the 2020 census figure for Lyon, Writer reports it."),
        ("Researcher", "The search failed: HTTP 503 from search.example.com. No figure found."),
        ("Writer", "The population of Lyon in 2020 was about 500000."),
    ],
}


def _spans(category: str, outcome: str) -> list:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: "agents-under-test"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span(sc.workflow_span_name("solve")) as root:
        root.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_WORKFLOW)
        root.set_attribute(sc.TASK_NAME, "solve")
        root.set_attribute(sc.TASK_INPUT, "What is six times seven?")
        root.set_attribute(sc.TASK_EXPECTED_OUTPUT, "42")
        for agent, text in RUNS[category]:
            with tracer.start_as_current_span(sc.agent_span_name(agent)) as span:
                span.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_AGENT)
                span.set_attribute(sc.GEN_AI_AGENT_NAME, agent)
                if category == "dependency" and agent == "Researcher":
                    with tracer.start_as_current_span(sc.tool_span_name("web_search")) as tool:
                        tool.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_EXECUTE_TOOL)
                        tool.set_attribute(sc.GEN_AI_TOOL_NAME, "web_search")
                        with tracer.start_as_current_span("GET", kind=SpanKind.CLIENT) as call:
                            call.set_attribute(sc.SERVER_ADDRESS, "search.example.com")
                            call.set_attribute(sc.HTTP_RESPONSE_STATUS_CODE, 503)
                            call.set_status(Status(StatusCode.ERROR))
                        tool.set_attribute(sc.GEN_AI_TOOL_CALL_RESULT, "Error: HTTP 503 Service Unavailable")
                        tool.set_status(Status(StatusCode.ERROR, "HTTP 503"))
                span.set_attribute(sc.GEN_AI_OUTPUT_MESSAGES, output_messages(text))
        if outcome != "unknown":
            root.set_attribute(sc.TASK_OUTCOME, outcome)
        if outcome == "failure":
            root.set_status(Status(StatusCode.ERROR, "wrong answer"))
    return list(memory.get_finished_spans())


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    folder = tmp_path_factory.mktemp("runs")
    out = {}
    for category in CATEGORIES:
        for outcome in OUTCOMES:
            file = folder / f"{category}-{outcome}.json"
            file.write_text(traces_to_json(sdk_spans_to_proto(_spans(category, outcome))))
            out[(category, outcome)] = file
    return out


def _flat(text: str) -> str:
    return " ".join(text.split())


def _agrees(said: str, *, outcome: str, anyway: bool, category: str) -> None:
    """What every surface says, checked against the outcome and the category."""
    blamed = outcome == "failure" or anyway
    if not blamed:
        assert not re.search(r"culprit|undecided|blamed anyway|dependency|specification", said, re.I), said
        assert ("succeeded" in said) is (outcome == "success"), said
        assert ("outcome unknown" in said) is (outcome == "unknown"), said
        return
    # blamed: nothing says that nothing was
    assert not re.search(r"nothing (?:to )?blame", said, re.I), said
    if outcome == "failure":
        assert "succeeded" not in said and "blamed anyway" not in said and "outcome unknown" not in said, said
    else:  # blamed as asked: no sentence states a failure the run never reported
        assert "blamed anyway, as if it had failed, as asked" in said, said
        assert not re.search(r"the run failed|the run's failure|failure follows|wrong answer", said, re.I), (
            said
        )
        assert ("succeeded" in said) is (outcome == "success"), said
    own_output = "not the agent's own output" in said
    assert own_output is (category == "dependency"), said
    assert ("specification problem" in said) is (category == "specification"), said
    if category == "dependency":
        assert "web_search failed" in said, said


CASES = [
    (category, outcome, anyway)
    for category in CATEGORIES
    for outcome in OUTCOMES
    for anyway in (False, True)
    if not (outcome == "failure" and anyway)  # blaming a failed run anyway is blaming it
]


@pytest.mark.parametrize(("category", "outcome", "anyway"), CASES)
def test_the_cli_s_sentences_agree(files, category: str, outcome: str, anyway: bool) -> None:  # noqa: ANN001
    args = ["attribute", str(files[(category, outcome)]), *(["--assume-failed"] if anyway else [])]
    table = CliRunner().invoke(main, args, env={"COLUMNS": "100"})
    assert table.exit_code == 0, table.output
    answer = json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)
    if answer["blamed"]:
        assert answer["category"] == category, answer["reason"]  # the runs are what they are meant to be
    lines = table.output.splitlines()
    verdict = lines[
        1 : next(i for i, line in enumerate(lines) if line.strip() == "steps")
    ]  # not file: nor steps
    _agrees(_flat("\n".join(verdict)), outcome=outcome, anyway=anyway, category=category)


@pytest.mark.parametrize(("category", "outcome", "anyway"), CASES)
def test_the_web_page_s_sentences_agree(
    files, category: str, outcome: str, anyway: bool, tmp_path: Path
) -> None:  # noqa: ANN001
    store = open_store(StoreConfig(path=tmp_path / "store.sqlite3"))
    try:
        client = TestClient(create_ui_app(store), follow_redirects=False)
        client.get("/ui/attribute")
        form = {
            "text": files[(category, outcome)].read_text(),
            "method": DEFAULT_METHOD,
            "csrf_token": client.cookies.get(CSRF_COOKIE),
            **({"assume_failed": "on"} if anyway else {}),
        }
        page = client.post("/ui/attribute", data=form)
        if page.status_code == 303:
            page = client.get(page.headers["location"])
        assert page.status_code == 200
        main_part = page.text[page.text.index("<main") : page.text.index('aria-label="task"')]
        said = _flat(html.unescape(re.sub(r"<[^>]+>", " ", main_part)))
        _agrees(said, outcome=outcome, anyway=anyway, category=category)
    finally:
        store.close()
