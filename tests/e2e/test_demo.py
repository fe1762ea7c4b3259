"""`otel-blame demo`: offline run through the in-process processor, tables and OTLP JSON output."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from otel_blame import semconv as sc
from otel_blame.cli import main
from otel_blame.demo import Blame, format_blame_table
from otel_blame.demo.scenario import TASKS, DemoTask, final_answer
from otel_blame.otlp_json import parse_otlp_json
from otel_blame.store import StoreConfig, open_store
from tests.ports import reserve_port
from tests.store.runs import WHO_AND_WHEN, attributed_runs
from tests.ui.browser import chromium, screenshot

from .harness import JAEGER_BIN, Jaeger, ProcessGroup, iter_spans, jaeger_tags, missing_binary_reason

FAILING = [task for task in TASKS if task.fault_agent is not None]
BY_NAME = {task.name: task for task in TASKS}


def attributes(span) -> dict:
    return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes}


@pytest.mark.slow
def test_demo_offline_prints_a_table_per_failed_trace_and_writes_otlp_json(tmp_path: Path):
    out_dir = tmp_path / "demo"
    # what an earlier demo and a user left there: a store holding an upload, a trace file, a note
    out_dir.mkdir()
    earlier = open_store(StoreConfig(path=out_dir / "blame-store.sqlite3"))
    [upload] = attributed_runs(1, start=time.time() - 60, spacing=1)
    earlier.add(upload.model_copy(update={"source": "upload: mine.json"}))
    earlier.close()
    stale = out_dir / f"{'0' * 32}.otlp.json"
    stale.write_text("{}")
    (out_dir / "notes.txt").write_text("mine")
    result = CliRunner().invoke(
        main, ["demo", "--no-jaeger", "--out", str(out_dir), "--timeout", "60"], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    output = result.output
    said = " ".join(output.split())
    assert "keeps what it holds (1 failures, 1 of them uploaded in the web UI); this run adds to it" in said
    assert "removed 1 trace files an earlier demo wrote" in said
    assert not stale.exists() and (out_dir / "notes.txt").read_text() == "mine"
    # every line fits 80 columns but a path or the command to paste, each on a line of its own
    long = [line for line in output.splitlines() if len(line) > 80]
    assert all(str(out_dir) in line and len(line.split()) <= 4 for line in long), long

    tables = re.findall(r"\| trace id +\| ([0-9a-f]{32})", output)
    assert len(tables) == len(FAILING)
    for task in FAILING:
        assert f"{task.name}: " in output
    for label in ("reason", "confidence"):
        assert output.count(f"| {label} ") == len(FAILING)
    # each table names the planted agent and step as the culprit, decided: each planted fault states
    # what checks false (a tax rate the task gives set otherwise, a wrong unit conversion)
    for task in FAILING:
        table = output[output.index(f"{task.name}: ") :]
        assert named_the_fault(table, task), table[:1200]

    files = sorted(out_dir.glob("*.otlp.json"))
    assert len(files) == len(TASKS)  # every trace, failed or not, as the processor exported it
    blamed_tasks = []
    for path in files:  # a run without a planted fault carries no blame at all
        resource_spans, _ = parse_otlp_json(path.read_text())
        spans = [span for rs in resource_spans for ss in rs.scope_spans for span in ss.spans]
        root_attrs = attributes(next(span for span in spans if not span.parent_span_id))
        task = BY_NAME[root_attrs[sc.TASK_NAME]]
        blamed = [span for span in spans if any(key.startswith("blame.") for key in attributes(span))]
        if task.fault_agent is None:
            assert not blamed, f"{task.name} succeeded but carries blame"
        else:
            blamed_tasks.append(task.name)
    assert sorted(blamed_tasks) == sorted(task.name for task in FAILING)
    for trace_id in tables:
        path = out_dir / f"{trace_id}.otlp.json"
        assert str(path) in output
        resource_spans, _ = parse_otlp_json(path.read_text())
        spans = [span for rs in resource_spans for ss in rs.scope_spans for span in ss.spans]
        steps = sorted(
            (attributes(span)[sc.STEP_INDEX], attributes(span)[sc.GEN_AI_AGENT_NAME])
            for span in spans
            if sc.STEP_INDEX in attributes(span)
        )
        assert [agent for _, agent in steps] == ["user", "planner", "coder", "executor", "reviewer"]
        root = next(span for span in spans if not span.parent_span_id)
        culprits = [span for span in spans if attributes(span).get(sc.BLAME_CULPRIT) is True]
        assert len(culprits) == 1
        root_attrs, culprit_attrs = attributes(root), attributes(culprits[0])
        for key in (sc.BLAME_AGENT, sc.BLAME_STEP, sc.BLAME_REASON):
            assert culprit_attrs[key] == root_attrs[key]
        assert 0.0 <= root_attrs[sc.BLAME_CONFIDENCE] <= 1.0
        assert root_attrs[sc.BLAME_DECIDED] is True, root_attrs[sc.TASK_NAME]
        assert root_attrs[sc.BLAME_METHOD]
        assert culprit_attrs[sc.GEN_AI_AGENT_NAME] == root_attrs[sc.BLAME_AGENT]
        # the verdict is the planted fault: that agent, that step, marked on that agent's span
        task = BY_NAME[root_attrs[sc.TASK_NAME]]
        planted = (task.fault_agent, task.fault_step)
        assert (root_attrs[sc.BLAME_AGENT], root_attrs[sc.BLAME_STEP]) == planted, task.name
        assert (culprit_attrs[sc.GEN_AI_AGENT_NAME], culprit_attrs[sc.STEP_INDEX]) == planted, task.name
        # the table shows what is on the trace
        table = output[output.index(trace_id) :]
        assert named_the_fault(table, task), table[:1200]
    # the failures are in the demo's blame store, and the one command that opens them is printed
    store_path = out_dir / "blame-store.sqlite3"
    assert f"otel-blame ui --store {store_path}" in output
    store = open_store(StoreConfig(path=store_path))
    try:
        stored = {f.trace_id: (f.agent, f.step) for f in store.failures().failures}
    finally:
        store.close()
    assert set(stored) == {*tables, upload.trace_id}  # this run's failures, and the upload kept
    planted = {(t.fault_agent, t.fault_step) for t in FAILING}
    assert {stored[trace_id] for trace_id in tables} == planted  # the store keeps what the trace says


def _newcomer_s_path_in_a_browser(site: str, first: str) -> None:
    """docs/quickstart.md's pictures: the demo's failures, the first one's page, then a file of
    one's own uploaded (a Who&When log), in headless Chromium (OTEL_BLAME_UI_SCREENSHOTS=1 keeps
    them in docs/images)."""
    with chromium(width=1280, height=900) as browser:
        browser.get(f"{site}/ui/")
        assert len(browser.find_elements("css selector", "table.failures tbody tr")) == len(FAILING)
        screenshot(browser, "quickstart-failures.png")
        browser.get(f"{site}/ui/runs/{first}")
        named = browser.find_elements("id", "culprit-agent")  # decided: the culprit, not candidates
        assert named and named[0].text in {t.fault_agent for t in FAILING}
        screenshot(browser, "quickstart-run.png")
        browser.get(f"{site}/ui/attribute")
        browser.find_element("id", "file").send_keys(str(WHO_AND_WHEN / "Hand-Crafted" / "1.json"))
        page = browser.find_element("tag name", "html")
        browser.find_element("id", "attribute-submit").click()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not browser.find_elements("id", "verdict"):
            time.sleep(0.1)
        assert page.id != browser.find_element("tag name", "html").id
        assert browser.find_element("id", "verdict").is_displayed()
        screenshot(browser, "quickstart-upload.png")


@pytest.mark.slow
def test_demo_ui_serves_the_demo_s_failures(tmp_path: Path):
    port = reserve_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_blame.cli", "demo", "--no-jaeger", "--out", str(tmp_path), "--ui",
         "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        answer = None
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/failures", timeout=2) as response:
                    answer = json.loads(response.read())
                    break
            except OSError:
                time.sleep(0.5)
        assert answer is not None, "the demo's web UI never answered"
        assert answer["total"] == len(FAILING)
        first = answer["failures"][-1]["trace_id"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ui/runs/{first}", timeout=5) as response:
            page = response.read().decode()
            assert 'id="culprit-agent"' in page and 'id="undecided"' not in page  # the demo's are decided
        _newcomer_s_path_in_a_browser(f"http://127.0.0.1:{port}", first)
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0]
    assert f"http://127.0.0.1:{port}/ui/runs/" in output


def named_the_fault(table: str, task: DemoTask) -> bool:
    """The demo's table names the planted agent and step as the blamed agent, decided (an undecided
    verdict's table says "undecided; the likeliest: …" instead)."""
    decided = re.search(rf"\| blamed agent +\| {re.escape(task.fault_agent)} ", table) and re.search(
        rf"\| step +\| {task.fault_step} ", table
    )
    return bool(decided)


def test_blame_table_wraps_long_values_and_shows_the_planted_fault():
    task = FAILING[0]
    blame = Blame("ab" * 16, task.name, "coder", 2, "word " * 40, 0.5, "heuristic", "cd" * 8)
    table = format_blame_table(blame, task)
    lines = table.splitlines()
    assert len({len(line) for line in lines}) == 1, "every row has the same width"
    assert "| blamed agent  | coder" in table
    assert f"{task.fault_agent} at step {task.fault_step}" in table
    assert sum(1 for line in lines if line.startswith("|               | word")) >= 1


def test_final_answer_is_read_from_the_last_reviewer_message():
    history = [
        {"content": "Final answer: 1 TERMINATE"},
        {"content": "code"},
        {"content": "All good. Final answer: $81.38 TERMINATE"},
    ]
    assert final_answer(history) == "$81.38"
    assert final_answer([{"content": "no answer here"}, {"content": None}]) is None


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.skipif(
    missing_binary_reason(JAEGER_BIN) is not None, reason=str(missing_binary_reason(JAEGER_BIN))
)
def test_demo_with_jaeger_prints_links_to_blamed_traces(tmp_path: Path):
    group = ProcessGroup(tmp_path / "logs")
    try:
        jaeger = Jaeger(group)
        args = [
            "demo",
            "--jaeger",
            jaeger.base_url,
            "--jaeger-otlp",
            jaeger.otlp_grpc_endpoint,
            "--timeout",
            "60",
        ]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output + repr(result.exception) + group.logs()
        links = re.findall(rf"{re.escape(jaeger.base_url)}/trace/([0-9a-f]{{32}})", result.output)
        assert len(links) == len(FAILING)
        for trace_id in links:
            trace = jaeger.trace(trace_id)
            assert trace is not None
            culprits = [s for s in iter_spans(trace) if jaeger_tags(s).get(sc.BLAME_CULPRIT) is True]
            assert len(culprits) == 1
            tags = jaeger_tags(culprits[0])
            root = next(s for s in iter_spans(trace) if not s.get("references"))
            task = BY_NAME[jaeger_tags(root)[sc.TASK_NAME]]
            # in Jaeger: the planted agent and step, on that agent's span
            assert (tags[sc.BLAME_AGENT], tags[sc.BLAME_STEP]) == (task.fault_agent, task.fault_step)
            assert (tags[sc.GEN_AI_AGENT_NAME], tags[sc.STEP_INDEX]) == (task.fault_agent, task.fault_step)
            table = result.output[result.output.index(f"| trace id      | {trace_id}") :]
            assert named_the_fault(table, task), table[:1200]
        assert "OTLP JSON" not in result.output  # Jaeger mode writes no files
    finally:
        group.close()


def test_demo_without_autogen_says_what_to_install(monkeypatch: pytest.MonkeyPatch):
    import otel_blame.commands.demo as demo_module

    real_find_spec = demo_module.importlib.util.find_spec
    monkeypatch.setattr(
        demo_module.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "autogen" else real_find_spec(name, *a),
    )
    result = CliRunner().invoke(main, ["demo", "--no-jaeger"])
    assert result.exit_code != 0
    assert "pip install 'otel-blame[autogen]'" in result.output
