"""CPU time of each analysis stage per failed trace, on the throughput benchmark's traces.

``bench/processor_throughput.py`` shows that ``serve`` accepts spans faster than it can analyse
its failed traces (20 % of the load there). This says where an analysis goes, stage by stage,
in one thread, in the order the processor runs them: parse the trace's payloads, build the
Trajectory (conventions), attribute (the default heuristic) -- these three in an analysis worker
process --, write ``blame.*`` and re-serialise (enrich+export stage), redact the trajectory for the
listeners, and the listener ``serve`` installs by default (the blame store, SQLite next to the
WAL) -- these on the listener thread. The store is written as the listener thread writes it: the
blames that queued up in one transaction; ``--store-batch`` says how many (1: one transaction a
blame, as before batching).

``--scaling`` measures the analysis workers instead: the same failed traces through the
processor's worker function (:func:`otel_blame.processor.analysis.run_job`) on a pool of 1 and
then 2 worker processes (at the same priority as this process: the processor lowers its workers'
priority, which on a shared machine would measure the neighbours), wall-clock traces/s of each
and their ratio. Usage::

    .venv/bin/python bench/analysis_cost.py --traces 600 --store-batch 64
    .venv/bin/python bench/analysis_cost.py --traces 3000 --scaling
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_blame.attribution.registry import create_method
from otel_blame.conventions import build_trajectory
from otel_blame.processor import analysis
from otel_blame.processor.analysis import AnalysisJob, as_failed
from otel_blame.processor.config import AttributionConfig, DetectionConfig
from otel_blame.processor.decision import FailureDetector, TraceDecision
from otel_blame.processor.enricher import BlameEnricher
from otel_blame.processor.listeners import FinishedAttribution
from otel_blame.processor.wire import split_traces
from otel_blame.redaction import Redactor, redact_trajectory
from otel_blame.store.blame_store import CountAs, open_store
from otel_blame.store.config import StoreConfig
from otel_blame.store.outbox import BlameOutbox, DurableBlameWriter
from otel_blame.ui.processor_integration import StoreWriter

sys.path.insert(0, str(Path(__file__).parent))
from processor_throughput import RequestFactory  # noqa: E402

STAGES = ("parse", "trajectory", "heuristic", "enrich + serialise", "redact", "blame store")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=600, help="failed traces to analyse")
    parser.add_argument("--scaling", action="store_true", help="worker processes: 1 against 2")
    parser.add_argument("--store-batch", type=int, default=64, help="blames per store transaction")
    args = parser.parse_args()
    detector = FailureDetector(DetectionConfig())
    factory = RequestFactory(50)
    failed = []
    while len(failed) < args.traces:  # one in five traces of the benchmark's load is failed
        failed += [g for g in split_traces(factory.build()[0], detector.failure_reason) if g.root_failure]
    failed = failed[: args.traces]
    if args.scaling:
        scaling(failed)
        return
    method, enricher, redactor = create_method("heuristic"), BlameEnricher(), Redactor()
    wal_dir = Path(tempfile.mkdtemp(prefix="otel-blame-analysis-"))
    store = open_store(StoreConfig(), wal_dir=wal_dir)
    durable = DurableBlameWriter(
        store, BlameOutbox(wal_dir / "outbox.sqlite", 1 << 30), CountAs("bench", 1000)
    )
    writer = StoreWriter(durable)
    spent = dict.fromkeys(STAGES, 0.0)
    finished: list[FinishedAttribution] = []
    for group in failed:
        clock = time.thread_time()

        def lap(stage: str) -> None:
            nonlocal clock
            now = time.thread_time()
            spent[stage] += now - clock
            clock = now

        request = ExportTraceServiceRequest.FromString(group.payload)
        lap("parse")
        decision = TraceDecision(True, group.root_failure or "")
        trajectory = as_failed(build_trajectory(list(request.resource_spans), ()).trajectory, decision)
        lap("trajectory")
        attribution = method.attribute(trajectory)
        lap("heuristic")
        enricher.enrich(request.resource_spans, trajectory, attribution)
        request.SerializeToString()
        lap("enrich + serialise")
        redacted = redact_trajectory(trajectory, redactor)
        lap("redact")
        finished.append(FinishedAttribution(group.trace_id.hex(), "bench-agents", redacted, attribution,
                                            "failure", time.time(), False))  # fmt: skip
    clock = time.thread_time()
    for start in range(0, len(finished), args.store_batch):
        batch = finished[start : start + args.store_batch]
        if len(batch) == 1:
            writer(batch[0])
        else:
            writer.consume_batch(batch)
    spent["blame store"] = time.thread_time() - clock
    durable.close()
    store.close()
    total = sum(spent.values())
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}, "
        f"{len(failed)} failed traces of 10 spans, blame store {args.store_batch} a transaction, "
        "thread CPU time"
    )
    for stage in STAGES:
        print(f"{stage:20} {spent[stage] / len(failed) * 1000:7.2f} ms  {spent[stage] / total:5.0%}")
    rate = len(failed) / total
    print(f"{'total':20} {total / len(failed) * 1000:7.2f} ms  -> {rate:.0f} failed traces/s a core")


def scaling(failed: list) -> None:  # noqa: ANN001 - TraceGroups
    """Wall-clock analysis throughput of 1 and of 2 worker processes (as the processor runs them)."""
    jobs = [
        AnalysisJob(g.trace_id, (g.payload,), (), TraceDecision(True, g.root_failure or ""), time.monotonic())
        for g in failed
    ]
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["otel_blame.processor.analysis"])
    rates = {}
    for workers in (1, 2):
        with ProcessPoolExecutor(
            workers,
            mp_context=context,
            initializer=analysis.start_worker,
            initargs=(AttributionConfig(worker_niceness=0), DetectionConfig(), None, os.getpid()),
        ) as pool:
            for warm in [pool.submit(analysis.warm_up) for _ in range(workers)]:
                warm.result()
            load = os.getloadavg()[0]
            started = time.perf_counter()
            results = list(pool.map(analysis.run_job, jobs, chunksize=16))
            seconds = time.perf_counter() - started
        assert all(result.status == analysis.ATTRIBUTED for result in results)
        rates[workers] = len(jobs) / seconds
        print(
            f"{workers} worker(s): {rates[workers]:7.0f} failed traces/s  (load average before: {load:.1f})"
        )
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {len(jobs)} failed traces of 10 spans; "
        f"2 workers / 1 worker = {rates[2] / rates[1]:.2f}"
    )


if __name__ == "__main__":
    main()
