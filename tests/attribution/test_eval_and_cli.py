"""`otel-blame eval` scoring arithmetic and output, and `otel-blame attribute` end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from otel_blame.attribution.result import Attribution, Cost
from otel_blame.cli import main
from otel_blame.datasets.who_and_when import load_case
from otel_blame.evaluation.who_and_when import PredictionRecord, score_case, summarise
from tests.support.decided import ALWAYS_DECIDED, set_decided_threshold

RECORD_FIELDS = [
    "file",
    "predicted_agent",
    "predicted_step",
    "mistake_agent",
    "mistake_step",
    "agent_correct",
    "step_correct",
    "llm_calls",
    "input_tokens",
    "output_tokens",
    "seconds",
    "decided",
    "confidence",
]


def record(
    file: str, predicted: tuple[str, int] | None, truth: tuple[str, int], **cost: float
) -> PredictionRecord:
    agent, step = predicted if predicted else (None, None)
    return PredictionRecord(
        file=file,
        predicted_agent=agent,
        predicted_step=step,
        mistake_agent=truth[0],
        mistake_step=truth[1],
        agent_correct=agent == truth[0],
        step_correct=step == truth[1],
        llm_calls=int(cost.get("calls", 0)),
        input_tokens=int(cost.get("input", 0)),
        output_tokens=int(cost.get("output", 0)),
        seconds=cost.get("seconds", 0.0),
    )


def test_summary_arithmetic_per_subset():
    records = [
        record("Algorithm-Generated/1.json", ("A", 1), ("A", 1), calls=2, input=100, output=10, seconds=1.0),
        record("Algorithm-Generated/2.json", ("A", 3), ("A", 1), calls=4, input=300, output=30, seconds=3.0),
        record("Algorithm-Generated/3.json", ("B", 5), ("A", 1)),
        record("Algorithm-Generated/4.json", None, ("A", 1)),
        record("Hand-Crafted/1.json", ("X", 12), ("X", 1)),
    ]
    ag, hc = summarise(records)
    assert (ag.subset, ag.traces, ag.failed) == ("Algorithm-Generated", 4, 1)
    assert ag.agent_accuracy == 0.5 and ag.step_accuracy == 0.25
    assert ag.step_within_1 == 0.25 and ag.step_within_3 == 0.5  # |3-1|=2 counts within 3, |5-1|=4 not
    assert ag.mean_llm_calls == 1.5 and ag.mean_input_tokens == 100 and ag.mean_output_tokens == 10
    assert ag.mean_seconds == 1.0
    # exact match: step 12 is not step 1 (the reference evaluator's substring test would say it is)
    assert (hc.agent_accuracy, hc.step_accuracy, hc.step_within_3) == (1.0, 0.0, 0.0)


def test_score_case_uses_exact_match(tmp_path: Path):
    path = tmp_path / "Hand-Crafted" / "1.json"
    path.parent.mkdir()
    history = [{"role": "A", "content": f"m{i}"} for i in range(13)]
    path.write_text(json.dumps({"history": history, "mistake_agent": "A", "mistake_step": "1"}))
    case = load_case(path, tmp_path)
    answer = Attribution(agent="A", step=12, confidence=0.5, reason="r", method="m", cost=Cost(llm_calls=3))
    scored = score_case(case, answer)
    assert scored.agent_correct and not scored.step_correct and scored.llm_calls == 3
    assert list(scored.model_dump()) == RECORD_FIELDS


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    for subset, count in (("Algorithm-Generated", 3), ("Hand-Crafted", 2)):
        for number in range(count):
            path = tmp_path / "ds" / subset / f"{number}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            history = [
                {
                    "role": "assistant",
                    "name": "Solver",
                    "content": "Let's assume the value is 7. The answer is 7.",
                },
                {"role": "user", "name": "Checker", "content": "Verified, 7 is correct. TERMINATE"},
            ]
            path.write_text(
                json.dumps(
                    {
                        "question": "q",
                        "history": history,
                        "mistake_agent": "Solver",
                        "mistake_step": str(number % 2),
                    }
                )
            )
    return tmp_path / "ds"


def test_eval_command_writes_exact_fields_and_prints_summary(dataset: Path, tmp_path: Path):
    out = tmp_path / "pred.jsonl"
    result = CliRunner().invoke(main, ["eval", "--dataset", str(dataset), "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["file"] for line in lines] == [
        "Algorithm-Generated/0.json",
        "Algorithm-Generated/1.json",
        "Algorithm-Generated/2.json",
        "Hand-Crafted/0.json",
        "Hand-Crafted/1.json",
    ]
    assert all(list(line) == RECORD_FIELDS for line in lines)
    assert all(line["predicted_agent"] == "Solver" and line["predicted_step"] == 0 for line in lines)
    assert "Algorithm-Generated" in result.output and "Hand-Crafted" in result.output
    assert "66.7%" in result.output  # AG step accuracy: files 0 and 2 have mistake_step 0


def test_eval_subset_and_limit(dataset: Path, tmp_path: Path):
    out = tmp_path / "pred.jsonl"
    args = ["eval", "--dataset", str(dataset), "--subset", "Hand-Crafted", "--limit", "1", "--out", str(out)]
    result = CliRunner().invoke(main, [*args, "--method", "random"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["file"] for line in out.read_text().splitlines()] == ["Hand-Crafted/0.json"]


def test_eval_with_an_llm_method_records_cost(dataset: Path, tmp_path: Path, llm):
    out = tmp_path / "pred.jsonl"
    answer = json.dumps({"agent": "Solver", "step": 0, "reason": "assumed", "confidence": 0.9})
    with llm([], default=answer) as (server, settings):
        args = ["eval", "--dataset", str(dataset), "--method", "all_at_once", "--out", str(out)]
        args += ["--base-url", settings.base_url, "--model", "m1"]
        result = CliRunner(env={"OPENAI_API_KEY": "sk-x"}).invoke(main, args)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert server.calls == 5 and all(line["llm_calls"] == 1 and line["input_tokens"] > 0 for line in lines)
    assert server.requests[0]["model"] == "m1"


def test_eval_unanswered_logs_are_scored_wrong_not_fatal(dataset: Path, tmp_path: Path, llm):
    out = tmp_path / "pred.jsonl"
    with llm([], default="no json here") as (_, settings):
        args = [
            "eval",
            "--dataset",
            str(dataset),
            "--method",
            "all_at_once",
            "--limit",
            "1",
            "--out",
            str(out),
        ]
        result = CliRunner(env={"OPENAI_API_KEY": "sk-x"}).invoke(
            main, [*args, "--base-url", settings.base_url]
        )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(line["predicted_agent"] is None and not line["agent_correct"] for line in lines)
    assert all(line["llm_calls"] == 2 and line["input_tokens"] > 0 for line in lines)  # spend is kept
    assert "unanswered" in result.output


def test_eval_missing_dataset_layout_is_a_clear_error(tmp_path: Path):
    result = CliRunner().invoke(
        main, ["eval", "--dataset", str(tmp_path), "--out", str(tmp_path / "p.jsonl")]
    )
    assert result.exit_code != 0 and "no Algorithm-Generated/Hand-Crafted/*.json logs" in result.output


def test_attribute_command_text_and_json(dataset: Path, monkeypatch: pytest.MonkeyPatch):
    set_decided_threshold(monkeypatch, ALWAYS_DECIDED)  # the surface, not the threshold
    file = dataset / "Hand-Crafted" / "0.json"
    text = CliRunner().invoke(main, ["attribute", str(file)])
    assert text.exit_code == 0 and "agent:      Solver" in text.output and "step:       0" in text.output
    as_json = CliRunner().invoke(main, ["attribute", str(file), "--json"])
    parsed = json.loads(as_json.output)
    assert parsed["agent"] == "Solver" and parsed["method"] == "ranker" and parsed["model"] is None


def test_attribute_with_llm_flags(dataset: Path, llm):
    answer = json.dumps({"agent": "Checker", "step": 1, "reason": "approved a wrong value"})
    with llm([answer]) as (server, settings):
        args = ["attribute", str(dataset / "Hand-Crafted" / "0.json"), "--method", "all_at_once", "--json"]
        result = CliRunner(env={"OPENAI_API_KEY": "sk-x"}).invoke(
            main, [*args, "--base-url", settings.base_url, "--model", "tiny", "--with-ground-truth"]
        )
    assert result.exit_code == 0, result.output
    parsed = json.loads(result.output)
    assert (parsed["agent"], parsed["step"], parsed["model"]) == ("Checker", 1, "tiny")
    assert parsed["cost"]["llm_calls"] == 1


def test_attribute_bad_file_and_missing_llm_are_clear_errors(tmp_path: Path, dataset: Path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"foo": 1}')
    result = CliRunner().invoke(main, ["attribute", str(bad)])
    assert result.exit_code == 1 and "unrecognised format" in result.output
    env = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""}
    result = CliRunner(env=env).invoke(
        main, ["attribute", str(dataset / "Hand-Crafted" / "0.json"), "--method", "all_at_once"]
    )
    assert result.exit_code == 1 and "no LLM configured" in result.output


def test_attribute_an_otlp_json_trace_file(tmp_path: Path):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_blame.attribution.heuristic import gather_evidence
    from otel_blame.conventions import sdk_spans_to_proto
    from otel_blame.loaders import load_trajectory
    from otel_blame.otlp_json import traces_to_json

    from .test_loaders import _record_run

    file = tmp_path / "trace.json"
    file.write_text(traces_to_json(sdk_spans_to_proto(_record_run(InMemorySpanExporter()))))
    result = CliRunner().invoke(main, ["attribute", str(file), "--json"])
    assert result.exit_code == 0, result.output
    parsed = json.loads(result.output)
    trajectory = load_trajectory(file)
    assert parsed["method"] == "ranker" and 0 <= parsed["step"] < len(trajectory.steps)
    assert parsed["agent"] == trajectory.steps[parsed["step"]].agent
    # where the wrong "41" entered is found by the final-answer signal (its default weight is what
    # cross-validated fitting chose, which may be 0, so the signal is checked on its own)
    evidence = gather_evidence(trajectory).by_signal["final_answer"]
    assert [trajectory.steps[index].agent for index in evidence] == ["Solver"]


# --- `attribute` as a newcomer meets it ---------------------------------------------------------


def _otlp_file(tmp_path: Path, failed: bool) -> Path:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_blame.conventions import sdk_spans_to_proto
    from otel_blame.otlp_json import traces_to_json

    from .test_loaders import _record_run

    file = tmp_path / ("failed.json" if failed else "ok.json")
    file.write_text(traces_to_json(sdk_spans_to_proto(_record_run(InMemorySpanExporter(), failed=failed))))
    return file


def test_a_successful_run_is_reported_as_such_and_blamed_only_on_request(tmp_path: Path):
    file = _otlp_file(tmp_path, failed=False)
    result = CliRunner().invoke(main, ["attribute", str(file)])
    assert result.exit_code == 0, result.output
    assert "outcome:    success" in result.output and "nothing to blame" in result.output
    assert "agent:" not in result.output and "culprit" not in result.output
    as_json = CliRunner().invoke(main, ["attribute", str(file), "--format", "json"])
    parsed = json.loads(as_json.stdout)
    assert (parsed["outcome"], parsed["blamed"], parsed["agent"]) == ("success", False, None)
    assert "--assume-failed" in as_json.stderr
    forced = CliRunner().invoke(main, ["attribute", str(file), "--assume-failed", "--json"])
    parsed = json.loads(forced.stdout)
    assert parsed["blamed"] and parsed["agent"] and parsed["outcome"] == "success"


def test_an_unknown_outcome_is_not_blamed_without_assume_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    set_decided_threshold(monkeypatch, ALWAYS_DECIDED)  # the surface, not the threshold
    from otel_blame import semconv as sc

    file = _otlp_file(tmp_path, failed=True)
    data = json.loads(file.read_text())
    for rs in data["resourceSpans"]:  # drop what says how the run ended: outcome attribute, status
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                span["attributes"] = [a for a in span.get("attributes", []) if a["key"] != sc.TASK_OUTCOME]
                span.pop("status", None)
    file.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["attribute", str(file)])
    assert result.exit_code == 0 and "outcome:    unknown" in result.output
    assert "does not say whether it failed" in result.output and "agent:" not in result.output
    assert "agent:      " in CliRunner().invoke(main, ["attribute", str(file), "--assume-failed"]).output


@pytest.fixture
def enriched_file(tmp_path: Path) -> Path:
    """A failed run exported by the real processor, so its spans carry blame.* (as Jaeger has them)."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_blame.otlp_json import traces_to_json
    from otel_blame.processor import BlameProcessor, load_config
    from tests.processor.conftest import processor_overrides
    from tests.support import RecordingOTLPSink

    from .test_loaders import _record_run

    spans = _record_run(InMemorySpanExporter())
    with RecordingOTLPSink() as sink:
        config = load_config(overrides=processor_overrides(sink.endpoint, tmp_path / "wal"), environ={})
        processor = BlameProcessor(config).start()
        try:
            exporter = OTLPSpanExporter(endpoint=processor.grpc_endpoint, insecure=True)
            exporter.export(spans)
            exporter.shutdown()
            sink.wait_for_spans(len(spans), timeout=20)
        finally:
            processor.stop(timeout=5)
        resource_spans = [rs for request in sink.trace_requests for rs in request.resource_spans]
    file = tmp_path / "enriched.json"
    file.write_text(traces_to_json(resource_spans))
    return file


def test_blame_already_in_the_file_is_shown_not_recomputed(enriched_file: Path):
    result = CliRunner().invoke(main, ["attribute", str(enriched_file), "--json"])
    assert result.exit_code == 0, result.output
    parsed = json.loads(result.stdout)
    # what the processor's offline default decided
    from otel_blame.attribution.registry import create_method
    from otel_blame.loaders import load_trajectory

    expected = create_method("heuristic").attribute(load_trajectory(enriched_file))
    assert parsed["recorded"] is True and (parsed["agent"], parsed["step"]) == (expected.agent, expected.step)
    assert parsed["method"] == "heuristic" and parsed["confidence"] > 0 and parsed["reason"]
    assert parsed["category"] == expected.category is not None  # blame.category, read back from the spans
    assert parsed["failure_mode"] == expected.failure_mode
    scores = {row["step"]: row["score"] for row in parsed["steps"]}
    assert scores[expected.step] == max(scores.values()) > 0  # blame.score of every step, from the spans
    table = CliRunner().invoke(main, ["attribute", str(enriched_file)], env={"COLUMNS": "120"})
    assert "blame recorded in the file by the processor" in table.output
    assert f"category:   {expected.category}" in table.output
    again = json.loads(
        CliRunner().invoke(main, ["attribute", str(enriched_file), "--recompute", "--json"]).stdout
    )
    assert again["recorded"] is False and (again["agent"], again["step"]) == (expected.agent, expected.step)


def test_the_table_has_a_row_per_step_with_scores_and_marks_the_culprit(
    dataset: Path, monkeypatch: pytest.MonkeyPatch
):
    set_decided_threshold(monkeypatch, ALWAYS_DECIDED)  # the surface, not the threshold
    result = CliRunner().invoke(
        main, ["attribute", str(dataset / "Hand-Crafted" / "1.json")], env={"COLUMNS": "120"}
    )
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if re.match(r"^ +[►◆ ]?\d+ ", line)]
    assert len(rows) == 2  # two steps
    assert re.search(r"^ +►0 +Solver +msg +\d\.\d\d +Let's assume", rows[0]), rows[0]
    assert re.match(r"^ +◆1 ", rows[1]), rows[1]
    assert "► culprit" in result.output and "◆ the file's known answer" in result.output


def test_the_verdict_is_compared_with_the_annotation(dataset: Path):
    matching = CliRunner().invoke(main, ["attribute", str(dataset / "Hand-Crafted" / "0.json")])
    assert "annotation: Solver at step 0: the verdict agent and step match" in matching.output
    other = CliRunner().invoke(main, ["attribute", str(dataset / "Hand-Crafted" / "1.json"), "--json"])
    annotation = json.loads(other.stdout)["annotation"]
    assert annotation == {
        "agent": "Solver",
        "step": 1,
        "reason": None,
        "agent_matches": True,
        "step_matches": False,
    }
    table = CliRunner().invoke(main, ["attribute", str(dataset / "Hand-Crafted" / "1.json")])
    assert "annotation: Solver at step 1: the verdict agent matches, step does not" in table.output


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            b'{"history": [\n  {"role": "a", "content": "x"},\n  oops\n]}',
            "not valid JSON at line 3, column 3",
        ),
        (b'{"resourceSpans": []}\n{"resourceSpans": [}\n', "not valid JSON at line 2, column 20"),
        (b'\xff\xfe{"history": []}', "not UTF-8 text (byte 0xff at offset 0, line 1)"),
        (b'{"history": "not a list"}', "'history'/'conversation'/'messages' must be a list of messages"),
        (b"[1, 2, 3]", "unrecognised format (top level: list)"),
        (b"", "is empty"),
    ],
)
def test_every_load_error_names_the_file_and_what_was_expected(tmp_path: Path, content: bytes, expected: str):
    file = tmp_path / "run.json"
    file.write_bytes(content)
    result = CliRunner().invoke(main, ["attribute", str(file)])
    assert result.exit_code == 1
    assert f"Error: {file}" in result.output and expected in result.output, result.output
    assert "codec" not in result.output and "Traceback" not in result.output
    if "must be a list" not in expected:
        assert "Expected a conversation" in result.output


def test_progress_is_shown_when_asked(tmp_path: Path):
    file = tmp_path / "run.json"
    file.write_text(json.dumps({"history": [{"role": "a", "content": "x" * 100}] * 50}))
    result = CliRunner(env={"FORCE_COLOR": "1"}).invoke(main, ["attribute", str(file), "--progress"])
    assert result.exit_code == 0, result.output
    assert "reading run.json" in result.stderr and "attributing 50 steps with ranker" in result.stderr
    quiet = CliRunner(env={"FORCE_COLOR": "1"}).invoke(main, ["attribute", str(file)])
    assert quiet.stderr == ""  # a small file: no progress by default


def test_an_llm_method_gets_redacted_content(tmp_path: Path, llm):
    file = tmp_path / "run.json"
    history = [{"role": "Ops", "content": "deploy with key sk-proj-Ab3_dE-fGh1_jK2-lMn3_oP4-qRs5"}]
    file.write_text(json.dumps({"history": history, "is_correct": False}))
    answer = json.dumps({"agent": "Ops", "step": 0, "reason": "leaked the key"})
    with llm([answer]) as (server, settings):
        args = ["attribute", str(file), "--method", "all_at_once", "--base-url", settings.base_url]
        result = CliRunner(env={"OPENAI_API_KEY": "sk-x"}).invoke(main, args)
    assert result.exit_code == 0, result.output
    sent = json.dumps(server.requests)
    assert "Ab3_dE" not in sent and "[REDACTED:api_key]" in sent


def test_help_and_version_import_no_subcommand():
    """--help and --version answer from the command registry alone (see docs/benchmarks.md)."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from otel_blame.cli import main\n"
        "for args in (['--help'], ['--version']):\n"
        "    try:\n"
        "        main(args, prog_name='otel-blame')\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = ('grpc', 'openai', 'pydantic', 'rich', 'opentelemetry', 'otel_blame.attribution',"
        " 'otel_blame.processor', 'otel_blame.demo', 'autogen')\n"
        "print('LOADED', sorted({m.split('.')[0] if not m.startswith('otel_blame') else m"
        " for m in sys.modules if m.startswith(heavy)}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert (
        "Commands:" in result.stdout
        and "attribute" in result.stdout
        and "otel-blame, version" in result.stdout
    )
    assert "LOADED []" in result.stdout, result.stdout


def test_every_registered_command_loads_and_every_option_says_what_it_does():
    import click

    from otel_blame.cli import COMMANDS

    ctx = click.Context(main)
    for registered in COMMANDS:
        command = main.get_command(ctx, registered.name)
        assert isinstance(command, click.Command) and command.name == registered.name
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        help_text = CliRunner().invoke(main, [name, "--help"], env={"COLUMNS": "200"}).output
        for marker in ("``", ":func:", ":class:", "\b", "[bold", "[/"):
            assert marker not in help_text, (name, marker)
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.help, f"{name} {param.opts[0]} has no help text"
                if isinstance(param.type, click.Choice):  # its names: in the metavar, or listed in the help
                    listed = "[" + "|".join(param.type.choices) + "]" in help_text
                    said = ", ".join(param.type.choices) in " ".join(help_text.split())
                    assert listed or said, (name, param.opts)


def _trail_dataset(root: Path) -> Path:
    """A TRAIL-layout dataset of one span-tree trace: its page-down failure labelled HIGH, a plan LOW."""
    import gzip

    from tests.conventions import span_trees

    tree = span_trees.gaia_run()
    spans = span_trees.spans_of(tree)
    page_down = next(s for s in spans if s["span_name"] == "PageDownTool")
    plan_call = next(s for s in spans if s["span_name"] == "LiteLLMModel.__call__")
    (root / "traces").mkdir(parents=True)
    (root / "annotations").mkdir()
    (root / "traces" / "gaia-1.json.gz").write_bytes(gzip.compress(json.dumps(tree).encode()))
    errors = [
        {"location": page_down["span_id"], "impact": "HIGH", "category": "Tool-related"},
        {"location": plan_call["span_id"], "impact": "LOW", "category": "Formatting Errors"},
    ]
    (root / "annotations" / "gaia-1.json").write_text(json.dumps({"errors": errors}))
    return root


def test_eval_on_span_level_labels_scores_hits_beside_the_baselines(tmp_path: Path):
    dataset = _trail_dataset(tmp_path / "trail")
    out = tmp_path / "pred.jsonl"
    result = CliRunner().invoke(main, ["eval", "--dataset", str(dataset), "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    table = lines[: next(n for n, line in enumerate(lines) if line.startswith("decided verdicts"))]
    rows = {line.split()[0]: line.split() for line in table if line.split() and "gaia" in line}
    assert set(rows) == {"ranker", "first_step", "last_step", "first_failed", "random"}
    # the first failed step is the failed page-down: a HIGH-impact hit, and its agent and step
    assert rows["first_failed"][3:] == ["100.0", "100.0", "100.0", "100.0", "100.0"]
    # the first step is the manager's facts survey: labelled LOW, not HIGH
    assert rows["first_step"][3:5] == ["100.0", "0.0"]
    record = json.loads(out.read_text())
    assert record["file"] == "gaia-1.json.gz" and record["decisive_agent"] == "search_agent"
    assert all(len(line) <= 80 for line in lines if not line.startswith("predictions:"))
    bad = CliRunner().invoke(
        main, ["eval", "--dataset", str(dataset), "--subset", "swe_bench", "--out", str(out)]
    )
    assert bad.exit_code != 0 and "no traces of subset swe_bench" in bad.output


def _aegis_dataset(path: Path) -> Path:
    """Three AEGIS-layout runs: a debate whose user relays the task, and a two-agent role assignment."""
    import gzip

    question = "What is 6 times 7?"
    runs = [
        {
            "question": question,
            "trajectory": [
                {"step": 1, "agent_name": "User", "content": question},
                {"step": 2, "agent_name": "Assistant1", "content": "6 times 7 is 42."},
                {"step": 3, "agent_name": "User", "content": question},
                {
                    "step": 4,
                    "agent_name": "Assistant2",
                    "content": "Let's assume 6 times 7 is 48. The answer is 48.",
                },
            ],
            "faulty_agents": [{"agent_name": "assistant2", "error_type": "FM-1.1"}],
        },
        {
            "question": question,
            "trajectory": [
                {"step": 1, "agent_name": "RoleAssigner", "content": "1. A mathematician. 2. A checker."},
                {"step": 2, "agent_name": "Solver", "content": "The answer is 48."},
                {"step": 3, "agent_name": "Critic", "content": "48 is verified and correct."},
            ],
            "faulty_agents": [
                {"agent_name": "Solver", "error_type": "FM-2.6"},
                {"agent_name": "Critic", "error_type": "FM-3.3"},
            ],
        },
        {
            "question": "Name the capital of France.",
            "trajectory": [
                {"step": 1, "agent_name": "RoleAssigner", "content": "1. A geographer."},
                {"step": 2, "agent_name": "Solver", "content": "The capital is Lyon."},
            ],
            "faulty_agents": [{"agent_name": "ranker5", "error_type": "FM-1.2"}],
        },
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as out:
        for run in runs:
            out.write(json.dumps(run) + "\n")
    return path


def test_eval_on_aegis_scores_faulty_agents_modes_and_decided_verdicts(tmp_path: Path):
    dataset = _aegis_dataset(tmp_path / "aegis" / "dev.jsonl.gz")
    out = tmp_path / "pred.jsonl"
    result = CliRunner().invoke(main, ["eval", "--dataset", str(dataset.parent), "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    rows: dict[str, list[str]] = {}
    for line in lines:  # the summary table's row of each shape (the first line naming it)
        if line.split():
            rows.setdefault(line.split()[0], line.split())
    assert {"debate", "role-assignment", "all"} <= set(rows)
    # the debate's user only relays the task: the made-up 48 is Assistant2's, a faulty agent
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [record["file"] for record in records] == ["aegis:1", "aegis:2", "aegis:3"]
    assert records[0]["predicted_agent"] == "Assistant2" and records[0]["agent_correct"] is True
    assert records[0]["labelled_modes"] == ["FM-1.1"]
    assert records[2]["faulty_agents"] == [] and records[2]["agent_correct"] is False  # ranker5 never spoke
    assert rows["debate"][1:4] == ["1", "100.0", "33.3"]  # one of three speakers is faulty
    assert "most confident verdicts kept: agent right % (risk-coverage)" in lines
    assert all(len(line) <= 80 for line in lines if not line.startswith("predictions:"))
    only = CliRunner().invoke(
        main, ["eval", "--dataset", str(dataset), "--subset", "debate", "--out", str(out)]
    )
    assert only.exit_code == 0, only.output
    assert len(out.read_text().splitlines()) == 1
