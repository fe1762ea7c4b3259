"""Instrumentation overhead: a scripted classic-autogen group chat, plain vs traced, in one run.

Modes (interleaved, each repeated ``--repetitions`` times, median reported):

* ``plain``      no tracing at all (the baseline);
* ``otel_blame`` OtelBlameInstrumentor on, BatchSpanProcessor + OTLP/gRPC exporter to a loopback sink:
                 every agent turn an ``invoke_agent`` envelope span, every message a step;
* ``ag2``        AG2's own tracing (``autogen.opentelemetry.instrument_agent`` on every agent), same
                 exporter pipeline: the baseline a user would otherwise pick;
* ``openinference`` OpenInference's AG2 instrumentation (``openinference-instrumentation-ag2``, the
                 ``bench`` extra), same exporter pipeline; left out with a note when not installed.

The chat is a round-robin group chat of four LLM agents; every reply comes from the scripted
OpenAI-compatible server over loopback HTTP through the real ``openai`` client (``--llm http``), or
from a registered Python reply function with no HTTP at all (``--llm inline``, the harshest ratio:
nothing but AG2's own bookkeeping to hide behind). Only the chat is timed; the exporter is
flushed afterwards and the sink's span count is checked so a broken pipeline cannot look fast.

    .venv/bin/python bench/instrumentation_overhead.py --messages 200 --repetitions 7
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import multiprocessing
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_blame.demo.scripted_llm import ScriptedLLM
from otel_blame.demo.span_recorder import RecordingOTLPSink
from otel_blame.instrumentation import OtelBlameInstrumentor, configure, reset_configuration

ALL_MODES = ("plain", "otel_blame", "ag2", "openinference")


def _available_modes() -> tuple[str, ...]:
    import importlib.util

    if importlib.util.find_spec("openinference.instrumentation.ag2") is None:
        print("# openinference-instrumentation-ag2 not installed (pip install -e '.[bench]'): mode left out")
        return ALL_MODES[:3]
    return ALL_MODES


MODES = _available_modes()
AGENTS = ("planner", "researcher", "coder", "reviewer")


def _reply_text(turn: int) -> str:
    # ~400 characters, a realistic short agent message
    return f"Turn {turn}: " + "I have checked the previous step and extend the analysis accordingly. " * 5


class SinkProcess:
    """The loopback OTLP sink in a child process, so its decoding does not compete for our GIL."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve_sink, args=(child,), daemon=True)

    def __enter__(self) -> SinkProcess:
        self._process.start()
        if not self._conn.poll(60):
            raise RuntimeError("the OTLP sink process did not start")
        self.endpoint: str = self._conn.recv()
        return self

    def _ask(self, command: str) -> Any:
        self._conn.send(command)
        return self._conn.recv()

    def span_count(self) -> int:
        return int(self._ask("count"))

    def clear(self) -> None:
        self._ask("clear")

    def __exit__(self, *exc: object) -> None:
        self._ask("stop")
        self._process.join(timeout=10)


def _serve_sink(conn: Any) -> None:
    with RecordingOTLPSink() as sink:
        conn.send(sink.endpoint)
        while True:
            command = conn.recv()
            if command == "count":
                conn.send(sink.span_count())
            elif command == "clear":
                sink.clear()
                conn.send(True)
            else:
                conn.send(True)
                return


@dataclass
class RunResult:
    mode: str
    seconds: float  # wall time of the chat alone
    cpu_seconds: float  # CPU time of this process (all threads) for the chat plus flushing every span
    repetition: int
    messages: int
    spans_exported: int


def _provider(sink: SinkProcess) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": "overhead-bench"}))
    exporter = OTLPSpanExporter(endpoint=sink.endpoint, insecure=True, timeout=30)
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=8192))
    return provider


def _build_chat(llm: ScriptedLLM | None, messages: int) -> tuple[Any, Any, list[Any]]:
    from autogen import Agent, ConversableAgent, GroupChat, GroupChatManager

    agents = []
    for name in AGENTS:
        if llm is None:
            agent = ConversableAgent(name, llm_config=False, human_input_mode="NEVER")
            counter = {"turn": 0}

            def reply(
                recipient: Any, messages: Any = None, sender: Any = None, config: Any = None, c=counter
            ):
                c["turn"] += 1
                return True, _reply_text(c["turn"])

            agent.register_reply([Agent, None], reply)
        else:
            config = {
                "config_list": [
                    {
                        "model": "scripted-model",
                        "base_url": llm.base_url,
                        "api_key": "bench",
                        "price": [0.0, 0.0],
                    }
                ],
                "cache_seed": None,
            }
            agent = ConversableAgent(name, llm_config=config, human_input_mode="NEVER")
        agents.append(agent)
    chat = GroupChat(agents, messages=[], max_round=messages, speaker_selection_method="round_robin")
    manager = GroupChatManager(chat, llm_config=False, is_termination_msg=lambda m: False)
    return agents[0], manager, [*agents, manager]


def run_once(
    mode: str,
    llm: ScriptedLLM | None,
    sink: SinkProcess,
    messages: int,
    provider: TracerProvider | None,
    repetition: int = -1,
) -> RunResult:
    """One timed chat. The provider (and its gRPC channel) lives across runs, as in a real app."""
    from autogen.opentelemetry import instrument_agent

    instrumentor: Any = OtelBlameInstrumentor()
    if mode == "otel_blame":
        configure(tracer_provider=provider)
        instrumentor.instrument()
    elif mode == "openinference":
        from openinference.instrumentation.ag2 import AG2Instrumentor

        instrumentor = AG2Instrumentor()
        instrumentor.instrument(tracer_provider=provider)
    try:
        starter, manager, everyone = _build_chat(llm, messages)
        if mode == "ag2":
            for agent in everyone:
                instrument_agent(agent, tracer_provider=provider)
        sink.clear()
        with contextlib.redirect_stdout(io.StringIO()):
            cpu_started = time.process_time()
            started = time.perf_counter()
            result = starter.initiate_chat(manager, message="Analyse the quarterly numbers.", silent=True)
            seconds = time.perf_counter() - started
    finally:
        if mode == "otel_blame":
            instrumentor.uninstrument()
            reset_configuration()
        elif mode == "openinference":
            instrumentor.uninstrument()
    exported = 0
    if provider is not None:
        provider.force_flush(30_000)
        exported = sink.span_count()
    cpu_seconds = time.process_time() - cpu_started
    count = len(result.chat_history)
    # one step per message, the task root and the group chat manager's turn (an envelope, no step)
    if mode == "otel_blame" and exported != count + 2:
        raise RuntimeError(f"expected {count + 2} spans at the sink, got {exported}")
    return RunResult(mode, seconds, cpu_seconds, repetition, count, exported)


@dataclass
class ModeSummary:
    mode: str
    messages: int
    spans_exported: int
    wall_median: float
    wall_added_us: float  # median over repetitions of (mode - plain) in the same repetition, per message
    wall_ratio: float  # median over repetitions of mode / plain in the same repetition
    cpu_median: float
    cpu_added_us: float
    cpu_ratio: float


def summarise(results: list[RunResult]) -> list[ModeSummary]:
    """Paired statistics: each traced run is compared with the plain run of its own repetition."""
    plain = {r.repetition: r for r in results if r.mode == "plain"}
    out = []
    for mode in MODES:
        runs = [r for r in results if r.mode == mode]
        messages = runs[0].messages
        out.append(
            ModeSummary(
                mode=mode,
                messages=messages,
                spans_exported=runs[0].spans_exported,
                wall_median=statistics.median(r.seconds for r in runs),
                wall_added_us=statistics.median(
                    (r.seconds - plain[r.repetition].seconds) / messages * 1e6 for r in runs
                ),
                wall_ratio=statistics.median(r.seconds / plain[r.repetition].seconds for r in runs),
                cpu_median=statistics.median(r.cpu_seconds for r in runs),
                cpu_added_us=statistics.median(
                    (r.cpu_seconds - plain[r.repetition].cpu_seconds) / messages * 1e6 for r in runs
                ),
                cpu_ratio=statistics.median(r.cpu_seconds / plain[r.repetition].cpu_seconds for r in runs),
            )
        )
    return out


_MICRO_CHUNK = 2_000


def _turn(agent: str, text: str) -> None:
    """One agent turn in the envelope form: the span opened and made current, answered, ended."""
    from otel_blame.instrumentation import agent_turn

    with agent_turn(agent) as turn:
        turn.answer(text)


def _per_call_us(provider: Any, calls: int, envelope: bool = False) -> float:
    from otel_blame.instrumentation import record_message, task

    configure(tracer_provider=provider)
    text = _reply_text(1)
    if envelope:
        record_message = _turn  # noqa: F811 - the same loop, one agent turn per message
    try:
        with task("micro"):
            for i in range(200):  # warm-up
                record_message(AGENTS[i % 4], text)
            flush = getattr(provider, "force_flush", None)
            if flush is not None:
                flush(30_000)
            seconds = 0.0
            # chunks well below the batch queue (8192), each flushed inside the timing: every span
            # is exported and counted, none dropped by a full queue
            for chunk_start in range(0, calls, _MICRO_CHUNK):
                started = time.process_time()
                for i in range(chunk_start, min(calls, chunk_start + _MICRO_CHUNK)):
                    record_message(AGENTS[i % 4], text)
                if flush is not None:
                    flush(30_000)
                seconds += time.process_time() - started
    finally:
        if hasattr(provider, "force_flush"):
            provider.force_flush(30_000)
        reset_configuration()
    return seconds / calls * 1e6


def _bare_span_us(calls: int) -> float:
    """The SDK alone: a span with the same eight attributes, no processor."""
    tracer = TracerProvider().get_tracer("bench")
    attributes = {f"attribute.{i}": "v" * 40 for i in range(7)} | {"index": 1}
    started = time.process_time()
    for _ in range(calls):
        tracer.start_span("invoke_agent a", attributes=attributes).end()
    return (time.process_time() - started) / calls * 1e6


# a classic-autogen step span before the lighter-spans change (issue 20), the values as sent
_STEP_ATTRIBUTES: dict[str, Any] = {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.agent.name": "researcher",
    "gen_ai.conversation.id": "9f0c5a2e4b1d4e7f8a6b3c2d1e0f9a8b",
    "otel_blame.instrumentation.source": "autogen",
    "otel_blame.step.role": "assistant",
    "otel_blame.step.kind": "message",
    "gen_ai.output.messages": '[{"role": "assistant", "parts": [{"type": "text", "content": "'
    + _reply_text(1)
    + '"}], "name": "researcher"}]',
    "otel_blame.step.index": 17,
}
MOVED_OFF_STEPS = (
    "gen_ai.conversation.id",
    "otel_blame.instrumentation.source",
    "otel_blame.step.role",
    "otel_blame.step.kind",
)


def _span_cost_us(attributes: dict[str, Any], calls: int) -> float:
    """CPU µs to make, end and OTLP-encode one span with ``attributes`` (what the exporter thread adds)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

    finished: list[ReadableSpan] = []

    class Keep(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            finished.append(span)

    provider = TracerProvider()
    provider.add_span_processor(Keep())
    tracer = provider.get_tracer("bench")
    started = time.process_time()
    for _ in range(calls // 512 + 1):
        for _ in range(512):
            tracer.start_span("invoke_agent researcher", attributes=attributes).end()
        encode_spans(finished).SerializePartialToString()
        finished.clear()
    return (time.process_time() - started) / ((calls // 512 + 1) * 512) * 1e6


def attribute_costs(calls: int) -> dict[str, float]:
    """CPU µs each attribute of a step span costs (span made, ended and encoded with it, minus
    without it), and the whole span before and after the change. Every variant is timed once per
    round, the rounds interleaved, and each keeps its best round (the least disturbed by others)."""
    light = {k: v for k, v in _STEP_ATTRIBUTES.items() if k not in MOVED_OFF_STEPS}
    light["gen_ai.output.messages"] = light["gen_ai.output.messages"].replace(', "name": "researcher"', "")
    variants = {"before": _STEP_ATTRIBUTES, "now": light} | {
        key: {k: v for k, v in _STEP_ATTRIBUTES.items() if k != key} for key in _STEP_ATTRIBUTES
    }
    best = {name: float("inf") for name in variants}
    for _ in range(5):
        for name, attributes in variants.items():
            best[name] = min(best[name], _span_cost_us(attributes, calls))
    costs = {"the whole step span, as before (8 attributes)": best["before"]}
    costs |= {key: best["before"] - best[key] for key in _STEP_ATTRIBUTES}
    costs["the whole step span, now (4 attributes)"] = best["now"]
    return costs


def micro_breakdown(provider: TracerProvider, calls: int) -> dict[str, float]:
    """CPU µs (this process, all threads: the exporter's too) per ``record_message`` of a 400-character
    message, split into where the time goes. CPU time, not wall time: on a shared machine the wall
    clock also counts the time other processes hold the cores."""
    from opentelemetry.trace import NoOpTracerProvider

    return {
        "otel-blame's own work (no-op tracer: coercion, cap, redaction, JSON, step index)": _per_call_us(
            NoOpTracerProvider(), calls
        ),
        "the same for one agent turn (agent_turn: envelope opened, made current, answered, ended)": (
            _per_call_us(NoOpTracerProvider(), calls, envelope=True)
        ),
        "SDK span alone (same 8 attributes, no processor)": _bare_span_us(calls),
        "record_message, SDK tracer, no span processor": _per_call_us(TracerProvider(), calls),
        "record_message, BatchSpanProcessor + OTLP/gRPC exporter (export included)": _per_call_us(
            provider, calls
        ),
        "agent_turn, BatchSpanProcessor + OTLP/gRPC exporter (export included)": _per_call_us(
            provider, calls, envelope=True
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200, help="messages per group chat (default 200)")
    parser.add_argument("--repetitions", type=int, default=7, help="runs per mode, interleaved (default 7)")
    parser.add_argument("--llm", choices=("http", "inline", "both", "none"), default="both")
    parser.add_argument("--micro-calls", type=int, default=20_000)
    args = parser.parse_args(argv)
    if args.messages < 2 or args.repetitions < 1:
        parser.error("--messages must be >= 2 and --repetitions >= 1")
    logging.getLogger("autogen").setLevel(logging.ERROR)

    print(f"# python {platform.python_version()}, {args.messages} messages, {args.repetitions} repetitions")
    with SinkProcess() as sink:
        providers: dict[str, TracerProvider | None] = {mode: _provider(sink) for mode in MODES}
        providers["plain"] = None
        kinds = {"both": ("http", "inline"), "none": ()}.get(args.llm, (args.llm,))
        for llm_kind in kinds:
            results: list[RunResult] = []
            with ScriptedLLM(lambda request: _reply_text(len(request.get("messages", [])))) as llm:
                use: ScriptedLLM | None = llm if llm_kind == "http" else None
                for mode in MODES:  # warm-up: imports, HTTP and gRPC connections
                    run_once(mode, use, sink, args.messages, providers[mode])
                shuffle = random.Random(7)
                for repetition in range(args.repetitions):
                    order = list(MODES)
                    shuffle.shuffle(order)  # no mode always runs first
                    for mode in order:
                        results.append(run_once(mode, use, sink, args.messages, providers[mode], repetition))
            print(f"\n## llm={llm_kind}")
            print(
                "| mode | messages | spans exported | wall median (s) | wall: added µs / message "
                "| wall ratio | CPU median (s) | CPU: added µs / message | CPU ratio |"
            )
            print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
            for s in summarise(results):
                print(
                    f"| {s.mode} | {s.messages} | {s.spans_exported} | {s.wall_median:.4f} "
                    f"| {s.wall_added_us:+.1f} | {s.wall_ratio:.3f} | {s.cpu_median:.4f} "
                    f"| {s.cpu_added_us:+.1f} | {s.cpu_ratio:.3f} |"
                )
        print("\n| a step span's attribute | CPU µs per span (made, ended, OTLP-encoded) |\n| --- | --- |")
        for label, cost in attribute_costs(args.micro_calls // 4).items():
            print(f"| {label} | {cost:.2f} |")
        print("\n| record_message of a 400-character message | CPU µs per call |\n| --- | --- |")
        for label, micro in micro_breakdown(providers["otel_blame"], args.micro_calls).items():
            print(f"| {label} | {micro:.1f} |")
        for provider in providers.values():
            if provider is not None:
                provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
