"""What one buffered span costs in the trace assembler, measured inside one process.

``bench/processor_throughput.py`` reports the serve process's RSS growth divided by the spans its
assembler buffers; that figure also carries everything else the load makes the process hold (failed
traces waiting for analysis, requests in flight, the allocator's free lists). This measures the
buffer alone: the throughput benchmark's requests (10-span agent traces, 50 a request) are split
as the log stage splits them and added to a :class:`TraceAssembler`, and the Python heap growth
(``tracemalloc``) and the RSS growth are divided by the spans buffered. Usage::

    .venv/bin/python bench/assembly_memory.py --spans 200000
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
import tracemalloc
from pathlib import Path

from otel_blame.processor.assembler import TraceAssembler
from otel_blame.processor.config import AssemblyConfig, DetectionConfig
from otel_blame.processor.decision import FailureDetector
from otel_blame.processor.wire import split_traces

sys.path.insert(0, str(Path(__file__).parent))
from processor_throughput import SPANS_PER_TRACE, RequestFactory  # noqa: E402


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _fill(assembler: TraceAssembler, requests: list[bytes], detector: FailureDetector) -> None:
    for row, body in enumerate(requests):
        for group in split_traces(body, detector.failure_reason):
            assembler.add(group, row, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=200_000, help="spans to buffer")
    parser.add_argument("--traces-per-request", type=int, default=50)
    args = parser.parse_args()
    detector = FailureDetector(DetectionConfig())
    factory = RequestFactory(args.traces_per_request)
    count = args.spans // (args.traces_per_request * SPANS_PER_TRACE)
    config = AssemblyConfig(max_traces=10_000_000)
    # the process's growth first (tracemalloc's own bookkeeping would count in it) ...
    by_rss = TraceAssembler(config)
    gc.collect()
    rss_before = _rss_bytes()
    _fill(by_rss, [factory.build()[0] for _ in range(count)], detector)
    gc.collect()
    rss = _rss_bytes() - rss_before
    # ... then the heap a second buffer of as many spans takes
    by_heap = TraceAssembler(config)
    requests = [factory.build()[0] for _ in range(count)]
    gc.collect()
    tracemalloc.start()
    heap_before = tracemalloc.get_traced_memory()[0]
    _fill(by_heap, requests, detector)
    del requests
    gc.collect()
    heap = tracemalloc.get_traced_memory()[0] - heap_before
    tracemalloc.stop()
    stats = by_heap.stats()
    spans = stats.buffered_spans
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"buffered spans       {spans:>9,}  in {stats.buffered_traces:,} traces")
    print(f"wire bytes a span    {stats.buffered_bytes / spans:9.0f} B  (the spans' protobuf, as received)")
    print(f"heap a span          {heap / spans:9.0f} B  (tracemalloc: the buffer with its bookkeeping)")
    per_span = rss / by_rss.stats().buffered_spans
    print(f"RSS a span           {per_span:9.0f} B  (the process's growth: the buffer, and what the")
    print("                                 allocator kept of the requests freed after the split)")


if __name__ == "__main__":
    main()
