"""Saved runs on disk become a Trajectory: conversation JSON or an OTLP JSON export of one trace.

Formats, detected from the content (not the file name):

- conversation JSON: ``{"history": [...]}``, ``{"conversation": [...]}`` or ``{"messages": [...]}``
  (Who&When logs are this format with extra annotation keys), or a bare list of messages. Each
  message has ``content`` (a string or OpenAI / Anthropic content parts) and a speaker in ``name`` /
  ``agent`` / ``sender`` / ``role``; the tool calls it makes (OpenAI ``tool_calls``, Anthropic
  ``tool_use`` parts) are part of its text, as ``tool_call NAME(ARGUMENTS)``.
- a span-tree export (``{"trace_id", "spans": [...]}`` with children nested in ``child_spans``, as
  TRAIL and trace viewers save them): converted to OTLP (:mod:`otel_blame.span_tree`) and read like
  the OTLP formats below.
- OTLP JSON: an ExportTraceServiceRequest (``{"resourceSpans": [...]}``), the Collector file
  exporter's one-request-per-line output, or Jaeger's ``/api/v3/traces`` answer
  (``{"result": {"resourceSpans": [...]}}``). These go through the processor's own
  ``otel_blame.conventions`` so a file and a live trace give the same Trajectory.

Any of them may be gzipped (``.gz``): the content is recognised by its magic bytes, not its name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from otel_blame.attribution.result import Attribution, Candidate
from otel_blame.trajectory import (
    Outcome,
    Step,
    StepKind,
    Task,
    Trajectory,
    name_from_input,
    stated_final_answer,
)

# "Orchestrator (thought)", "Orchestrator (-> WebSurfer)": the speaker is the part before " (".
_SPEAKER_SUFFIX = re.compile(r"\s*\((?:[^()]*)\)\s*$")
# AutoGen's code executor reply: "exitcode: 1 (execution failed)\nCode output: ..."
_EXITCODE = re.compile(r"^\s*exitcode:\s*(-?\d+)", re.IGNORECASE)
_NO_CODE_REPLY = re.compile(r"^\s*There is no code from the last \d+ message", re.IGNORECASE)
_GENERIC_ROLES = {"user", "assistant", "system", "human", "tool", "function", "developer", "ai"}
_TOOL_ROLES = {"tool", "function", "ipython"}


# where a conversation file keeps its messages, in order of preference
CONVERSATION_KEYS = ("history", "conversation", "messages")


class TrajectoryFormatError(ValueError):
    """The file is not a format otel-blame can read; the message says what was expected."""


EXPECTED_FORMATS = (
    'Expected a conversation ({"history": [...]}, {"conversation": [...]} or {"messages": [...]}, Who&When '
    "logs included), "
    'an OTLP JSON trace export ({"resourceSpans": [...]}, Collector file exporter lines, or Jaeger '
    '/api/v3/traces output), or a span tree ({"spans": [...]} with nested "child_spans"); any of them '
    "may be gzipped."
)


def _json_error(source: str, error: json.JSONDecodeError, line_offset: int = 0) -> TrajectoryFormatError:
    """``FILE: not valid JSON at line L, column C: why. Expected …`` (no raw decoder text)."""
    return TrajectoryFormatError(
        f"{source}: not valid JSON at line {error.lineno + line_offset}, column {error.colno}: "
        f"{error.msg}. {EXPECTED_FORMATS}"
    )


def normalise_agent(label: str) -> str:
    """``Orchestrator (-> WebSurfer)`` -> ``Orchestrator``; other labels unchanged but stripped."""
    label = label.strip()
    stripped = _SPEAKER_SUFFIX.sub("", label).strip()
    return stripped or label


def _call_text(name: Any, arguments: Any) -> str:
    """A call as the conventions layer writes it into a step (one rendering for spans and files). The
    conventions package is imported on the first call only: a file without calls does not load it."""
    from otel_blame.conventions.text import tool_call_text

    return tool_call_text(str(name or ""), arguments)


def _part_text(part: Any) -> str:
    """One content part: OpenAI and Anthropic text parts, Anthropic ``tool_use`` / ``tool_result``."""
    if not isinstance(part, Mapping):
        return str(part)
    kind = part.get("type")
    if kind == "tool_use":
        return _call_text(part.get("name"), part.get("input"))
    if kind == "tool_result":
        return _content_text(part.get("content"))
    for key in ("text", "content", "output"):
        if part.get(key) is not None:
            return _content_text(part[key])
    return ""


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "\n".join(text for text in (_part_text(part) for part in content) if text)
    return json.dumps(content, ensure_ascii=False)


def _message_text(message: Mapping[str, Any]) -> str:
    """A message's content and the tool calls it makes (OpenAI ``tool_calls`` / ``function_call``):
    a call is often all an assistant message holds, and it is what a tool-using run's blame is about."""
    texts = [_content_text(message.get("content"))]
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            if isinstance(call, Mapping):
                function = call.get("function") if isinstance(call.get("function"), Mapping) else call
                texts.append(_call_text(function.get("name"), function.get("arguments")))
    function_call = message.get("function_call")
    if isinstance(function_call, Mapping):
        texts.append(_call_text(function_call.get("name"), function_call.get("arguments")))
    return "\n".join(text for text in texts if text)


def step_from_message(position: int, message: Mapping[str, Any]) -> Step:
    """One chat message -> one Step; the speaker comes from name/agent/sender, else role."""
    if not isinstance(message, Mapping):
        raise TrajectoryFormatError(f"message {position} is a {type(message).__name__}, expected an object")
    role = str(message.get("role") or "").strip()
    speaker = ""
    for key in ("name", "agent", "sender", "speaker"):
        value = message.get(key)
        if isinstance(value, str) and value.strip():
            speaker = value.strip()
            break
    raw_label = role or speaker or "unknown"
    if not speaker:
        speaker = role or "unknown"
    content = _message_text(message)
    kind = StepKind.MESSAGE
    is_error = False
    tool_name = message.get("tool_name") if isinstance(message.get("tool_name"), str) else None
    exit_match = _EXITCODE.match(content)
    if exit_match:
        kind = StepKind.CODE_EXECUTION
        is_error = int(exit_match.group(1)) != 0
    elif _NO_CODE_REPLY.match(content):
        kind = StepKind.CODE_EXECUTION
    elif role.lower() in _TOOL_ROLES:
        kind = StepKind.TOOL
        if tool_name is None and speaker != role:
            tool_name = speaker  # OpenAI's tool / function messages name the function
    return Step(
        index=position,
        agent=normalise_agent(speaker),
        role=raw_label,
        content=content,
        kind=kind,
        tool_name=tool_name,
        is_error=is_error or bool(message.get("is_error")),
    )


def trajectory_from_conversation(
    data: Mapping[str, Any] | Sequence[Any], source: str | None = None
) -> Trajectory:
    """``{"history": [...]}``, ``{"conversation": [...]}`` or a bare message list -> Trajectory."""
    if isinstance(data, Mapping):
        messages = next((data[key] for key in CONVERSATION_KEYS if isinstance(data.get(key), list)), None)
        if messages is None:
            raise TrajectoryFormatError("'history'/'conversation'/'messages' must be a list of messages")
        task_input = _optional_text(data.get("question", data.get("task")))
        task = Task(
            name=str(
                data.get("task_name") or name_from_input(task_input) or data.get("question_ID") or "task"
            ),
            input=task_input,
            expected_output=_optional_text(data.get("ground_truth", data.get("expected_output"))),
            final_output=_optional_text(data.get("final_output", data.get("final_answer"))),
        )
        outcome = _outcome_of(data)
    else:
        messages, task, outcome = list(data), Task(), Outcome.FAILURE
    if not messages:
        raise TrajectoryFormatError("the conversation has no messages")
    steps = [step_from_message(position, message) for position, message in enumerate(messages)]
    if task.final_output is None:  # what the run said last on a "FINAL ANSWER:" line
        stated = stated_final_answer(step.content for step in reversed(steps))
        task = task.model_copy(update={"final_output": stated})
    return Trajectory(task=task, steps=steps, outcome=outcome, source=source)


def _optional_text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _outcome_of(data: Mapping[str, Any]) -> Outcome:
    """Files handed to attribution are failed runs unless they say otherwise."""
    for key in ("outcome", "is_correct", "is_corrected", "success"):
        if key not in data:
            continue
        value = data[key]
        text = str(value).strip().lower()
        if text in {"success", "true", "1"}:
            return Outcome.SUCCESS
        if text in {"failure", "false", "0"}:
            return Outcome.FAILURE
    return Outcome.FAILURE


def _looks_like_otlp(data: Any) -> bool:
    if isinstance(data, Mapping):
        if "resourceSpans" in data or "resource_spans" in data:
            return True
        result = data.get("result")
        return isinstance(result, Mapping) and ("resourceSpans" in result or "resource_spans" in result)
    return False


def _looks_like_span_tree(data: Any) -> bool:
    """A trace with children nested in ``child_spans``: ``{"spans": [...]}``, a list of spans or one span."""
    if isinstance(data, Mapping) and isinstance(data.get("spans"), list):
        data = data["spans"]
    if isinstance(data, Mapping):
        return _is_tree_span(data)
    return isinstance(data, list) and bool(data) and all(_is_tree_span(item) for item in data)


def _is_tree_span(item: Any) -> bool:
    return isinstance(item, Mapping) and "span_id" in item and ("child_spans" in item or "span_name" in item)


def _otlp_json_spans(text: str, source: str) -> tuple[list[Any], list[Any]]:
    """The resource spans and resource logs of OTLP/JSON text (one document or JSON lines)."""
    from otel_blame import otlp_json

    try:
        documents = list(otlp_json.iter_json_documents(text))
    except otlp_json.OTLPJSONError as error:
        raise TrajectoryFormatError(f"{source}: {error}") from None
    # Jaeger's API wraps each chunk of the answer as {"result": {...}}
    unwrapped = [
        doc["result"] if isinstance(doc, Mapping) and isinstance(doc.get("result"), Mapping) else doc
        for doc in documents
    ]
    try:
        return otlp_json.parse_otlp_json("\n".join(json.dumps(doc) for doc in unwrapped))
    except otlp_json.OTLPJSONError as error:
        raise TrajectoryFormatError(f"{source}: {error}") from None


def _one_trace(resource_spans: list[Any], resource_logs: list[Any], source: str) -> Trajectory:
    """The trajectory of a file's one trace; a file of several traces, or of no agent steps, is refused."""
    from otel_blame.conventions import trace_ids, trajectory_from_spans

    traces = trace_ids(resource_spans)
    if len(traces) > 1:
        shown = ", ".join(trace.hex() for trace in traces[:5])
        raise TrajectoryFormatError(
            f"{source} holds {len(traces)} traces ({shown}); export one trace per file"
        )
    try:
        return trajectory_from_spans(resource_spans, resource_logs)
    except ValueError as error:
        raise TrajectoryFormatError(f"{source}: {error}") from None


def trajectory_from_sdk_spans(spans: Sequence[Any], log_records: Sequence[Any] = ()) -> Trajectory:
    """In-memory OpenTelemetry SDK spans (and log records) -> Trajectory, through the same
    ``otel_blame.conventions`` the processor uses for spans it receives."""
    from otel_blame.conventions import sdk_logs_to_proto, sdk_spans_to_proto, trajectory_from_spans

    resource_logs = sdk_logs_to_proto(log_records) if log_records else []
    return trajectory_from_spans(sdk_spans_to_proto(spans), resource_logs)


def _json_documents(text: str, source: str = "input") -> list[dict[str, Any]]:
    """One JSON document, or one per non-empty line (the Collector file exporter writes lines)."""
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        return [whole]
    documents = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            document = json.loads(line)
        except json.JSONDecodeError as error:
            raise _json_error(source, error, line_offset=number - 1) from None
        if not isinstance(document, dict):
            raise TrajectoryFormatError(
                f"{source}: line {number} is not a JSON object (not JSON lines). {EXPECTED_FORMATS}"
            )
        documents.append(document)
    return documents


def read_text(path: str | Path, on_progress: Callable[[int, int], None] | None = None) -> str:
    """The file as UTF-8 text; ``on_progress(bytes_read, total)`` is called per 1 MiB read.

    Errors name the file and what was wrong, never a raw codec message."""
    path = Path(path)
    try:
        total = path.stat().st_size
        chunks = []
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                chunks.append(chunk)
                if on_progress is not None:
                    on_progress(sum(map(len, chunks)), total)
        data = b"".join(chunks)
    except IsADirectoryError:
        raise TrajectoryFormatError(f"cannot read {path}: it is a directory, expected a file") from None
    except OSError as error:
        raise TrajectoryFormatError(f"cannot read {path}: {error.strerror or error}") from None
    return decode_bytes(data, str(path))


def decode_bytes(data: bytes, source: str, *, max_gunzipped: int | None = None) -> str:
    """A saved run's bytes as text: gunzipped when they are gzip (at most ``max_gunzipped`` bytes once
    decompressed, MAX_GUNZIPPED_BYTES by default), then UTF-8. Errors name the source and what was wrong."""
    if data[:2] == GZIP_MAGIC:
        data = _gunzip(data, source, MAX_GUNZIPPED_BYTES if max_gunzipped is None else max_gunzipped)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise TrajectoryFormatError(
            f"{source}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}, "
            f"line {line}); {EXPECTED_FORMATS}"
        ) from None


_CHUNK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
# a gzipped file expands to at most this: far above any real trace, and a bound on a gzip bomb
MAX_GUNZIPPED_BYTES = 1 << 30


def _gunzip(data: bytes, source: str, limit: int) -> bytes:
    """A gzipped file's content, refusing what is corrupt or expands past ``limit`` bytes."""
    import zlib

    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as error:
        raise TrajectoryFormatError(f"{source}: a gzip file that cannot be decompressed ({error})") from None
    if len(out) > limit:
        raise TrajectoryFormatError(
            f"{source}: gzipped content larger than {limit >> 20} MiB once decompressed; refused"
        )
    if not inflater.eof:
        raise TrajectoryFormatError(f"{source}: a truncated gzip file (the stream does not end)")
    return out


def load_trajectory(path: str | Path) -> Trajectory:
    """Read a saved run, detecting its format; raise TrajectoryFormatError saying what is wrong."""
    return parse_trajectory(read_text(path), source=str(path))


def parse_trajectory(text: str, source: str | None = None) -> Trajectory:
    """Parse the text of a saved run in any supported format."""
    return _parse(text, source or "input")[0]


class Annotation(BaseModel):
    """The known answer a file carries (Who&When ``mistake_agent`` / ``mistake_step``)."""

    agent: str | None = None
    step: int | None = None
    reason: str | None = None


class SavedRun(BaseModel):
    """A saved run as the ``attribute`` command needs it: the trajectory, the blame already on
    it (an OTLP file the processor enriched) with per-step scores, and the file's annotation."""

    trajectory: Trajectory
    recorded: Attribution | None = None
    recorded_scores: dict[int, float] = {}
    annotation: Annotation | None = None
    service: str = ""  # a trace's: its root span's resource service.name (as the processor reads it)


def load_saved_run(path: str | Path, on_progress: Callable[[int, int], None] | None = None) -> SavedRun:
    """Read a saved run with what it already knows: recorded ``blame.*`` and any annotation."""
    return parse_saved_run(read_text(path, on_progress), str(path))


def parse_saved_run(text: str, source: str | None = None) -> SavedRun:
    """:func:`load_saved_run` for text already read."""
    trajectory, extra = _parse(text, source or "input")
    return SavedRun(trajectory=trajectory, **extra)


def _annotation(data: Mapping[str, Any]) -> Annotation | None:
    agent, step = data.get("mistake_agent"), data.get("mistake_step")
    if agent is None and step is None:
        return None
    try:
        step_number = int(str(step).strip()) if step is not None and str(step).strip() else None
    except ValueError:
        step_number = None
    reason = data.get("mistake_reason")
    return Annotation(
        agent=normalise_agent(str(agent)) if agent is not None else None,
        step=step_number,
        reason=str(reason) if reason is not None else None,
    )


def _parse(text: str, source: str) -> tuple[Trajectory, dict[str, Any]]:
    try:
        return _parse_unchecked(text, source)
    except TrajectoryFormatError as error:
        message = str(error)
        if source and not message.startswith((source, f"cannot read {source}")):
            message = f"{source}: {message}"
        raise TrajectoryFormatError(message) from None


def _is_message(item: Mapping[str, Any]) -> bool:
    """A chat message: it has content, or it only makes tool calls (OpenAI's ``content: null``)."""
    return "content" in item or "tool_calls" in item or "function_call" in item


def _first_line_is_json(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return False
    try:
        json.loads(lines[0])
    except json.JSONDecodeError:
        return False
    return True


def _parse_unchecked(text: str, source: str) -> tuple[Trajectory, dict[str, Any]]:
    if not text.strip():
        raise TrajectoryFormatError(f"{source} is empty. {EXPECTED_FORMATS}")
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as error:
        if not _first_line_is_json(text):  # one (broken) document, not JSON lines
            raise _json_error(source, error) from None
        documents = _json_documents(text, source)  # raises with the failing line and column
        if documents and all(_looks_like_otlp(doc) or "resourceLogs" in doc for doc in documents):
            return _from_otlp(text, source)
        raise TrajectoryFormatError(
            f"{source}: JSON lines that are not OTLP exports (not JSON). {EXPECTED_FORMATS}"
        ) from None
    if _looks_like_otlp(data):
        return _from_otlp(text, source)
    if _looks_like_span_tree(data):
        return _from_span_tree(data, source)
    if isinstance(data, Mapping) and any(key in data for key in CONVERSATION_KEYS):
        return trajectory_from_conversation(data, source), {"annotation": _annotation(data)}
    if isinstance(data, list) and data and all(isinstance(m, Mapping) and _is_message(m) for m in data):
        return trajectory_from_conversation(data, source), {}
    keys = ", ".join(sorted(data)[:8]) if isinstance(data, Mapping) else type(data).__name__
    raise TrajectoryFormatError(f"{source}: unrecognised format (top level: {keys}). {EXPECTED_FORMATS}")


def _from_span_tree(data: Any, source: str) -> tuple[Trajectory, dict[str, Any]]:
    from otel_blame.span_tree import SpanTreeError, span_tree_to_otlp

    try:
        resource_spans = span_tree_to_otlp(data)
    except SpanTreeError as error:
        raise TrajectoryFormatError(f"{source}: {error}") from None
    return _from_spans(resource_spans, [], source)


def _from_otlp(text: str, source: str) -> tuple[Trajectory, dict[str, Any]]:
    return _from_spans(*_otlp_json_spans(text, source), source)


def _from_spans(
    resource_spans: list[Any], resource_logs: list[Any], source: str
) -> tuple[Trajectory, dict[str, Any]]:
    """A file's one trace with the blame already recorded on its spans."""
    trajectory = _one_trace(resource_spans, resource_logs, source).model_copy(update={"source": source})
    recorded, scores = recorded_blame(resource_spans, trajectory)
    return trajectory, {
        "recorded": recorded,
        "recorded_scores": scores,
        "service": _root_service(resource_spans, trajectory.root_span_id),
    }


def _root_service(resource_spans: Sequence[Any], root_span_id: str | None) -> str:
    """The ``service.name`` of the resource that holds the root span ("" when none says)."""
    from otel_blame import semconv as sc
    from otel_blame.conventions import attributes_to_dict

    for resource in resource_spans:
        spans = (span for scope in resource.scope_spans for span in scope.spans)
        if any(span.span_id.hex() == root_span_id for span in spans):
            return str(attributes_to_dict(resource.resource.attributes).get(sc.SERVICE_NAME, ""))
    return ""


def recorded_blame(
    resource_spans: Sequence[Any], trajectory: Trajectory
) -> tuple[Attribution | None, dict[int, float]]:
    """The ``blame.*`` the processor wrote on these spans, as an Attribution, and each step's score."""
    from otel_blame import semconv as sc
    from otel_blame.conventions import attributes_to_dict

    step_of_span = {step.span_id: step.index for step in trajectory.steps if step.span_id}
    verdict: dict[str, Any] | None = None
    scores: dict[int, float] = {}
    for resource in resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                attrs = attributes_to_dict(span.attributes)
                step = step_of_span.get(span.span_id.hex())
                if step is not None and isinstance(attrs.get(sc.BLAME_SCORE), int | float):
                    scores[step] = float(attrs[sc.BLAME_SCORE])
                if sc.BLAME_AGENT in attrs and sc.BLAME_STEP in attrs:
                    # the root carries the whole verdict, the culprit span a part: merge, root first
                    blame = {key: value for key, value in attrs.items() if key.startswith("blame.")}
                    verdict = (
                        blame | (verdict or {})
                        if not span.parent_span_id
                        else (verdict or {})
                        | {key: value for key, value in blame.items() if key not in (verdict or {})}
                    )
    if verdict is None:
        return None, scores
    try:
        step = int(verdict[sc.BLAME_STEP])
        candidates = [
            Candidate(step=index, agent=trajectory.steps[index].agent, score=min(max(score, 0.0), 1.0))
            for index, score in sorted(scores.items(), key=lambda item: -item[1])
            if 0 <= index < len(trajectory.steps) and score > 0
        ][:5]
        recorded = Attribution(
            agent=str(verdict[sc.BLAME_AGENT]),
            step=step,
            confidence=min(max(float(verdict.get(sc.BLAME_CONFIDENCE, 0.0)), 0.0), 1.0),
            decided=verdict.get(sc.BLAME_DECIDED) is not False,  # written before blame.decided: decided
            reason=str(verdict.get(sc.BLAME_REASON, "")),
            method=str(verdict.get(sc.BLAME_METHOD, "unknown")),
            model=str(verdict[sc.BLAME_MODEL]) if verdict.get(sc.BLAME_MODEL) else None,
            candidates=candidates,
            category=verdict.get(sc.BLAME_CATEGORY)
            if verdict.get(sc.BLAME_CATEGORY)
            in (sc.CATEGORY_AGENT, sc.CATEGORY_DEPENDENCY, sc.CATEGORY_SPECIFICATION)
            else None,
            dependency=str(verdict[sc.BLAME_DEPENDENCY]) if verdict.get(sc.BLAME_DEPENDENCY) else None,
            failure_mode=str(verdict[sc.BLAME_FAILURE_MODE]) if verdict.get(sc.BLAME_FAILURE_MODE) else None,
            cross_run_suspiciousness=min(max(float(verdict[sc.BLAME_CROSS_RUN_SUSPICIOUSNESS]), 0.0), 1.0)
            if sc.BLAME_CROSS_RUN_SUSPICIOUSNESS in verdict
            else None,
        )
    except (TypeError, ValueError):
        return None, scores  # malformed blame.* values: recompute rather than show nonsense
    return recorded, scores
