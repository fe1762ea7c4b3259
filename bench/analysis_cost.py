"""CPU time of each analysis stage per failed trace, on the throughput benchmark's traces.

``bench/processor_throughput.py`` shows that ``serve`` accepts spans faster than it can analyse
its failed traces (20 % of the load there). This says where an analysis goes, stage by stage,
in one thread, in the order ``TraceAnalyser.analyse`` runs them: parse the trace's payloads,
build the Trajectory (conventions), attribute (the default heuristic), write ``blame.*`` and
re-serialise (enricher), redact the trajectory for the listeners, and the listener ``serve``
installs by default (the blame store, SQLite next to the WAL). Usage::

    .venv/bin/python bench/analysis_cost.py --traces 600
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_blame.attribution.registry import create_method
from otel_blame.conventions import build_trajectory
from otel_blame.processor.analyser import FinishedAttribution, _as_failed
from otel_blame.processor.attributor import redact_trajectory
from otel_blame.processor.config import DetectionConfig
from otel_blame.processor.detector import FailureDetector
from otel_blame.processor.enricher import BlameEnricher
from otel_blame.processor.wire import split_traces
from otel_blame.redaction import Redactor
from otel_blame.store.blame_store import CountAs, open_store
from otel_blame.store.config import StoreConfig
from otel_blame.ui.processor_integration import StoreWriter

sys.path.insert(0, str(Path(__file__).parent))
from processor_throughput import RequestFactory  # noqa: E402

STAGES = ("parse", "trajectory", "heuristic", "enrich + serialise", "redact", "blame store")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=600, help="failed traces to analyse")
    args = parser.parse_args()
    detector = FailureDetector(DetectionConfig())
    factory = RequestFactory(50)
    failed = []
    while len(failed) < args.traces:  # one in five traces of the benchmark's load is failed
        failed += [g for g in split_traces(factory.build()[0], detector.is_failed) if g.root_failed]
    failed = failed[: args.traces]
    method, enricher, redactor = create_method("heuristic"), BlameEnricher(), Redactor()
    store = open_store(StoreConfig(), wal_dir=Path(tempfile.mkdtemp(prefix="otel-blame-analysis-")))
    writer = StoreWriter(store, CountAs("bench", 1000))
    spent = dict.fromkeys(STAGES, 0.0)
    for group in failed:
        clock = time.thread_time()

        def lap(stage: str) -> None:
            nonlocal clock
            now = time.thread_time()
            spent[stage] += now - clock
            clock = now

        request = ExportTraceServiceRequest.FromString(group.payload)
        lap("parse")
        trajectory = _as_failed(build_trajectory(list(request.resource_spans), ()).trajectory, None)
        lap("trajectory")
        attribution = method.attribute(trajectory)
        lap("heuristic")
        enricher.enrich(request.resource_spans, trajectory, attribution)
        request.SerializeToString()
        lap("enrich + serialise")
        redacted = redact_trajectory(trajectory, redactor)
        lap("redact")
        writer(FinishedAttribution(group.trace_id.hex(), "bench-agents", redacted, attribution, "failure",
                                   time.time(), False))  # fmt: skip
        lap("blame store")
    store.close()
    total = sum(spent.values())
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}, "
        f"{len(failed)} failed traces of 10 spans, thread CPU time"
    )
    for stage in STAGES:
        print(f"{stage:20} {spent[stage] / len(failed) * 1000:7.2f} ms  {spent[stage] / total:5.0%}")
    rate = len(failed) / total
    print(f"{'total':20} {total / len(failed) * 1000:7.2f} ms  -> {rate:.0f} failed traces/s a core")


if __name__ == "__main__":
    main()
