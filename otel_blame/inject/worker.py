"""The process that runs the app: one per campaign, replaced when a run hangs or kills it.

It configures otel-blame's instrumentation with its own TracerProvider (OTLP to the processor, plus
an in-memory copy of each run's spans), imports the app once, then runs one task per request
received on its pipe, with the run's :class:`~otel_blame.inject.injector.Injector` installed on the
message path. The app's stdout and stderr go to a file, not the campaign's terminal. Everything it
sends back is plain data (picklable).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import os
import sys
import threading
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from otel_blame import semconv as sc

DEMO_APP = "otel_blame.inject.demo_app:run_task"
WORKER_AUTHKEY_VARIABLE = "OTEL_BLAME_INJECT_AUTHKEY"


class AppLoadError(Exception):
    """The ``module:function`` cannot be imported or is not callable."""


def load_app(reference: str) -> Callable[..., Any]:
    """``module:function`` (``demo`` for the built-in app) -> the callable."""
    if reference == "demo":
        reference = DEMO_APP
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise AppLoadError(f"--app {reference!r}: expected module:function (or 'demo')")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # the app's own import error, whatever it is
        what = f"{type(error).__name__}: {error}"
        raise AppLoadError(f"--app {reference}: cannot import {module_name}: {what}") from None
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise AppLoadError(f"--app {reference}: {module_name} has no attribute {attribute}")
    if not callable(target):
        raise AppLoadError(f"--app {reference}: {attribute} is not callable")
    return target


def takes_seed(function: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return "seed" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


class RunSpans(SpanProcessor):
    """Every span the app ends, by trace, until :meth:`take`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: dict[int, list[ReadableSpan]] = defaultdict(list)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self._spans[span.context.trace_id].append(span)

    def take(self) -> dict[int, list[ReadableSpan]]:
        with self._lock:
            spans, self._spans = dict(self._spans), defaultdict(list)
        return spans

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


@dataclass(frozen=True)
class WorkerSetup:
    app: str
    endpoint: str  # gRPC HOST:PORT, or an http(s):// base URL of `otel-blame serve`
    service_name: str
    log_path: str | None  # the app's stdout/stderr; None = discard
    token: str | None = None


def _exporter(setup: WorkerSetup) -> Any:
    if setup.endpoint.startswith(("http://", "https://")):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HTTPExporter

        headers = {"Authorization": f"Bearer {setup.token}"} if setup.token else None
        return HTTPExporter(endpoint=f"{setup.endpoint.rstrip('/')}/v1/traces", headers=headers)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=setup.endpoint, insecure=True)


def _root_of(spans: list[ReadableSpan]) -> ReadableSpan | None:
    roots = [s for s in spans if s.parent is None]
    workflow = [
        s for s in roots if (s.attributes or {}).get(sc.GEN_AI_OPERATION_NAME) == sc.OP_INVOKE_WORKFLOW
    ]
    return (workflow or roots or [None])[-1]


def _trajectory(spans: list[ReadableSpan]) -> dict[str, Any] | None:
    from otel_blame.conventions import NoTrajectory, sdk_spans_to_proto, trajectory_from_spans

    try:
        return trajectory_from_spans(sdk_spans_to_proto(spans)).model_dump(mode="json")
    except NoTrajectory:
        return None


def _describe(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {error}{where}"


def run_one(app: Callable[..., Any], spec: dict[str, Any], provider: Any, spans: RunSpans) -> dict[str, Any]:
    from otel_blame.inject.faults import FaultKind
    from otel_blame.inject.injector import FaultPlan, Injector
    from otel_blame.inject.truth import take_declared
    from otel_blame.instrumentation.interception import intercept_messages

    fault = spec.get("fault")
    plan = None
    if fault:
        kind = FaultKind(fault["kind"])
        plan = FaultPlan(
            kind,
            fault["agent"],
            fault["step"],
            fault["seed"],
            bool(fault.get("exact")),
            tuple(fault.get("tools") or ()),
        )
    injector = Injector(plan)
    take_declared()  # a declaration left by an earlier run that ended abnormally is not this run's
    error: str | None = None
    with intercept_messages(injector):
        try:
            if spec.get("pass_seed"):
                app(seed=spec["app_seed"])
            else:
                app()
        except BaseException as raised:  # the app's failure is a finding of the run, not the worker's
            if isinstance(raised, KeyboardInterrupt):
                raise
            error = _describe(raised)
    declared = take_declared()
    provider.force_flush()
    by_trace = spans.take()
    roots = [(trace_id, _root_of(trace_spans)) for trace_id, trace_spans in by_trace.items()]
    roots = [(trace_id, root) for trace_id, root in roots if root is not None]
    trace_id = outcome = trajectory = None
    if roots:
        trace_id_int, root = roots[-1]
        trace_id = f"{trace_id_int:032x}"
        outcome = (root.attributes or {}).get(sc.TASK_OUTCOME)
        trajectory = _trajectory(by_trace[trace_id_int])
    return {
        "error": error,
        "trace_id": trace_id,
        "traces": len(roots),
        "outcome": outcome,
        "planted": injector.planted.to_dict() if injector.planted else None,
        "declared": declared[0].to_dict() if declared else None,
        "seen": [[m.agent, m.step, m.kind, m.text, m.tool_name] for m in injector.seen],
        "trajectory": trajectory,
    }


def worker_main(connection: Any, setup: WorkerSetup) -> None:
    """The worker process's entry point: set up, say ``ready`` (or why not), then serve runs."""
    log = open(setup.log_path, "a", encoding="utf-8") if setup.log_path else open(os.devnull, "w")  # noqa: SIM115
    sys.stdout = sys.stderr = log
    logging.basicConfig(stream=log, level=logging.WARNING)
    logging.getLogger("autogen.oai.client").setLevel(logging.ERROR)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # `--app mymodule:run` from the directory the campaign runs in
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from otel_blame.instrumentation import OtelBlameInstrumentor, configure

        provider = TracerProvider(resource=Resource.create({"service.name": setup.service_name}))
        spans = RunSpans()
        provider.add_span_processor(spans)
        provider.add_span_processor(BatchSpanProcessor(_exporter(setup), schedule_delay_millis=200))
        configure(tracer_provider=provider)
        OtelBlameInstrumentor().instrument(tracer_provider=provider)
        app = load_app(setup.app)
    except BaseException as error:
        connection.send(
            {"ready": False, "error": str(error) if isinstance(error, AppLoadError) else _describe(error)}
        )
        return
    declared = getattr(sys.modules.get(getattr(app, "__module__", "") or ""), "FAULTS", None) or ()
    connection.send({"ready": True, "pass_seed": takes_seed(app), "faults": [str(kind) for kind in declared]})
    try:
        while True:
            try:
                spec = connection.recv()
            except EOFError:
                break
            if spec is None:
                break
            result = run_one(app, spec, provider, spans)
            with contextlib.suppress(BrokenPipeError, OSError):
                connection.send(result)
    finally:
        provider.shutdown()
        log.flush()


def main(argv: list[str]) -> None:
    """``python -m otel_blame.inject.worker HOST:PORT``: a worker in another environment's interpreter
    (CrewAI's virtualenv), connected back to the campaign that started it."""
    from multiprocessing.connection import Client

    host, _, port = argv[0].rpartition(":")
    authkey = bytes.fromhex(os.environ.pop(WORKER_AUTHKEY_VARIABLE))
    connection = Client((host, int(port)), authkey=authkey)
    setup = connection.recv()
    worker_main(connection, setup)


if __name__ == "__main__":
    main(sys.argv[1:])
