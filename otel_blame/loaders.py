"""Saved runs on disk become a Trajectory: conversation JSON or an OTLP JSON export of one trace.

Formats, detected from the content (not the file name):

- conversation JSON: ``{"history": [...]}`` or ``{"conversation": [...]}`` (Who&When logs are this
  format with extra annotation keys), or a bare list of messages. Each message has ``content`` and
  a speaker in ``name`` / ``agent`` / ``sender`` / ``role``.
- OTLP JSON: an ExportTraceServiceRequest (``{"resourceSpans": [...]}``), the Collector file
  exporter's one-request-per-line output, or Jaeger's ``/api/v3/traces`` answer
  (``{"result": {"resourceSpans": [...]}}``). These go through the processor's own
  ``spans_to_trajectory`` so a file and a live trace give the same Trajectory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from otel_blame.trajectory import Outcome, Step, StepKind, Task, Trajectory

# "Orchestrator (thought)", "Orchestrator (-> WebSurfer)": the speaker is the part before " (".
_SPEAKER_SUFFIX = re.compile(r"\s*\((?:[^()]*)\)\s*$")
# AutoGen's code executor reply: "exitcode: 1 (execution failed)\nCode output: ..."
_EXITCODE = re.compile(r"^\s*exitcode:\s*(-?\d+)", re.IGNORECASE)
_NO_CODE_REPLY = re.compile(r"^\s*There is no code from the last \d+ message", re.IGNORECASE)
_GENERIC_ROLES = {"user", "assistant", "system", "human", "tool", "function", "developer", "ai"}
_TOOL_ROLES = {"tool", "function", "ipython"}


class TrajectoryFormatError(ValueError):
    """The file is not a format otel-blame can read; the message says what was expected."""


def normalise_agent(label: str) -> str:
    """``Orchestrator (-> WebSurfer)`` -> ``Orchestrator``; other labels unchanged but stripped."""
    label = label.strip()
    stripped = _SPEAKER_SUFFIX.sub("", label).strip()
    return stripped or label


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                parts.append(str(part.get("text") or part.get("content") or ""))
            else:
                parts.append(str(part))
        return "\n".join(p for p in parts if p)
    return json.dumps(content, ensure_ascii=False)


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
    content = _content_text(message.get("content"))
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
        messages = data.get("history", data.get("conversation"))
        if not isinstance(messages, list):
            raise TrajectoryFormatError("'history'/'conversation' must be a list of messages")
        task = Task(
            name=str(data.get("question_ID") or data.get("task_name") or "task"),
            input=_optional_text(data.get("question", data.get("task"))),
            expected_output=_optional_text(data.get("ground_truth", data.get("expected_output"))),
            final_output=_optional_text(data.get("final_output", data.get("final_answer"))),
        )
        outcome = _outcome_of(data)
    else:
        messages, task, outcome = list(data), Task(), Outcome.FAILURE
    if not messages:
        raise TrajectoryFormatError("the conversation has no messages")
    steps = [step_from_message(position, message) for position, message in enumerate(messages)]
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


def trajectory_from_otlp_json(text: str, source: str | None = None) -> Trajectory:
    """OTLP JSON of one trace (file exporter lines or Jaeger ``/api/v3/traces``) -> Trajectory."""
    from otel_blame import otlp_json
    from otel_blame.spans_to_trajectory import trace_ids, trajectory_from_spans

    try:
        documents = list(otlp_json.iter_json_documents(text))
    except otlp_json.OTLPJSONError as error:
        raise TrajectoryFormatError(f"{source or 'input'}: {error}") from None
    # Jaeger's API wraps each chunk of the answer as {"result": {...}}
    unwrapped = [
        doc["result"] if isinstance(doc, Mapping) and isinstance(doc.get("result"), Mapping) else doc
        for doc in documents
    ]
    try:
        resource_spans, resource_logs = otlp_json.parse_otlp_json(
            "\n".join(json.dumps(doc) for doc in unwrapped)
        )
    except otlp_json.OTLPJSONError as error:
        raise TrajectoryFormatError(f"{source or 'input'}: {error}") from None
    traces = trace_ids(resource_spans)
    if len(traces) > 1:
        shown = ", ".join(trace.hex() for trace in traces[:5])
        raise TrajectoryFormatError(
            f"{source or 'input'} holds {len(traces)} traces ({shown}); export one trace per file"
        )
    try:
        trajectory = trajectory_from_spans(resource_spans, resource_logs)
    except ValueError as error:
        raise TrajectoryFormatError(f"{source or 'input'}: {error}") from None
    return trajectory.model_copy(update={"source": source}) if source else trajectory


def trajectory_from_sdk_spans(spans: Sequence[Any], log_records: Sequence[Any] = ()) -> Trajectory:
    """In-memory OpenTelemetry SDK spans (and log records) -> Trajectory, through the same
    ``spans_to_trajectory`` the processor uses for spans it receives."""
    from otel_blame.spans_to_trajectory import sdk_logs_to_proto, sdk_spans_to_proto, trajectory_from_spans

    resource_logs = sdk_logs_to_proto(log_records) if log_records else []
    return trajectory_from_spans(sdk_spans_to_proto(spans), resource_logs)


def _json_documents(text: str) -> list[dict[str, Any]]:
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
            raise TrajectoryFormatError(f"line {number} is not JSON: {error.msg}") from None
        if not isinstance(document, dict):
            raise TrajectoryFormatError(f"line {number} is not a JSON object")
        documents.append(document)
    return documents


def load_trajectory(path: str | Path) -> Trajectory:
    """Read a saved run, detecting its format; raise TrajectoryFormatError saying what is wrong."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise TrajectoryFormatError(f"cannot read {path}: {error}") from None
    return parse_trajectory(text, source=str(path))


def parse_trajectory(text: str, source: str | None = None) -> Trajectory:
    """Parse the text of a saved run in any supported format."""
    if not text.strip():
        raise TrajectoryFormatError(f"{source or 'input'} is empty")
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError:
        data = None
        documents = _json_documents(text)  # raises with the failing line if not JSON lines
        if documents and all(_looks_like_otlp(doc) or "resourceLogs" in doc for doc in documents):
            return trajectory_from_otlp_json(text, source)
        raise TrajectoryFormatError(
            f"{source or 'input'}: JSON lines that are not OTLP exports; expected a conversation object"
        ) from None
    if _looks_like_otlp(data):
        return trajectory_from_otlp_json(text, source)
    if isinstance(data, Mapping) and ("history" in data or "conversation" in data):
        return trajectory_from_conversation(data, source)
    if isinstance(data, list) and data and all(isinstance(m, Mapping) and "content" in m for m in data):
        return trajectory_from_conversation(data, source)
    keys = ", ".join(sorted(data)[:8]) if isinstance(data, Mapping) else type(data).__name__
    raise TrajectoryFormatError(
        f"{source or 'input'}: unrecognised format (top level: {keys}). Expected a conversation "
        '({"history": [...]} or {"conversation": [...]}), or an OTLP JSON trace export '
        '({"resourceSpans": [...]}, Collector file exporter lines, or Jaeger /api/v3/traces output).'
    )
