"""Failing dependencies in a trace: the tool, API and model-provider spans that failed.

A step whose tool call got an HTTP 503, whose model provider timed out, or whose tool span ended
with an error status failed as a victim: the agent's own output was not what went wrong. This
module finds those spans (any span of the trace, not only the ones that become steps) and says
which step each belongs to: the span itself when it is a step, else its nearest step ancestor.

What counts (any one): an HTTP status 429 or 5xx (``http.response.status_code`` or the older
``http.status_code``); a gRPC status DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED or UNAVAILABLE; a
timeout (``error.type``, an exception type or an error message that says so); an LLM span with an
error (a provider error); a tool span with an error. Code the agent wrote that fails is not a
dependency failure: that is the agent's own output; nor is a tool called with arguments it does not
take (Python's ``TypeError: … unexpected keyword argument``, a missing or surplus argument): the
caller made that mistake.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from opentelemetry.proto.trace.v1.trace_pb2 import Status

from otel_blame import semconv as sc
from otel_blame.trajectory import DependencyFailure

from .model import Convention, Kind, SpanView, TraceGraph
from .otlp import attributes_to_dict
from .text import text

_TIMEOUT = re.compile(r"time[ds]?[ _-]?out|deadline[ _-]?exceeded", re.IGNORECASE)
# a call that did not fit the tool's signature: the caller's mistake, not the tool's failure
_CALL_DID_NOT_FIT = re.compile(
    r"unexpected keyword argument|missing \d+ required (?:positional |keyword-only )?argument"
    r"|takes (?:from )?\d+ (?:to \d+ )?positional arguments? but \d+ (?:were|was) given"
    r"|got multiple values for argument"
)
_KIND_RANK = {"http_status": 0, "timeout": 1, "provider_error": 2, "tool_error": 3}
_GRPC_FAILING = {4: "DEADLINE_EXCEEDED", 8: "RESOURCE_EXHAUSTED", 14: "UNAVAILABLE"}


def _http_status(view: SpanView) -> int | None:
    for key in (sc.HTTP_RESPONSE_STATUS_CODE, sc.HTTP_STATUS_CODE):
        value = view.attributes.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.isdigit():
            return int(value)
    return None


def _error_texts(view: SpanView) -> Iterable[str]:
    yield text(view.attributes.get(sc.ERROR_TYPE))
    yield view.span.status.message
    for event in view.span.events:
        if event.name == sc.EXCEPTION_EVENT:
            attrs = attributes_to_dict(event.attributes)
            yield text(attrs.get(sc.EXCEPTION_TYPE))
            yield text(attrs.get(sc.EXCEPTION_MESSAGE))


def _has_error(view: SpanView) -> bool:
    return (
        view.span.status.code == Status.STATUS_CODE_ERROR
        or sc.ERROR_TYPE in view.attributes
        or any(event.name == sc.EXCEPTION_EVENT for event in view.span.events)
    )


def _service_name(view: SpanView) -> str:
    """The service a client span called: peer.service, server.address, the URL's host, the span name."""
    for key in (sc.PEER_SERVICE, sc.SERVER_ADDRESS):
        if view.attributes.get(key):
            return text(view.attributes[key])
    for key in (sc.URL_FULL, sc.HTTP_URL):
        if view.attributes.get(key):
            host = urlsplit(text(view.attributes[key])).hostname
            if host:
                return host
    return view.span.name


def failure_of(view: SpanView, tool_name: str | None) -> tuple[str, str, str] | None:
    """(kind, name, detail) when this span is a failing dependency, else None."""
    name = tool_name or (_provider(view) if view.kind == Kind.LLM else None) or _service_name(view)
    status = _http_status(view)
    if status is not None and (status == 429 or 500 <= status <= 599):
        return "http_status", name, f"HTTP {status}"
    grpc = view.attributes.get(sc.RPC_GRPC_STATUS_CODE)
    if isinstance(grpc, int) and grpc in _GRPC_FAILING:
        kind = "timeout" if grpc == 4 else "http_status"
        return kind, name, f"gRPC {_GRPC_FAILING[grpc]}"
    if view.kind in (Kind.CODE, Kind.AGENT, Kind.WORKFLOW) or not _has_error(view):
        # code the agent wrote failing is the agent's own output; an agent span's error says who
        # failed, not what it called (its tool, model and HTTP spans below it say that)
        return None
    errors = [found for found in _error_texts(view) if found]
    if view.kind == Kind.TOOL and any(_CALL_DID_NOT_FIT.search(found) for found in errors):
        return None
    detail = (errors[0] if errors else "error")[:200]
    if any(_TIMEOUT.search(found) for found in errors):
        return "timeout", name, detail
    if view.kind == Kind.LLM:
        return "provider_error", name, detail
    if view.kind == Kind.TOOL and tool_name:
        return "tool_error", tool_name, detail
    return None


def _provider(view: SpanView) -> str | None:
    for key in (sc.GEN_AI_PROVIDER_NAME, sc.GEN_AI_SYSTEM, sc.GEN_AI_REQUEST_MODEL):
        if view.attributes.get(key):
            return text(view.attributes[key])
    return None


def find_dependency_failures(
    graph: TraceGraph,
    step_of: dict[bytes, int],
    conventions: tuple[Convention, ...],
) -> list[DependencyFailure]:
    """Every failing dependency span, with the step it happened in, in step order.

    ``step_of`` maps a step's span id to its position. A failing span inside a tool span names that
    tool (an HTTP 503 under ``execute_tool web_search`` is ``web_search`` failing)."""
    found: list[DependencyFailure] = []
    for view in graph.views:
        tool_view = next(
            (v for v in (view, *graph.ancestors(view)) if v.kind == Kind.TOOL),
            None,
        )
        tool_name = _tool_name(tool_view, conventions) if tool_view is not None else None
        failure = failure_of(view, tool_name)
        if failure is None:
            continue
        step = step_of.get(view.span_id)
        if step is None:
            step = next((step_of[a.span_id] for a in graph.ancestors(view) if a.span_id in step_of), None)
        kind, name, detail = failure
        found.append(
            DependencyFailure(name=name, kind=kind, detail=detail, step=step, span_id=view.span_id.hex())
        )
    found.sort(
        key=lambda item: (item.step if item.step is not None else 1 << 30, item.name, _KIND_RANK[item.kind])
    )
    return _first_per_step_and_name(found)


def _tool_name(view: SpanView, conventions: tuple[Convention, ...]) -> str | None:
    for convention in conventions:
        name = convention.tool_name(view)
        if name:
            return name
    return None


def _first_per_step_and_name(found: list[DependencyFailure]) -> list[DependencyFailure]:
    """A tool span and the HTTP span under it that both failed are one failure, not two."""
    seen: set[tuple[int | None, str]] = set()
    out = []
    for item in found:
        if (item.step, item.name) in seen:
            continue
        seen.add((item.step, item.name))
        out.append(item)
    return out
