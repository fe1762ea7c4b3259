"""``otel-blame patterns DIR|STORE`` and ``otel-blame top --by pattern``: the failure patterns of saved
traces or of a blame store, in 80 columns or as JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path

from click.testing import CliRunner

from otel_blame.cli import main
from otel_blame.conventions.otlp import sdk_spans_to_proto
from otel_blame.otlp_json import traces_to_json
from otel_blame.patterns import cause_of
from otel_blame.store import StoreConfig, open_store
from otel_blame.store.patterns import StorePatternBook
from tests.processor.spans import failing_search_run, record_agent_run
from tests.store.runs import pattern_runs


def _store(path: Path) -> list:  # noqa: ANN202
    store = open_store(StoreConfig(path=path))
    runs = pattern_runs(StorePatternBook(store.engine, similarity=90, max_per_signature=100), time.time())
    store.add_many(runs)
    store.close()
    return runs


def test_a_store_s_patterns_are_the_ids_the_processor_gave_in_80_columns(tmp_path: Path) -> None:
    runs = _store(tmp_path / "blame-store.sqlite3")
    answer = CliRunner().invoke(main, ["patterns", str(tmp_path / "blame-store.sqlite3"), "--format", "json"])
    assert answer.exit_code == 0, answer.output
    report = json.loads(answer.output)
    counts = {}
    for run in runs:
        if run.pattern_definition.kind == "cause":
            counts[run.pattern] = counts.get(run.pattern, 0) + 1
    assert {p["id"]: p["count"] for p in report["patterns"]} == counts
    assert report["undecided_runs"] == len(runs) - sum(counts.values())
    table = CliRunner().invoke(
        main, ["patterns", str(tmp_path / "blame-store.sqlite3")], env={"COLUMNS": "80"}
    )
    assert table.exit_code == 0, table.output
    assert max(len(line) for line in table.output.splitlines()) <= 80
    top = max(counts, key=counts.get)
    assert top in table.output and "orders_api" in table.output
    live = CliRunner().invoke(
        main,
        [
            "top",
            "--by",
            "pattern",
            "--store",
            str(tmp_path / "blame-store.sqlite3"),
            "--once",
            "--since",
            "24h",
        ],
        env={"COLUMNS": "80"},
    )
    assert live.exit_code == 0, live.output
    assert top in live.output and max(len(line) for line in live.output.splitlines()) <= 80


def test_saved_traces_are_grouped_as_the_processor_groups_them(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    for number, status in enumerate((503, 503, 429, 502)):
        spans = failing_search_run(status)
        (folder / f"search-{number}.json").write_text(traces_to_json(sdk_spans_to_proto(spans)))
    wrong = record_agent_run(
        [("Planner", "Plan: compute 6*7."), ("Solver", "The answer is 41."), ("Critic", "Looks right.")],
        failed=True,
    )
    (folder / "solver.json").write_text(traces_to_json(sdk_spans_to_proto(wrong)))
    (folder / "notes.txt").write_text("not a trace")
    answer = CliRunner().invoke(main, ["patterns", str(folder), "--format", "json"])
    assert answer.exit_code == 0, answer.output
    report = json.loads(answer.output[answer.output.index("{") :])
    (pattern,) = report["patterns"]
    assert (pattern["count"], pattern["dependency"], pattern["service"]) == (4, "web_search", "research-app")
    # the id the processor writes on these traces' spans (the same cause, the same id)
    from otel_blame.attribution.registry import create_method
    from otel_blame.attribution.systemic import describe_failure
    from otel_blame.loaders import load_saved_run

    saved = load_saved_run(folder / "search-0.json")
    verdict = describe_failure(saved.trajectory, create_method("heuristic").attribute(saved.trajectory))
    assert pattern["id"] == cause_of("research-app", "population", saved.trajectory, verdict).candidate_id()
    assert report["undecided_runs"] == 1
    assert "not saved runs" in answer.output  # the text file, said on stderr


def test_a_file_that_is_no_store_is_said_plainly(tmp_path: Path) -> None:
    bad = tmp_path / "notes.sqlite3"
    bad.write_text("hello")
    answer = CliRunner().invoke(main, ["patterns", str(bad)])
    assert answer.exit_code != 0 and "neither a directory of saved traces nor a blame store" in answer.output
