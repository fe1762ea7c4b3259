"""`otel-blame demo`: the whole path offline, in one process, with no API key.

This package is the demo and its support, kept apart from the product modules: the scenario
(:mod:`.scenario`, an AG2 group chat with planted faults), its offline LLM
(:mod:`.scripted_llm`, a scripted OpenAI-compatible server) and its span recorder
(:mod:`.span_recorder`, a recording OTLP/gRPC server standing in for a backend). The test suite
uses the last two as its test doubles, through ``tests.support``.

An instrumented AG2 group chat (otel_blame.demo.scenario) runs three tasks against a scripted LLM;
its spans go over OTLP/gRPC to the blame processor running in-process; the processor attributes
the failed runs and exports the enriched traces either to Jaeger (``--jaeger`` or Jaeger found on
localhost:16686) or to a local recorder, from which they are written as OTLP JSON. Then one table
per failed trace shows what the processor wrote on it.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_blame import semconv as sc
from otel_blame.demo.scenario import DemoTask, SpanCounter, TaskRunResult, run_tasks
from otel_blame.demo.span_recorder import RecordedSpan
from otel_blame.otlp_json import traces_to_json

DEFAULT_JAEGER_URL = "http://localhost:16686"
SERVICE_NAME = "otel-blame-demo"
QUIET_PERIOD_SECONDS = 0.5
BLAME_FIELDS = (sc.BLAME_AGENT, sc.BLAME_STEP, sc.BLAME_REASON, sc.BLAME_CONFIDENCE, sc.BLAME_METHOD)


class DemoError(click.ClickException):
    """A demo step failed; the message says which and why."""


@dataclass(frozen=True)
class Blame:
    """What the processor wrote on one failed trace, read back from where it was exported."""

    trace_id: str
    task: str
    agent: str
    step: int | None
    reason: str
    confidence: float | None
    method: str
    culprit_span: str | None
    decided: bool = True  # blame.decided (files written before it existed: decided)


# --- Jaeger -------------------------------------------------------------------------------------


def _get_json(url: str, timeout: float) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - user-given Jaeger URL
        return json.loads(response.read())


def jaeger_answers(url: str, timeout: float = 1.0) -> bool:
    try:
        _get_json(f"{url.rstrip('/')}/api/services", timeout)
    except (OSError, ValueError):
        return False
    return True


def default_jaeger_otlp(url: str) -> str:
    host = urllib.parse.urlsplit(url).hostname or "localhost"
    return f"{host}:4317"


def _jaeger_tags(span: Mapping[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span.get("tags", [])}


def blame_from_jaeger(url: str, trace_id: str, task: DemoTask, timeout: float) -> Blame | None:
    """Poll Jaeger's HTTP API until the trace's root span carries blame.agent (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            data = _get_json(f"{url.rstrip('/')}/api/traces/{trace_id}", timeout=5.0).get("data") or []
        except (OSError, ValueError):
            data = []
        spans = data[0]["spans"] if data else []
        root = next((s for s in spans if not s.get("references")), None)
        if root is not None and sc.BLAME_AGENT in _jaeger_tags(root):
            culprit = next((s for s in spans if _jaeger_tags(s).get(sc.BLAME_CULPRIT) is True), None)
            return _blame(trace_id, task, _jaeger_tags(root), culprit["spanID"] if culprit else None)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.3)


# --- the local recorder -------------------------------------------------------------------------


def _attributes(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attribute in span.attributes:
        value = attribute.value
        kind = value.WhichOneof("value")
        out[attribute.key] = getattr(value, kind) if kind else None
    return out


def blame_from_recorded(spans: Iterable[RecordedSpan], trace_id: str, task: DemoTask) -> Blame | None:
    root = culprit = None
    for recorded in spans:
        if recorded.trace_id != trace_id:
            continue
        attributes = _attributes(recorded.span)
        if not recorded.span.parent_span_id and sc.BLAME_AGENT in attributes:
            root = attributes
        if attributes.get(sc.BLAME_CULPRIT) is True:
            culprit = recorded.span_id
    return _blame(trace_id, task, root, culprit) if root is not None else None


def _blame(trace_id: str, task: DemoTask, root: Mapping[str, Any], culprit_span: str | None) -> Blame:
    step = root.get(sc.BLAME_STEP)
    confidence = root.get(sc.BLAME_CONFIDENCE)
    return Blame(
        trace_id=trace_id,
        task=task.name,
        agent=str(root.get(sc.BLAME_AGENT)),
        step=int(step) if step is not None else None,
        reason=str(root.get(sc.BLAME_REASON, "")),
        confidence=float(confidence) if confidence is not None else None,
        method=str(root.get(sc.BLAME_METHOD, "")),
        culprit_span=culprit_span,
        decided=root.get(sc.BLAME_DECIDED) is not False,
    )


TRACE_FILE = re.compile(r"^[0-9a-f]{32}\.otlp\.json$")


def remove_earlier_traces(out_dir: Path) -> int:
    """Delete the trace files an earlier demo wrote in ``out_dir`` (``<32 hex>.otlp.json`` only), so it
    holds this run's traces alone; how many were deleted."""
    removed = 0
    if out_dir.is_dir():
        for path in out_dir.iterdir():
            if TRACE_FILE.match(path.name) and path.is_file():
                path.unlink()
                removed += 1
    return removed


def write_otlp_json(
    spans: Iterable[RecordedSpan], trace_ids: Iterable[str], out_dir: Path
) -> dict[str, Path]:
    """One OTLP/JSON file per trace (ExportTraceServiceRequest, hex ids), as the processor exported it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = set(trace_ids)
    grouped: dict[str, dict[bytes, tuple[Any, list[Any]]]] = defaultdict(dict)
    for recorded in spans:
        if recorded.trace_id in wanted:
            key = recorded.resource.SerializeToString(deterministic=True)
            grouped[recorded.trace_id].setdefault(key, (recorded.resource, []))[1].append(recorded.span)
    paths = {}
    for trace_id, by_resource in grouped.items():
        resource_spans = [
            ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=span_list)])
            for resource, span_list in by_resource.values()
        ]
        path = out_dir / f"{trace_id}.otlp.json"
        path.write_text(traces_to_json(resource_spans, indent=2) + "\n", encoding="utf-8")
        paths[trace_id] = path
    return paths


# --- output -------------------------------------------------------------------------------------


def format_blame_table(blame: Blame, task: DemoTask, columns: int = 80) -> str:
    """A two-column table for one failed trace, at most ``columns`` wide (values wrap inside it)."""
    confidence = f"{blame.confidence:.2f}" if blame.confidence is not None else "-"
    step = "-" if blame.step is None else str(blame.step)
    who = (
        [("blamed agent", blame.agent), ("step", step)]
        if blame.decided
        else [("verdict", f"undecided; the likeliest: {blame.agent} at step {step}")]
    )
    rows = [
        ("trace id", blame.trace_id),
        ("task", f"{task.name}: {task.question}"),
        *who,
        ("reason", blame.reason),
        ("confidence", confidence),
        ("method", blame.method),
    ]
    if task.fault_agent is not None:
        rows.append(("planted fault", f"{task.fault_agent} at step {task.fault_step}: {task.fault}"))
    width = max(len(label) for label, _ in rows)
    value_width = max(20, columns - width - 7)  # "| " label " | " value " |"
    lines = []
    border = f"+-{'-' * width}-+-{'-' * value_width}-+"
    lines.append(border)
    for label, value in rows:
        chunks = _wrap(value, value_width)
        for index, chunk in enumerate(chunks):
            lines.append(f"| {(label if index == 0 else ''):<{width}} | {chunk:<{value_width}} |")
    lines.append(border)
    return "\n".join(lines)


def _wrap(text: str, width: int) -> list[str]:
    words, lines, current = text.split(), [], ""
    for word in words:
        while len(word) > width:
            if current:
                lines.append(current)
                current = ""
            lines.append(word[:width])
            word = word[width:]
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    lines.append(current)
    return lines


# --- the app --------------------------------------------------------------------------------------


def run_app(
    endpoint: str, tasks: tuple[DemoTask, ...], on_task: Callable[[DemoTask, TaskRunResult], None]
) -> tuple[list[TaskRunResult], int]:
    """Run the demo's tasks, exporting their spans over OTLP/gRPC to ``endpoint``; the results and
    how many spans were sent. AG2's own printing of every message is swallowed."""
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    counter = SpanCounter()
    provider.add_span_processor(counter)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True)))
    logging.getLogger("autogen.oai.client").setLevel(logging.ERROR)
    chat_output = io.StringIO()
    try:
        with contextlib.redirect_stdout(chat_output):
            results = run_tasks(provider, tasks, on_task=on_task)
    finally:
        provider.shutdown()
    return results, sum(len(ids) for ids in counter.spans.values())
