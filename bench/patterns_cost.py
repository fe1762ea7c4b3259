"""What failure patterns cost: per failed trace in the processor, and `otel-blame patterns` on a big store.

1. Per failed trace, the work patterns add to a blame, on real traces (the demo's failed AG2 runs
   through the processor's own conversion): in the analysis, describing the cause and its candidate
   pattern (:func:`otel_blame.patterns.cause_of`) as ``conclude`` does, measured as ``conclude`` with
   patterns on against the same ``conclude`` with them off; in the processor's own process, the
   pattern book's answer (the local SQLite book, and the blame store's book on SQLite) and putting an
   older pattern's id in place of the candidate's (``with_pattern``). Causes vary as in production:
   reasons written several ways, new ones now and then.
2. ``otel-blame patterns STORE`` (a subprocess, as a user runs it) over a blame store of 10,000
   failures with their patterns, and ``--format json``; the baseline is ``otel-blame --version``
   in the same run (the command's start-up).

Usage: python bench/patterns_cost.py [--traces 200] [--stored 10000]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_blame.attribution.registry import create_method
from otel_blame.attribution.result import Attribution
from otel_blame.conventions import build_trajectory
from otel_blame.patterns import Known, PatternDefinition, cause_of
from otel_blame.processor.analysis import Concluding, conclude
from otel_blame.processor.config import CrossRunConfig, PatternsConfig
from otel_blame.processor.enricher import BlameEnricher
from otel_blame.processor.patterns import LocalPatternBook, with_pattern
from otel_blame.redaction import Redactor

REASONS = (
    "Step {s} by {a}: it overrode what it was given; a value first appears here.",
    "Step {s} by {a}: a value first appears here; it overrode what it was given.",
    "Step {s} by {a}: a later step says it went wrong.",
    "Step {s} by {a}: it stopped the run before any answer, with work still to do.",
    "Step {s} by {a}: it did not use a value it was given; the final answer's value first appears here.",
)


def demo_traces(count: int) -> list[ExportTraceServiceRequest]:
    """Failed runs of the demo's AG2 group chat, recorded through the real instrumentation."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_blame.conventions.otlp import sdk_spans_to_proto
    from otel_blame.demo.scenario import TASKS, run_tasks

    requests = []
    with tempfile.TemporaryDirectory() as work:
        while len(requests) < count:
            memory = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(memory))
            results = run_tasks(provider, TASKS, work_dir=Path(work))
            spans = memory.get_finished_spans()
            for result in results:
                if result.failed:
                    mine = [s for s in spans if s.context.trace_id == int(result.trace_id, 16)]
                    requests.append(ExportTraceServiceRequest(resource_spans=sdk_spans_to_proto(mine)))
            provider.shutdown()
    return requests[:count]


def verdict(trajectory, number: int) -> Attribution:  # noqa: ANN001
    """The offline default's verdict, decided, with a reason drawn from the variants above."""
    found = create_method("heuristic").attribute(trajectory)
    reason = REASONS[number % len(REASONS)].format(s=found.step, a=found.agent)
    if number % 37 == 0:
        reason += f" Case {number}: a cause of its own."  # a new pattern now and then
    return found.model_copy(update={"decided": True, "reason": reason})


def per_trace(traces: list[ExportTraceServiceRequest]) -> dict[str, float]:
    """Milliseconds per failed trace: conclude without and with patterns, the books, with_pattern."""
    timings: dict[str, list[float]] = {"conclude": [], "conclude_patterns": [], "local_book": []}
    timings.update(store_book=[], with_pattern=[])
    prepared = []
    for number, request in enumerate(traces):
        trajectory = build_trajectory(list(request.resource_spans)).trajectory
        prepared.append((request.SerializeToString(), trajectory, verdict(trajectory, number)))
    off = Concluding(BlameEnricher(), Redactor(), CrossRunConfig(), patterns=False)
    on = Concluding(BlameEnricher(), Redactor(), CrossRunConfig(), patterns=True)
    with tempfile.TemporaryDirectory() as folder:
        local = LocalPatternBook(PatternsConfig(), Path(folder) / "patterns.sqlite")
        from otel_blame.store import StoreConfig, open_store
        from otel_blame.store.patterns import StorePatternBook

        store = open_store(StoreConfig(path=Path(folder) / "store.sqlite3"))
        shared = StorePatternBook(store.engine, similarity=90, max_per_signature=100)
        for _round in range(3):
            for payload, trajectory, attribution in prepared:
                for name, concluding in (("conclude", off), ("conclude_patterns", on)):
                    request = ExportTraceServiceRequest.FromString(payload)
                    started = time.perf_counter()
                    blamed = conclude(
                        trajectory, attribution, None, concluding, late=False, request=request, resource=None,
                        service="bench",
                    )  # fmt: skip
                    timings[name].append(time.perf_counter() - started)
                assert blamed.cause is not None
                for name, book in (("local_book", local), ("store_book", shared)):
                    started = time.perf_counter()
                    book.assign(blamed.cause, time.time())
                    timings[name].append(time.perf_counter() - started)
                older = Known("p" + "0" * 12, "older", 1.0)
                started = time.perf_counter()
                with_pattern(blamed, older)
                timings["with_pattern"].append(time.perf_counter() - started)
        local.close()
        store.close()
    return {name: 1000 * statistics.median(values) for name, values in timings.items()}


def big_store(path: Path, count: int) -> None:
    """A blame store of ``count`` failures with their patterns (three workflows, varied causes)."""
    from otel_blame.store import StoreConfig, open_store
    from otel_blame.store.patterns import StorePatternBook
    from otel_blame.store.records import build_run
    from otel_blame.trajectory import Outcome, Trajectory

    store = open_store(StoreConfig(path=path, prune_every=1_000_000))
    book = StorePatternBook(store.engine, similarity=90, max_per_signature=100)
    agents = ["planner", "coder", "executor", "reviewer"]
    trajectory = Trajectory.from_steps(
        [{"agent": agent, "content": f"{agent} says something"} for agent in agents], outcome=Outcome.FAILURE
    )
    now = time.time()
    batch = []
    for number in range(count):
        agent = agents[number % 4]
        attribution = Attribution(
            agent=agent, step=number % 4, confidence=0.7, decided=number % 5 != 0, method="ranker",
            reason=REASONS[number % len(REASONS)].format(s=number % 4, a=agent), category="agent",
        )  # fmt: skip
        workflow = ("refund", "search", "report")[number % 3]
        cause = cause_of("bench", workflow, trajectory, attribution)
        at = now - 6 * 86400 * (1 - number / count)
        known = book.assign(cause, at)
        batch.append(
            build_run(
                trajectory,
                attribution,
                trace_id=f"{number:032x}",
                service="bench",
                attributed_at=at,
                redacted=True,
                pattern=PatternDefinition.of(known, cause),
            )  # fmt: skip
        )
        if len(batch) == 500:
            store.add_many(batch)
            batch = []
    store.add_many(batch)
    store.close()


def timed(command: list[str], repeats: int = 3) -> float:
    """Median wall seconds of a command (its output discarded)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=120)
    parser.add_argument("--stored", type=int, default=10_000)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · {platform.machine()} · "
          f"{os.cpu_count()} CPUs · load {load:.1f} · python {platform.python_version()}")  # fmt: skip
    costs = per_trace(demo_traces(args.traces))
    added = costs["conclude_patterns"] - costs["conclude"]
    print("\nper failed trace (median ms)")
    for name, value in costs.items():
        print(f"  {name:18} {value:8.3f}")
    ratio = costs["conclude_patterns"] / costs["conclude"]
    print(f"  patterns add in the analysis: {added:.3f} ms ({ratio:.2f}x conclude); in the processor's "
          f"process: book {costs['local_book']:.3f} ms (store's book {costs['store_book']:.3f} ms) + "
          f"with_pattern {costs['with_pattern']:.3f} ms")  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "blame-store.sqlite3"
        started = time.perf_counter()
        big_store(path, args.stored)
        print(f"\nstore of {args.stored} failures written in {time.perf_counter() - started:.1f} s")
        cli = [sys.executable, "-m", "otel_blame.cli"]
        baseline = timed([*cli, "--version"])
        table = timed([*cli, "patterns", str(path)])
        as_json = timed([*cli, "patterns", str(path), "--format", "json"])
        print(f"otel-blame patterns STORE: {table:.2f} s (JSON {as_json:.2f} s); `otel-blame --version` "
              f"{baseline:.2f} s: {table / baseline:.1f}x the start-up")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
