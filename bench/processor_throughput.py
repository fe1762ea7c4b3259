"""Throughput of the blame processor under agent-trace load, with the OpenTelemetry Collector as baseline.

A load generator sends agent traces (10 spans each: a workflow root and nine agent messages;
20 % failed) over OTLP/gRPC as fast as the server accepts them, for ``--duration`` seconds, to
``otel-blame serve`` running as a separate process; a counting OTLP/gRPC sink (another process)
stands downstream. Reported: accepted spans/s, delivered spans (must equal accepted), p50/p99
added latency of successful traces (from the server's acknowledgement to arrival downstream),
the processor's memory per buffered span (RSS growth over its idle size, divided by the spans it
buffers, sampled every 0.5 s; and the RSS growth at the end of the load divided by the most spans
it buffered at once), the CPU the server's processes used while the load ran (cores, and
microseconds per accepted span), and for otel-blame how many log commits its requests shared
(group commit).

When the Collector built by ``deploy/`` exists, the same load goes through it twice, right after
ours: ``otlp -> groupbytrace(wait=quiet period) -> otlp`` with the exporter's queue in memory
(acknowledged spans are lost in a crash), then with a persistent sending queue (``file_storage``,
fsync on; the spans groupbytrace holds are still in memory only). Both ratios are printed.

    .venv/bin/python bench/processor_throughput.py --duration 20 --paced-rate 20000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent import futures
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from otel_blame import semconv as sc
from otel_blame.processor.wire import field

TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
COLLECTOR = Path.home() / ".cache/otel-blame-e2e/bin/otelcol-blame"
PLACEHOLDER = b"\xee" * 16
SPANS_PER_TRACE = 10
AGENTS = ("Planner", "Researcher", "Coder", "Executor", "Critic")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# -- load -------------------------------------------------------------------------------------
def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def _trace_template(failed: bool) -> list[bytes]:
    """Serialised spans of one trace with a placeholder trace id (replaced per trace)."""
    now = time.time_ns()
    root_id = os.urandom(8)
    root = Span(
        trace_id=PLACEHOLDER,
        span_id=root_id,
        name=sc.workflow_span_name("answer"),
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=now,
        end_time_unix_nano=now + 9_000_000,
        attributes=[
            _kv(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_WORKFLOW),
            _kv(sc.TASK_NAME, "answer"),
            _kv(sc.TASK_INPUT, "How many moons does Mars have, and what are they called?"),
            _kv(sc.TASK_OUTCOME, sc.OUTCOME_FAILURE if failed else sc.OUTCOME_SUCCESS),
        ],
    )
    if failed:
        root.status.code = Status.STATUS_CODE_ERROR
        root.status.message = "wrong answer"
    spans = []
    for step in range(SPANS_PER_TRACE - 1):
        agent = AGENTS[step % len(AGENTS)]
        text = f"Step {step}: {agent} reports that Mars has two moons, Phobos and Deimos; checking sources."
        spans.append(
            Span(
                trace_id=PLACEHOLDER,
                span_id=os.urandom(8),
                parent_span_id=root_id,
                name=sc.agent_span_name(agent),
                start_time_unix_nano=now + step * 1_000_000,
                end_time_unix_nano=now + step * 1_000_000 + 900_000,
                attributes=[
                    _kv(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_AGENT),
                    _kv(sc.GEN_AI_AGENT_NAME, agent),
                    _kv(sc.STEP_INDEX, step),
                    _kv(
                        sc.GEN_AI_OUTPUT_MESSAGES,
                        json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}]),
                    ),
                ],
            ).SerializeToString()
        )
    return [*spans, root.SerializeToString()]  # children end first, the root last


class RequestFactory:
    """Builds requests of ``traces`` fresh traces by splicing trace ids into span templates."""

    def __init__(self, traces: int) -> None:
        self.traces = traces
        self._templates = [(False, _trace_template(False)) for _ in range(4)] + [
            (True, _trace_template(True))
        ]
        resource = Resource(attributes=[_kv(sc.SERVICE_NAME, "bench-agents")]).SerializeToString()
        scope = InstrumentationScope(name="bench").SerializeToString()
        self._resource_field = field(b"\x0a", resource)
        self._scope_field = field(b"\x0a", scope)
        self._counter = 0

    def build(self) -> tuple[bytes, list[tuple[bytes, bool]]]:
        parts = [self._scope_field]
        traces = []
        for _ in range(self.traces):
            failed, spans = self._templates[self._counter % 5]
            self._counter += 1
            trace_id = os.urandom(16)
            traces.append((trace_id, failed))
            for span in spans:
                parts.append(field(b"\x12", span.replace(PLACEHOLDER, trace_id)))
        scope_spans = field(b"\x12", b"".join(parts))
        return field(b"\x0a", self._resource_field + scope_spans), traces


# -- the counting sink (own process) ----------------------------------------------------------
def _sink_main(port: int, results: multiprocessing.Queue, stop: multiprocessing.Event) -> None:
    lock = threading.Lock()
    state = {"spans": 0, "requests": 0}
    arrivals: dict[bytes, float] = {}

    def export(body: bytes, context: grpc.ServicerContext) -> bytes:
        now = time.time()
        request = ExportTraceServiceRequest.FromString(body)
        count = 0
        roots = []
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                count += len(scope_spans.spans)
                for span in scope_spans.spans:
                    if not span.parent_span_id:
                        roots.append(span.trace_id)
        with lock:
            state["spans"] += count
            state["requests"] += 1
            for trace_id in roots:
                arrivals.setdefault(trace_id, now)
        return b""

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        options=[("grpc.max_receive_message_length", 256 * 1024 * 1024)],
    )
    handler = grpc.unary_unary_rpc_method_handler(export, request_deserializer=None, response_serializer=None)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": handler}
            ),
        )
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    results.put("ready")
    while not stop.wait(0.2):
        with lock:
            results.put(("count", state["spans"]))
    server.stop(1)
    with lock:
        results.put(("final", state["spans"], dict(arrivals)))


class CountingSink:
    def __init__(self) -> None:
        self.port = _free_port()
        context = multiprocessing.get_context("spawn")
        self._results = context.Queue()
        self._stop = context.Event()
        self._process = context.Process(
            target=_sink_main, args=(self.port, self._results, self._stop), daemon=True
        )
        self.count = 0

    def start(self) -> CountingSink:
        self._process.start()
        assert self._results.get(timeout=30) == "ready"
        return self

    def poll(self) -> int:
        while not self._results.empty():
            item = self._results.get()
            if item[0] == "count":
                self.count = item[1]
        return self.count

    def finish(self) -> tuple[int, dict[bytes, float]]:
        self._stop.set()
        while True:
            item = self._results.get(timeout=60)
            if item[0] == "final":
                self._process.join(10)
                return item[1], item[2]


# -- servers under test -------------------------------------------------------------------------
def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of a process and every process below it, living ones only."""
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _TICKS
            for task in os.listdir(f"/proc/{current}/task"):
                pending += [int(c) for c in Path(f"/proc/{current}/task/{task}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


class Server:
    name = ""
    pid = 0
    endpoint = ""

    def buffered_spans(self) -> int | None:
        return None

    def counters(self) -> dict[str, int]:
        return {}

    def stop(self) -> None: ...


class OtelBlameServer(Server):
    name = "otel-blame serve"

    def __init__(
        self,
        sink_port: int,
        quiet: float,
        workdir: Path,
        retention: bool,
        *,
        store: bool,
        grpc_processes: int | None = None,
    ) -> None:
        port = _free_port()
        env = {
            **os.environ,
            "OTEL_BLAME_ASSEMBLY__MAX_TRACES": os.environ.get("OTEL_BLAME_ASSEMBLY__MAX_TRACES", "100000"),
            "OTEL_BLAME_SHUTDOWN_TIMEOUT": "30",
        }
        if grpc_processes is not None:
            env["OTEL_BLAME_RECEIVERS__GRPC_PROCESSES"] = str(grpc_processes)
        if not store:
            env["OTEL_BLAME_STORE__ENABLED"] = "false"
        if not retention:
            env["OTEL_BLAME_VERDICTS__MAX_TRACES"] = "0"
        self._process = subprocess.Popen(
            [sys.executable, "-m", "otel_blame.cli", "serve", "--grpc-endpoint", f"127.0.0.1:{port}",
             "--http-endpoint", "127.0.0.1:0", "--downstream", f"127.0.0.1:{sink_port}",
             "--wal-dir", str(workdir / "wal"), "--quiet-period", str(quiet)],
            stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert self._process.stdout is not None
        ready = json.loads(self._process.stdout.readline())
        self.endpoint = ready["grpc"]
        self._http = ready["http"]
        self.pid = self._process.pid

    def metrics(self) -> dict[str, float]:
        try:
            with urllib.request.urlopen(f"http://{self._http}/metrics", timeout=5) as response:
                lines = response.read().decode().splitlines()
        except OSError:
            return {}
        return {
            line.split()[0]: float(line.split()[-1])
            for line in lines
            if line.startswith("otel_blame_processor_") and " " in line
        }

    def buffered_spans(self) -> int | None:
        value = self.metrics().get("otel_blame_processor_assembly_buffered_spans")
        return None if value is None else int(value)

    def counters(self) -> dict[str, int]:
        wanted = (
            "attributed_traces",
            "forwarded_before_analysis",
            "assembly_overflow_traces",
            "assembly_oversized_traces",
            "fallback_attributions",
            "log_appended_requests",
            "log_append_commits",
        )
        metrics = self.metrics()
        return {key: int(metrics.get(f"otel_blame_processor_{key}_total", 0)) for key in wanted}

    def stop(self) -> None:
        self._process.send_signal(signal.SIGTERM)
        self._process.wait(120)


class CollectorServer(Server):
    name = "OpenTelemetry Collector (otlp -> groupbytrace -> otlp)"

    def __init__(
        self, binary: Path, sink_port: int, quiet: float, workdir: Path, *, persistent: bool = False
    ) -> None:
        port = _free_port()
        config = workdir / "collector.yaml"
        storage, extensions, service_extensions = "", "", ""
        if persistent:  # the queue on disk, each write fsynced: acknowledged spans survive past the exporter
            self.name = "OpenTelemetry Collector, persistent queue (file_storage, fsync)"
            storage = "\n      storage: file_storage"
            queue = workdir / "queue"
            queue.mkdir()
            extensions = f"extensions:\n  file_storage:\n    directory: {queue}\n    fsync: true\n"
            service_extensions = "\n  extensions: [file_storage]"
        config.write_text(
            f"""{extensions}receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{port}
        max_recv_msg_size_mib: 64
processors:
  groupbytrace:
    wait_duration: {quiet}s
    num_traces: 200000
exporters:
  otlp:
    endpoint: 127.0.0.1:{sink_port}
    tls:
      insecure: true
    sending_queue:
      queue_size: 100000{storage}
service:{service_extensions}
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      processors: [groupbytrace]
      exporters: [otlp]
"""
        )
        log = workdir / "collector.log"
        with open(log, "wb") as output:  # a file, not a pipe: a full pipe would stall the Collector
            self._process = subprocess.Popen(
                [str(binary), "--config", str(config)], stdout=subprocess.DEVNULL, stderr=output
            )
        self.pid = self._process.pid
        self.endpoint = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self._process.poll() is None:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.1)
        self._process.kill()
        self._process.wait(10)
        raise RuntimeError(f"the Collector did not start: {log.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        """SIGTERM; a Collector still draining (rejecting its queue into a stopped exporter, which a
        persistent queue on a busy disk can take minutes to do) is killed after two minutes."""
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(120)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)


# -- one run ----------------------------------------------------------------------------------
def run(  # noqa: ANN001
    server_factory,
    duration: float,
    senders: int,
    traces_per_request: int,
    quiet: float,
    rate: float | None = None,
) -> dict:
    load_before = os.getloadavg()[0]
    sink = CountingSink().start()
    workdir = Path(tempfile.mkdtemp(prefix="otel-blame-bench-"))
    server: Server = server_factory(sink.port, quiet, workdir)
    try:
        time.sleep(1.0)
        idle_rss = _rss_bytes(server.pid)
        lock = threading.Lock()
        acked_spans = 0
        acked_failed = 0
        refused = 0
        ack_times: dict[bytes, float] = {}
        stop = threading.Event()

        def send() -> None:
            nonlocal acked_spans, acked_failed, refused
            factory = RequestFactory(traces_per_request)
            options = [  # a connection of its own (channels to one target share one otherwise)
                ("grpc.max_send_message_length", 64 << 20),
                ("grpc.use_local_subchannel_pool", 1),
            ]
            with grpc.insecure_channel(server.endpoint, options=options) as ch:
                call = ch.unary_unary(TRACE_EXPORT, request_serializer=None, response_deserializer=None)
                body, traces = factory.build()
                interval = traces_per_request * SPANS_PER_TRACE * senders / rate if rate else 0.0
                next_send = time.monotonic()
                while not stop.is_set():
                    if interval:
                        next_send += interval
                        time.sleep(max(0.0, next_send - time.monotonic()))
                    try:
                        call(body, timeout=30)
                    except grpc.RpcError:
                        with lock:
                            refused += 1
                        time.sleep(0.05)
                        continue  # resend the same request
                    acked = time.time()
                    with lock:
                        acked_spans += len(traces) * SPANS_PER_TRACE
                        acked_failed += sum(failed for _, failed in traces)
                        for trace_id, failed in traces:
                            if not failed:
                                ack_times[trace_id] = acked
                    body, traces = factory.build()

        memory_samples: list[tuple[int, int]] = []
        threads = [threading.Thread(target=send, daemon=True) for _ in range(senders)]
        cpu_before = _cpu_seconds(server.pid)
        started = time.monotonic()
        for thread in threads:
            thread.start()
        while time.monotonic() - started < duration:
            time.sleep(0.5)
            buffered = server.buffered_spans()
            if buffered:
                memory_samples.append((buffered, _rss_bytes(server.pid)))
        stop.set()
        cpu_during, window = _cpu_seconds(server.pid) - cpu_before, time.monotonic() - started
        for thread in threads:
            thread.join(60)
        elapsed = time.monotonic() - started
        load_stopped = time.monotonic()
        peak_rss = _rss_bytes(server.pid)
        deadline = time.monotonic() + quiet + 60
        while sink.poll() < acked_spans and time.monotonic() < deadline:
            time.sleep(0.2)
        all_delivered_after = time.monotonic() - load_stopped
        blamed_after = None  # seconds after the load stopped until every failed trace was blamed
        if server.counters():
            deadline = load_stopped + 90
            while time.monotonic() < deadline:
                if server.counters()["attributed_traces"] >= acked_failed:
                    blamed_after = round(time.monotonic() - load_stopped, 1)
                    break
                time.sleep(0.2)
        counters = server.counters()
    finally:
        server.stop()
    delivered, arrivals = sink.finish()
    latencies = sorted(arrivals[t] - ack_times[t] for t in ack_times if t in arrivals)
    per_span = [(rss - idle_rss) / buffered for buffered, rss in memory_samples if buffered > 1000]
    peak_buffered = max((buffered for buffered, _ in memory_samples), default=0)
    if os.environ.get("BENCH_DEBUG"):
        print(memory_samples, file=sys.stderr)
    shutil.rmtree(workdir, ignore_errors=True)
    return {
        "server": server.name,
        "load_average_before_after": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "offered_rate": rate or "as fast as accepted",
        "seconds": round(elapsed, 1),
        "accepted_spans": acked_spans,
        "accepted_spans_per_second": round(acked_spans / elapsed),
        "delivered_spans": delivered,
        "lost_spans": max(0, acked_spans - delivered),
        "refused_requests": refused,
        "delivered_all_after_load_seconds": round(all_delivered_after, 1),
        "failed_traces": acked_failed,
        "all_failed_blamed_after_load_seconds": blamed_after,
        "successful_traces_measured": len(latencies),
        "latency_p50_seconds": round(statistics.median(latencies), 3) if latencies else None,
        "latency_p99_seconds": round(latencies[int(len(latencies) * 0.99) - 1], 3) if latencies else None,
        "peak_buffered_spans": peak_buffered,
        "memory_per_buffered_span_bytes": round(statistics.median(per_span)) if per_span else None,
        # RSS only grows (freed memory stays with the process) while the buffer swings with the
        # completions: the growth at the end of the load over the most spans buffered at once
        "memory_per_span_at_peak_bytes": (
            round((peak_rss - idle_rss) / peak_buffered) if memory_samples else None
        ),
        "idle_rss_mib": round(idle_rss / 2**20, 1),
        "end_rss_mib": round(peak_rss / 2**20, 1),
        "server_cores_during_load": round(cpu_during / window, 2),
        "server_cpu_us_per_accepted_span": round(cpu_during / max(1, acked_spans) * 1e6, 2),
        **counters,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--quiet-period", type=float, default=2.0)
    parser.add_argument("--senders", type=int, default=4, help="concurrent requests in flight")
    parser.add_argument("--traces-per-request", type=int, default=50, help="x 10 spans per request")
    parser.add_argument("--retention", action="store_true", help="keep completed traces for late verdicts")
    parser.add_argument("--no-store", action="store_true", help="serve without its blame store (SQLite)")
    parser.add_argument(
        "--grpc-processes",
        type=int,
        default=None,
        help="serve's receiving processes (receivers.grpc_processes; 0: none, serve's own process receives)",
    )
    parser.add_argument(
        "--collector", type=Path, default=COLLECTOR, help="the Collector binary for the baseline"
    )
    parser.add_argument("--no-baseline", action="store_true", help="no Collector runs")
    parser.add_argument(
        "--no-persistent-baseline", action="store_true", help="skip the Collector with a persistent queue"
    )
    parser.add_argument(
        "--paced-rate",
        type=float,
        default=20_000,
        help="spans/s of a second, paced run for latency (0: skip)",
    )
    args = parser.parse_args()

    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
    )
    runs = [None] + ([args.paced_rate] if args.paced_rate else [])
    for rate in runs:
        ours = run(
            lambda port, quiet, workdir: OtelBlameServer(
                port,
                quiet,
                workdir,
                args.retention,
                store=not args.no_store,
                grpc_processes=args.grpc_processes,
            ),
            args.duration,
            args.senders,
            args.traces_per_request,
            args.quiet_period,
            rate,
        )
        print(json.dumps(ours, indent=2), flush=True)
        if args.no_baseline:
            continue
        if not args.collector.exists():
            print(
                f"baseline skipped: no Collector at {args.collector} (build it with deploy/'s build script)"
            )
            continue
        for persistent in (False, True)[: 1 if args.no_persistent_baseline else 2]:
            baseline = run(
                lambda port, quiet, workdir, persistent=persistent: CollectorServer(
                    args.collector, port, quiet, workdir, persistent=persistent
                ),
                args.duration,
                args.senders,
                args.traces_per_request,
                args.quiet_period,
                rate,
            )
            print(json.dumps(baseline, indent=2))
            ratio = ours["accepted_spans_per_second"] / max(1, baseline["accepted_spans_per_second"])
            delivered = ours["delivered_spans"] / max(1, baseline["delivered_spans"])
            print(
                f"otel-blame / {baseline['server']}: accepted {ratio:.2f}, delivered {delivered:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
