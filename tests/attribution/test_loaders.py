"""Saved runs -> Trajectory: Who&When logs, plain conversations, OTLP JSON exports, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from otel_blame import semconv as sc
from otel_blame.conventions import sdk_spans_to_proto
from otel_blame.datasets.who_and_when import case_files, iter_cases, load_case
from otel_blame.loaders import (
    TrajectoryFormatError,
    load_trajectory,
    normalise_agent,
    parse_trajectory,
    trajectory_from_sdk_spans,
)
from otel_blame.otlp_json import traces_to_json
from otel_blame.trajectory import Outcome, StepKind

HAND_CRAFTED = {
    "question": "What is the closest eatery?",
    "ground_truth": "McDonald's",
    "is_corrected": "False",
    "mistake_agent": "Websurfer",
    "mistake_step": "3",
    "mistake_reason": "searched badly",
    "history": [
        {"content": "What is the closest eatery?", "role": "human"},
        {"content": "Initial plan: ...", "role": "Orchestrator (thought)"},
        {"content": "Search for eateries.", "role": "Orchestrator (-> WebSurfer)"},
        {"content": "I typed 'eateries' into the search bar.", "role": "WebSurfer"},
        {"content": "Next speaker WebSurfer", "role": "Orchestrator (thought)"},
    ],
}

ALGORITHM_GENERATED = {
    "is_correct": "False",
    "question": "How many?",
    "ground_truth": "8",
    "mistake_agent": "Excel_Expert",
    "mistake_step": "0",
    "mistake_reason": "bad code",
    "history": [
        {"content": "```python\nprint(4)\n```", "role": "assistant", "name": "Excel_Expert"},
        {
            "content": "exitcode: 0 (execution succeeded)\nCode output: 4",
            "role": "user",
            "name": "Computer_terminal",
        },
        {
            "content": "exitcode: 1 (execution failed)\nTraceback ...",
            "role": "user",
            "name": "Computer_terminal",
        },
        {"content": "TERMINATE", "role": "user", "name": "Checker"},
    ],
}


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_speaker_labels_are_normalised_and_raw_label_kept(tmp_path):
    trajectory = load_trajectory(write(tmp_path / "hc.json", HAND_CRAFTED))
    assert trajectory.agents == ["human", "Orchestrator", "WebSurfer"]
    assert [s.role for s in trajectory.steps][1:3] == [
        "Orchestrator (thought)",
        "Orchestrator (-> WebSurfer)",
    ]
    assert trajectory.task.input == "What is the closest eatery?"
    assert trajectory.task.expected_output == "McDonald's"
    assert trajectory.outcome == Outcome.FAILURE
    assert normalise_agent(" Orchestrator (termination condition) ") == "Orchestrator"


def test_names_win_over_roles_and_code_results_are_detected(tmp_path):
    trajectory = load_trajectory(write(tmp_path / "ag.json", ALGORITHM_GENERATED))
    assert [s.agent for s in trajectory.steps] == [
        "Excel_Expert",
        "Computer_terminal",
        "Computer_terminal",
        "Checker",
    ]
    assert [s.role for s in trajectory.steps][:2] == ["assistant", "user"]
    assert [s.kind for s in trajectory.steps][:3] == [
        StepKind.MESSAGE,
        StepKind.CODE_EXECUTION,
        StepKind.CODE_EXECUTION,
    ]
    assert [s.is_error for s in trajectory.steps] == [False, False, True, False]


@pytest.mark.parametrize("key", ["history", "conversation", "messages"])
def test_plain_conversation_formats(tmp_path, key):
    data = {
        key: [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "name": "Bot", "content": [{"text": "yo"}]},
        ]
    }
    trajectory = load_trajectory(write(tmp_path / "c.json", data))
    assert [(s.agent, s.content) for s in trajectory.steps] == [("user", "hi"), ("Bot", "yo")]
    bare = parse_trajectory(json.dumps(data[key]))
    assert bare.agents == ["user", "Bot"]


def test_tool_calls_in_openai_and_anthropic_messages_are_part_of_the_step():
    """A tool-using run's decisive step is often a call whose message has no text (OpenAI's
    ``content: null``): the call must reach attribution, written as the spans path writes it."""
    messages = [
        {"role": "user", "content": "Cancel order #W1."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "cancel", "arguments": '{"order": "#W2"}'},
                }
            ],
        },
        {"role": "tool", "name": "cancel", "tool_call_id": "c1", "content": '{"status": "cancelled"}'},
        {"role": "assistant", "function_call": {"name": "notify", "arguments": '{"to": "me"}'}},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "name": "look", "input": {"q": 7}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "7 found"}]}
            ],
        },
    ]
    trajectory = parse_trajectory(json.dumps(messages))
    assert [s.content for s in trajectory.steps] == [
        "Cancel order #W1.",
        'tool_call cancel({"order": "#W2"})',
        '{"status": "cancelled"}',
        'tool_call notify({"to": "me"})',
        'Checking.\ntool_call look({"q": 7})',
        "7 found",
    ]
    assert (trajectory.steps[2].kind, trajectory.steps[2].tool_name) == (StepKind.TOOL, "cancel")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("{not json", "f.json: not valid JSON at line 1, column 2: Expecting property name"),
        ('{"a": 1}\n{"b": 2', "f.json: not valid JSON at line 2, column 8"),
        ('{"foo": 1}', "unrecognised format"),
        ('{"history": []}', "no messages"),
        ('{"history": [1, 2]}', "message 0 is a int"),
        ('{"a": 1}\n{"b": 2}', "not OTLP"),
        ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', "not a hex id"),
    ],
)
def test_bad_input_gets_a_clear_error(text, message):
    with pytest.raises(TrajectoryFormatError, match=message):
        parse_trajectory(text, source="f.json")


def test_missing_file_is_a_format_error(tmp_path):
    with pytest.raises(TrajectoryFormatError, match="cannot read"):
        load_trajectory(tmp_path / "nope.json")


def _record_run(exporter: InMemorySpanExporter, failed: bool = True):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span(sc.workflow_span_name("solve")) as root:
        root.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_WORKFLOW)
        root.set_attribute(sc.TASK_INPUT, "What is six times seven?")
        for agent, text in [("Planner", "multiply 6 by 7"), ("Solver", "the answer is 41")]:
            with tracer.start_as_current_span(sc.agent_span_name(agent)) as span:
                span.set_attribute(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_AGENT)
                span.set_attribute(sc.GEN_AI_AGENT_NAME, agent)
                span.set_attribute(
                    sc.GEN_AI_OUTPUT_MESSAGES,
                    json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}]),
                )
        root.set_attribute(sc.TASK_OUTCOME, sc.OUTCOME_FAILURE if failed else sc.OUTCOME_SUCCESS)
        root.set_status(Status(StatusCode.ERROR if failed else StatusCode.OK))
    provider.shutdown()
    return list(exporter.get_finished_spans())


def test_otlp_json_file_exporter_lines_and_jaeger_api_output(tmp_path):
    spans = _record_run(InMemorySpanExporter())
    proto = sdk_spans_to_proto(spans)
    document = traces_to_json(proto)
    # the Collector's file exporter writes one request per line; split the resource across two lines
    first = json.loads(document)
    lines = "\n".join([json.dumps(first), ""])
    from_file = load_trajectory(write(tmp_path / "collector.jsonl", lines))
    jaeger = load_trajectory(write(tmp_path / "jaeger.json", json.dumps({"result": first})))
    in_memory = trajectory_from_sdk_spans(spans)
    for trajectory in (from_file, jaeger, in_memory):
        assert [(s.agent, s.content) for s in trajectory.steps] == [
            ("Planner", "multiply 6 by 7"),
            ("Solver", "the answer is 41"),
        ]
        assert (
            trajectory.outcome == Outcome.FAILURE
            and trajectory.trace_id == spans[0].context.trace_id.to_bytes(16, "big").hex()
        )
    assert from_file.source.endswith("collector.jsonl")


def test_otlp_file_with_two_traces_is_refused(tmp_path):
    spans = _record_run(InMemorySpanExporter()) + _record_run(InMemorySpanExporter())
    text = traces_to_json(sdk_spans_to_proto(spans))
    with pytest.raises(TrajectoryFormatError, match="holds 2 traces"):
        parse_trajectory(text)


def test_who_and_when_layout_and_case_insensitive_annotation(tmp_path):
    write(tmp_path / "Hand-Crafted" / "10.json", HAND_CRAFTED)
    write(tmp_path / "Hand-Crafted" / "9.json", HAND_CRAFTED)
    write(tmp_path / "Algorithm-Generated" / "1.json", ALGORITHM_GENERATED)
    files = [p.relative_to(tmp_path).as_posix() for p in case_files(tmp_path)]
    assert files == ["Algorithm-Generated/1.json", "Hand-Crafted/9.json", "Hand-Crafted/10.json"]
    case = load_case(tmp_path / "Hand-Crafted" / "10.json", tmp_path)
    assert (case.subset, case.file, case.mistake_agent, case.mistake_step) == (
        "Hand-Crafted",
        "Hand-Crafted/10.json",
        "WebSurfer",
        3,
    )
    assert [c.file for c in iter_cases(tmp_path, ["Algorithm-Generated"])] == ["Algorithm-Generated/1.json"]
    with pytest.raises(ValueError, match="unknown subset"):
        case_files(tmp_path, ["Both"])
    write(tmp_path / "Hand-Crafted" / "11.json", {"history": []})
    with pytest.raises(TrajectoryFormatError, match="not a Who&When log"):
        load_case(tmp_path / "Hand-Crafted" / "11.json", tmp_path)


def test_what_a_conversation_log_said_is_picked_up_its_answer_line_and_its_question(tmp_path):
    from otel_blame.loaders import parse_trajectory

    log = {
        "question": "Background: a shop sells pens.\nHow many pens are left after selling 3 of 10?",
        "question_ID": "0a1b2c3d-uuid",
        "history": [
            {"name": "Planner", "content": "Subtract the sold pens."},
            {"name": "Solver", "content": "10 - 3 = 7.\nFINAL ANSWER: 7"},
            {"name": "Checker", "content": "TERMINATE"},
        ],
    }
    trajectory = parse_trajectory(json.dumps(log))
    assert trajectory.task.final_output == "7"  # the last "FINAL ANSWER:" line of the last steps
    assert trajectory.task.name == "How many pens are left after selling 3 of 10?"  # the question it asks
    recorded = {**log, "final_answer": "8"}
    assert parse_trajectory(json.dumps(recorded)).task.final_output == "8"  # a recorded answer wins
