"""End to end against the real programs: app -> OpenTelemetry Collector -> otel-blame serve -> downstream.

The Collector and Jaeger are the binaries deploy/build_components.sh builds (`make test` builds
them first; without them these tests skip and say so). Everything listens on 127.0.0.1, every wait
is bounded, and every process is stopped when a test ends, also when it fails.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_blame import semconv as sc
from otel_blame.demo.scenario import TASKS, SpanCounter, run_tasks
from otel_blame.instrumentation import configure, record_message, reset_configuration, set_outcome, task
from otel_blame.patterns import is_pattern_id
from tests.ports import reserve_port
from tests.support import RecordedSpan, RecordingOTLPSink

from .harness import (
    COLLECTOR_BIN,
    COLLECTOR_CONFIG_DIR,
    JAEGER_BIN,
    BlameServer,
    Collector,
    Jaeger,
    ProcessGroup,
    http_get,
    iter_spans,
    jaeger_tags,
    missing_binary_reason,
    wait_until,
)

_missing = missing_binary_reason(COLLECTOR_BIN) or missing_binary_reason(JAEGER_BIN)
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(_missing is not None, reason=str(_missing)),
]


def app_provider(
    service: str, endpoint: str, schedule_delay_millis: int = 1000
) -> tuple[TracerProvider, SpanCounter]:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    counter = SpanCounter()
    provider.add_span_processor(counter)
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=20000, schedule_delay_millis=schedule_delay_millis)
    )
    return provider, counter


def explain(group: ProcessGroup):
    """Attach the processes' log tails to an assertion failure."""
    return f"\n{group.logs()}"


def test_ag2_group_chat_through_collector_and_otel_blame_into_jaeger(group: ProcessGroup, tmp_path: Path):
    jaeger = Jaeger(group)
    blame = BlameServer(group, "otel-blame", downstream=jaeger.otlp_grpc_endpoint, wal_dir=tmp_path / "wal")
    collector = Collector(
        group,
        COLLECTOR_CONFIG_DIR / "single.yaml",
        "otelcol-single",
        {"OTEL_BLAME_ENDPOINT": blame.otlp_grpc_endpoint, "OTELCOL_GROUP_WAIT": "1s"},
    )
    service = f"e2e-group-chat-{uuid.uuid4().hex[:8]}"
    provider, counter = app_provider(service, collector.otlp_grpc_endpoint)
    try:
        results = run_tasks(provider, TASKS, work_dir=tmp_path / "code")
    finally:
        provider.shutdown()
    failed = {r.trace_id: r for r in results if r.failed}
    assert len(failed) == sum(1 for t in TASKS if t.fault_agent), "the scripted faults make these runs fail"
    sent = counter.spans
    assert set(sent) == {r.trace_id for r in results}

    # Jaeger's tag search finds exactly the failed traces by their culprit span.
    def blamed_traces() -> list[dict]:
        found = jaeger.find_traces(service, tags={sc.BLAME_CULPRIT: "true"})
        return found if len(found) == len(failed) else []

    try:
        found = wait_until(blamed_traces, timeout=90, what="the blamed traces in Jaeger")
    except TimeoutError as error:
        raise AssertionError(f"{error}{explain(group)}") from None
    assert {t["traceID"] for t in found} == set(failed)

    # Every span sent arrived, in every trace (failed or not), with its blame where it belongs.
    def whole(trace_id: str) -> dict | None:
        trace = jaeger.trace(trace_id)
        if trace is None or {s["spanID"] for s in iter_spans(trace)} != sent[trace_id]:
            return None
        return trace

    patterns: dict[str, set[str]] = {}
    for result in results:
        trace = wait_until(
            lambda r=result: whole(r.trace_id), timeout=60, what=f"all spans of {result.trace_id}"
        )
        spans = list(iter_spans(trace))
        root = next(s for s in spans if not s.get("references"))
        root_tags = jaeger_tags(root)
        culprits = [s for s in spans if jaeger_tags(s).get(sc.BLAME_CULPRIT) is True]
        if not result.failed:
            assert not culprits and sc.BLAME_AGENT not in root_tags
            continue
        assert len(culprits) == 1
        culprit_tags = jaeger_tags(culprits[0])
        # the verdict is the planted fault: that agent, that step, on that agent's span
        planted = (result.task.fault_agent, result.task.fault_step)
        assert (root_tags[sc.BLAME_AGENT], root_tags[sc.BLAME_STEP]) == planted, result.task.name
        assert (culprit_tags[sc.GEN_AI_AGENT_NAME], culprit_tags[sc.STEP_INDEX]) == planted
        for key in (sc.BLAME_AGENT, sc.BLAME_STEP, sc.BLAME_REASON):
            assert key in culprit_tags, f"culprit span lacks {key}"
            assert culprit_tags[key] == root_tags[key]
        assert culprit_tags[sc.GEN_AI_AGENT_NAME] == root_tags[sc.BLAME_AGENT]
        assert culprit_tags[sc.STEP_INDEX] == root_tags[sc.BLAME_STEP]
        assert 0.0 <= root_tags[sc.BLAME_CONFIDENCE] <= 1.0
        assert root_tags[sc.BLAME_METHOD].startswith("heuristic")
        agent_spans = [s for s in spans if sc.STEP_INDEX in jaeger_tags(s)]
        assert agent_spans and all(sc.BLAME_SCORE in jaeger_tags(s) for s in agent_spans)
        # the failure pattern, on root and culprit alike
        assert is_pattern_id(root_tags[sc.BLAME_PATTERN])
        assert culprit_tags[sc.BLAME_PATTERN] == root_tags[sc.BLAME_PATTERN]
        patterns.setdefault(root_tags[sc.BLAME_PATTERN], set()).add(result.trace_id)
        # the original attributes are untouched
        assert root_tags[sc.TASK_OUTCOME] == sc.OUTCOME_FAILURE

    # Jaeger's tag search finds each pattern's traces by blame.pattern
    assert patterns
    for pattern, trace_ids in patterns.items():
        found = jaeger.find_traces(service, tags={sc.BLAME_PATTERN: pattern})
        assert {t["traceID"] for t in found} == trace_ids, pattern


# --- scaled: load-balancing tier in front of two replicas ---------------------------------------

TRACES = 200
STEPS = ("triage", "researcher", "writer", "reviewer")


# The planted fault of send_failed_traces: the researcher's lookup brings in 200 EUR (step 1);
# the writer and reviewer only carry it on.
PLANTED_AGENT, PLANTED_STEP = "researcher", 1


def send_failed_traces(provider: TracerProvider, count: int, on_each=None) -> None:
    """``count`` small failed agent runs through the instrumentation API (4 steps + root each), each
    with its fault planted at ``PLANTED_AGENT`` / ``PLANTED_STEP``."""
    configure(tracer_provider=provider)
    try:
        for index in range(count):
            with task(f"ticket-{index}", input=f"Refund order #{index}?", expected_output="refund 20 EUR"):
                record_message("triage", f"Order #{index}: customer asks for a refund of 20 EUR.")
                record_message("researcher", "Policy lookup: the order total is 200 EUR.")
                record_message("writer", "Drafted: we refund 200 EUR.")
                record_message("reviewer", "Looks fine. Final answer: refund 200 EUR.")
                set_outcome(False, final_output="refund 200 EUR", reason="refunded 200 instead of 20")
            if on_each is not None:
                on_each(index)
    finally:
        reset_configuration()


def attrs(recorded: RecordedSpan) -> dict:
    return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in recorded.span.attributes}


def start_scaled(
    group: ProcessGroup, tmp_path: Path
) -> tuple[Collector, list[BlameServer], list[RecordingOTLPSink]]:
    sinks = [RecordingOTLPSink().start() for _ in range(2)]
    replicas = [
        BlameServer(
            group,
            f"otel-blame-{i}",
            downstream=sinks[i].endpoint,
            wal_dir=tmp_path / f"wal-{i}",
            # every trace enriched in place, however far analysis falls behind on a loaded machine
            # (forward-first, which sends the blame as a late span instead, has its own tests); the
            # planted step tells a whole trace from a split one, and the offline default finds it in
            # every ticket
            extra_env={"OTEL_BLAME_ATTRIBUTION__FORWARD_FIRST_BACKLOG": str(10 * TRACES)},
        )
        for i in range(2)
    ]
    balancer = Collector(
        group,
        COLLECTOR_CONFIG_DIR / "scaled.yaml",
        "otelcol-loadbalancer",
        {
            "OTEL_BLAME_REPLICA_0": replicas[0].otlp_grpc_endpoint,
            "OTEL_BLAME_REPLICA_1": replicas[1].otlp_grpc_endpoint,
        },
    )
    return balancer, replicas, sinks


def check_delivery(sinks: list[RecordingOTLPSink], sent: dict[str, set[str]]) -> dict[str, Counter]:
    """trace id -> Counter(sink index) of the spans that arrived, after asserting none is lost."""
    arrived: dict[str, set[str]] = defaultdict(set)
    where: dict[str, Counter] = defaultdict(Counter)
    for index, sink in enumerate(sinks):
        for recorded in sink.spans():
            arrived[recorded.trace_id].add(recorded.span_id)
            where[recorded.trace_id][index] += 1
    lost = {t: ids - arrived.get(t, set()) for t, ids in sent.items() if ids - arrived.get(t, set())}
    assert not lost, f"{sum(map(len, lost.values()))} spans of {len(lost)} traces were lost"
    return where


def blamed_roots(sinks: list[RecordingOTLPSink]) -> dict[str, list[dict]]:
    roots: dict[str, list[dict]] = defaultdict(list)
    for sink in sinks:
        for recorded in sink.spans():
            if not recorded.span.parent_span_id:
                roots[recorded.trace_id].append(attrs(recorded))
    return roots


def assert_planted_fault_blamed(sinks: list[RecordingOTLPSink]) -> None:
    """Every blamed root and every culprit span names the planted agent and step."""
    wrong = {}
    for sink in sinks:
        for recorded in sink.spans():
            span_attrs = attrs(recorded)
            if not recorded.span.parent_span_id and sc.BLAME_AGENT in span_attrs:
                verdict = (span_attrs[sc.BLAME_AGENT], span_attrs[sc.BLAME_STEP])
            elif span_attrs.get(sc.BLAME_CULPRIT) is True:
                verdict = (span_attrs[sc.GEN_AI_AGENT_NAME], span_attrs[sc.STEP_INDEX])
            else:
                continue
            if verdict != (PLANTED_AGENT, PLANTED_STEP):
                wrong[recorded.trace_id] = verdict
    first = dict(list(wrong.items())[:5])
    assert not wrong, (
        f"{len(wrong)} traces blamed elsewhere than {PLANTED_AGENT} step {PLANTED_STEP}: {first}"
    )


def culprit_counts(sinks: list[RecordingOTLPSink]) -> Counter:
    return Counter(
        recorded.trace_id
        for sink in sinks
        for recorded in sink.spans()
        if attrs(recorded).get(sc.BLAME_CULPRIT) is True
    )


def total_unique(sinks: list[RecordingOTLPSink]) -> int:
    return len({(r.trace_id, r.span_id) for sink in sinks for r in sink.spans()})


def test_scaled_every_trace_attributed_exactly_once_and_whole(group: ProcessGroup, tmp_path: Path):
    balancer, replicas, sinks = start_scaled(group, tmp_path)
    try:
        provider, counter = app_provider("e2e-scaled", balancer.otlp_grpc_endpoint)
        try:
            send_failed_traces(provider, TRACES)
        finally:
            provider.shutdown()
        sent = counter.spans
        assert len(sent) == TRACES
        expected = sum(len(ids) for ids in sent.values())
        try:
            wait_until(
                lambda: total_unique(sinks) >= expected, timeout=120, what=f"{expected} spans downstream"
            )
            wait_until(
                lambda: len(culprit_counts(sinks)) >= TRACES, timeout=60, what="a culprit in every trace"
            )
        except TimeoutError as error:
            raise AssertionError(f"{error}; got {total_unique(sinks)} spans{explain(group)}") from None
        time.sleep(1.0)  # anything duplicated would arrive now

        where = check_delivery(sinks, sent)
        # whole: all spans of a trace went to one replica, and each exactly once
        for trace_id, per_sink in where.items():
            assert len(per_sink) == 1, f"trace {trace_id} was split across replicas: {dict(per_sink)}"
            assert sum(per_sink.values()) == len(sent[trace_id]), f"trace {trace_id} has duplicates"
        # both replicas took a share
        share = Counter(next(iter(per_sink)) for per_sink in where.values())
        assert set(share) == {0, 1}, f"load was not balanced: {dict(share)}"
        # exactly once: one culprit span and one blamed root per trace
        assert set(culprit_counts(sinks).values()) == {1}
        roots = blamed_roots(sinks)
        assert len(roots) == TRACES
        for trace_id, copies in roots.items():
            assert len(copies) == 1 and sc.BLAME_AGENT in copies[0], trace_id
        assert_planted_fault_blamed(sinks)
    finally:
        for sink in sinks:
            sink.stop()


def received_spans(server: BlameServer) -> int:
    """Spans the replica has written to its write-ahead log (and so acknowledged), from /metrics."""
    status, body = http_get(f"http://127.0.0.1:{server.http_port}/metrics")
    assert status == 200
    match = re.search(rb"^otel_blame_processor_received_spans_total (\d+)", body, flags=re.MULTILINE)
    assert match, "the processor's /metrics lacks otel_blame_processor_received_spans_total"
    return int(match.group(1))


def test_scaled_replica_sigkilled_mid_run_loses_no_span(group: ProcessGroup, tmp_path: Path):
    balancer, replicas, sinks = start_scaled(group, tmp_path)
    victim, victim_sink = replicas[1], sinks[1]
    try:
        # Spans flow continuously (short batch delay, paced sender), so the victim always holds
        # traces it has acknowledged but not yet exported (they wait out the quiet period).
        provider, counter = app_provider(
            "e2e-scaled-kill", balancer.otlp_grpc_endpoint, schedule_delay_millis=100
        )
        progress = {"sent": 0}

        def pace(index: int) -> None:
            progress["sent"] = index + 1
            time.sleep(0.03)

        sender = threading.Thread(target=send_failed_traces, args=(provider, TRACES, pace), daemon=True)
        sender.start()

        def in_flight_at_victim() -> int | None:
            if progress["sent"] < TRACES // 3:
                return None
            received = received_spans(victim)
            return received if received - victim_sink.span_count() >= 5 else None

        received_before_kill = wait_until(
            in_flight_at_victim, timeout=120, what="spans in flight at the victim"
        )
        victim.proc.kill()  # SIGKILL: no flush, no goodbye
        exported_before_kill = victim_sink.span_count()
        assert not victim.proc.alive()
        assert progress["sent"] < TRACES, "the kill must happen mid-run"
        # The kill caught acknowledged spans that were not exported yet: only the WAL has them now.
        assert received_before_kill > exported_before_kill
        time.sleep(2.0)  # meanwhile the Collector queues and retries the victim's slice
        victim.restart()  # same ports, same write-ahead log
        sender.join(120)
        assert not sender.is_alive()
        provider.shutdown()
        sent = counter.spans
        assert len(sent) == TRACES
        expected = sum(len(ids) for ids in sent.values())
        try:
            wait_until(
                lambda: total_unique(sinks) >= expected, timeout=180, what=f"{expected} spans downstream"
            )
            wait_until(
                lambda: len(culprit_counts(sinks)) >= TRACES, timeout=60, what="a culprit in every trace"
            )
        except TimeoutError as error:
            raise AssertionError(f"{error}; got {total_unique(sinks)} spans{explain(group)}") from None
        where = check_delivery(sinks, sent)  # every span of every trace arrived
        assert len(where) == TRACES
        # whole even across the crash: the victim's slice stayed with the victim
        assert all(len(per_sink) == 1 for per_sink in where.values())
        roots = blamed_roots(sinks)
        assert len(roots) == TRACES
        unblamed = [t for t, copies in roots.items() if not any(sc.BLAME_AGENT in c for c in copies)]
        assert not unblamed, f"{len(unblamed)} traces reached the downstream without blame"
        assert_planted_fault_blamed(sinks)  # and the right blame, also for traces replayed from the WAL
    finally:
        for sink in sinks:
            sink.stop()


def send_mixed_traces(provider: TracerProvider, count: int) -> set[int]:
    """``count`` runs, every other one failed; returns the indexes of the failed ones."""
    configure(tracer_provider=provider)
    failed = set()
    try:
        for index in range(count):
            ok = index % 2 == 0
            with task(f"ticket-{index}", input=f"Refund order #{index}?", expected_output="refund 20 EUR"):
                record_message("triage", f"Order #{index}: customer asks for a refund of 20 EUR.")
                amount = "20" if ok else "200"
                record_message("researcher", f"Policy lookup: the refundable amount is {amount} EUR.")
                record_message("writer", f"Drafted: we refund {amount} EUR.")
                set_outcome(ok, final_output=f"refund {amount} EUR")
            if not ok:
                failed.add(index)
    finally:
        reset_configuration()
    return failed


def test_tail_sampling_after_otel_blame_keeps_failed_traces_and_drops_the_rest(
    group: ProcessGroup, tmp_path: Path
):
    jaeger = Jaeger(group)
    sampler = Collector(
        group,
        COLLECTOR_CONFIG_DIR / "tail_sampling.yaml",
        "otelcol-tail-sampling",
        {
            "JAEGER_OTLP_ENDPOINT": jaeger.otlp_grpc_endpoint,
            "OTELCOL_DECISION_WAIT": "2s",
            "OTELCOL_SAMPLE_PERCENT": "0",  # so that a kept successful trace would be a bug
        },
    )
    blame = BlameServer(group, "otel-blame", downstream=sampler.otlp_grpc_endpoint, wal_dir=tmp_path / "wal")
    service = f"e2e-tail-sampling-{uuid.uuid4().hex[:8]}"
    provider, counter = app_provider(service, blame.otlp_grpc_endpoint)
    try:
        failed_count = len(send_mixed_traces(provider, 10))
    finally:
        provider.shutdown()
    sent = counter.spans

    def kept() -> list[dict]:
        traces = jaeger.find_traces(service)
        whole = [t for t in traces if {s["spanID"] for s in iter_spans(t)} == sent.get(t["traceID"])]
        return whole if len(whole) >= failed_count else []

    try:
        wait_until(kept, timeout=60, what=f"{failed_count} failed traces in Jaeger")
    except TimeoutError as error:
        raise AssertionError(f"{error}{explain(group)}") from None
    time.sleep(3.0)  # the successful traces were decided at the same time; give any stray one a chance
    traces = jaeger.find_traces(service)
    assert len(traces) == failed_count, "only the failed (blamed) traces are kept"
    for trace in traces:
        spans = list(iter_spans(trace))
        root = next(s for s in spans if not s.get("references"))
        assert jaeger_tags(root)[sc.TASK_OUTCOME] == sc.OUTCOME_FAILURE
        assert sum(1 for s in spans if jaeger_tags(s).get(sc.BLAME_CULPRIT) is True) == 1


def localhost_addresses() -> list[str]:
    """What ``localhost`` resolves to here: 127.0.0.1, and ::1 too on most CI images."""
    return sorted({info[4][0] for info in socket.getaddrinfo("localhost", None, type=socket.SOCK_STREAM)})


def port_free_on(addresses: list[str]) -> int:
    """One TCP port that every address can bind: the DNS resolver uses a single port for all."""
    for _ in range(50):
        port = reserve_port()
        sockets = []
        try:
            for address in addresses:
                family = socket.AF_INET6 if ":" in address else socket.AF_INET
                sock = socket.socket(family, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind((address, port))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        return port
    raise AssertionError(
        f"localhost resolves to {addresses} here but no port binds on all of them; the Collector's "
        "DNS resolver would send traces to an address where no replica can listen"
    )


DUAL_STACK_HOSTS = "127.0.0.1 localhost\n::1 localhost\n"


def dual_stack_wrapper(tmp_path: Path) -> list[str] | None:
    """argv that runs a command in a private mount namespace whose /etc/hosts maps ``localhost`` to
    both 127.0.0.1 and ::1 (as most CI images do), or None where that cannot be done (not root)."""
    hosts = tmp_path / "hosts"
    hosts.write_text(DUAL_STACK_HOSTS)
    wrapper = ["unshare", "--mount", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts)]
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(
        [*wrapper, "cat", "/etc/hosts"], capture_output=True, text=True, timeout=30, check=False
    )
    return wrapper if probe.returncode == 0 and probe.stdout == DUAL_STACK_HOSTS else None


@pytest.mark.parametrize("hosts", ["this-host", "dual-stack"])
def test_scaled_dns_resolver_routes_to_the_resolved_replicas(group: ProcessGroup, tmp_path: Path, hosts: str):
    """scaled-dns.yaml for real: the replica list is what DNS says ``localhost`` is. One replica
    listens on each resolved address (127.0.0.1, and ::1 where localhost maps to it too) on the
    one port the resolver uses; every trace is attributed once and arrives whole. ``dual-stack``
    gives the Collector a hosts file where localhost is both, whatever this host says."""
    wrapper: list[str] = []
    if hosts == "dual-stack":
        found = dual_stack_wrapper(tmp_path)
        if found is None:
            pytest.skip("needs root (unshare --mount) to give the Collector its own /etc/hosts")
        wrapper, addresses = found, ["127.0.0.1", "::1"]
    else:
        addresses = localhost_addresses()
    port = port_free_on(addresses)
    sinks = [RecordingOTLPSink().start() for _ in addresses]
    try:
        for number, (address, sink) in enumerate(zip(addresses, sinks, strict=True)):
            BlameServer(
                group,
                f"otel-blame-dns-{number}",
                downstream=sink.endpoint,
                wal_dir=tmp_path / f"wal-{number}",
                grpc_host=address,
                grpc_port=port,
            )
        balancer = Collector(
            group,
            COLLECTOR_CONFIG_DIR / "scaled-dns.yaml",
            "otelcol-dns",
            {"OTEL_BLAME_REPLICAS_DNS_NAME": "localhost", "OTEL_BLAME_REPLICAS_PORT": str(port)},
            wrapper=wrapper,
        )
        provider, counter = app_provider("e2e-scaled-dns", balancer.otlp_grpc_endpoint)
        try:
            send_failed_traces(provider, 20)
        finally:
            provider.shutdown()
        expected = sum(len(ids) for ids in counter.spans.values())
        try:
            wait_until(
                lambda: total_unique(sinks) >= expected, timeout=60, what=f"{expected} spans downstream"
            )
            wait_until(lambda: len(culprit_counts(sinks)) >= 20, timeout=30, what="a culprit in every trace")
        except TimeoutError as error:
            raise AssertionError(f"{error}; got {total_unique(sinks)} spans{explain(group)}") from None
        check_delivery(sinks, counter.spans)
        # 20 traces hashed over the replicas: each resolved address got some (all to one: p = 2**-19)
        assert_planted_fault_blamed(sinks)
        per_address = {address: len(sink.spans()) for address, sink in zip(addresses, sinks, strict=True)}
        assert all(per_address.values()), per_address
    finally:
        for sink in sinks:
            sink.stop()
