"""What a newcomer trips on at the command line (issue 26), each pinned by a test that failed before
its fix: a method reported under another name, agent names compared by case, the default method
the docs name, and every output fitting 80 columns with the verdict first and sentences wrapped."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from otel_blame.attribution.registry import DEFAULT_METHOD
from otel_blame.cli import main
from otel_blame.demo import Blame, format_blame_table
from otel_blame.demo.scenario import TASKS
from otel_blame.store import StoreConfig, open_store
from tests.store.runs import WHO_AND_WHEN, attributed_runs

HAND_CRAFTED = WHO_AND_WHEN / "Hand-Crafted"
DOCS = Path(__file__).resolve().parents[2] / "docs"
README = DOCS.parent / "README.md"


def _json(*args: str) -> dict:
    result = CliRunner().invoke(main, ["attribute", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _lines(output: str) -> list[str]:
    return [line.rstrip() for line in output.splitlines()]


# --- 1. one name per method ---------------------------------------------------------------------


@pytest.mark.parametrize("method", ["signals", "heuristic", "ranker"])
def test_a_method_is_reported_under_the_name_asked_for(method: str) -> None:
    assert _json(str(HAND_CRAFTED / "1.json"), "--method", method)["method"] == method


def test_the_docs_name_the_default_method_the_code_uses() -> None:
    quickstart = " ".join((DOCS / "quickstart.md").read_text(encoding="utf-8").split())
    said = re.findall(r"default(?: offline)?(?: attribution)? method[,:]? `(\w+)`", quickstart)
    said += re.findall(r"`(\w+)` is the default", quickstart)
    assert said and set(said) == {DEFAULT_METHOD}, said
    help_text = CliRunner().invoke(main, ["attribute", "--help"]).output
    assert f"[default: {DEFAULT_METHOD}]" in " ".join(help_text.split())
    assert "'heuristic' needs no LLM" not in help_text  # the option's help named another default


# --- 2. names compared case- and space-insensitively --------------------------------------------


def test_a_known_answer_matches_a_verdict_that_spells_the_agent_otherwise(tmp_path: Path) -> None:
    verdict = _json(str(HAND_CRAFTED / "11.json"))
    log = json.loads((HAND_CRAFTED / "11.json").read_text())
    log["mistake_agent"] = verdict["agent"].lower()  # "Websurfer" in the file, "WebSurfer" in the steps
    log["mistake_step"] = verdict["step"]
    assert log["mistake_agent"] != verdict["agent"]
    file = tmp_path / "11.json"
    file.write_text(json.dumps(log))
    again = _json(str(file))
    assert again["annotation"]["agent_matches"] is True and again["annotation"]["step_matches"] is True
    table = CliRunner().invoke(main, ["attribute", str(file)], env={"COLUMNS": "80"}).output
    assert "the verdict agent and step match" in " ".join(table.split())


# --- 7. every CLI output fits 80 columns, verdict first -------------------------------------------


def _succeeded(tmp_path: Path, name: str = "11.json") -> Path:
    log = json.loads((HAND_CRAFTED / name).read_text())
    log["is_correct"] = True
    log.pop("is_corrected", None)
    file = tmp_path / f"succeeded-{name}"
    file.write_text(json.dumps(log))
    return file


def test_a_successful_long_run_says_so_first_and_wrapped(tmp_path: Path) -> None:
    file = _succeeded(tmp_path)  # 130 steps
    output = CliRunner().invoke(main, ["attribute", str(file)], env={"COLUMNS": "80"}).output
    lines = _lines(output)
    assert max(len(line) for line in lines[1:]) <= 80
    said = next(i for i, line in enumerate(lines) if "The run succeeded" in line)
    table = next(i for i, line in enumerate(lines) if line.strip().startswith("step"))
    assert said < table, "the verdict comes before the 130-row table"
    assert "Pass --assume-failed" in " ".join(" ".join(lines[said : said + 3]).split())


def test_the_assume_failed_sentence_is_wrapped_and_does_not_say_nothing_was_blamed(tmp_path: Path) -> None:
    file = _succeeded(tmp_path, "1.json")
    output = (
        CliRunner().invoke(main, ["attribute", str(file), "--assume-failed"], env={"COLUMNS": "80"}).output
    )
    lines = _lines(output)
    assert max(len(line) for line in lines[1:]) <= 80
    flat = " ".join(output.split())
    assert "nothing to blame" not in flat and "nothing blamed" not in flat
    assert "The run succeeded; a step was blamed anyway, as if it had failed, as asked." in flat
    json_run = CliRunner().invoke(main, ["attribute", str(file), "--assume-failed", "--json"])
    assert all(len(line) <= 80 for line in json_run.stderr.splitlines())


def test_long_agent_names_are_whole_or_cut_at_a_word(tmp_path: Path) -> None:
    names = ["gaia-annotation-expert", "Validation_Expert", "a-forty-character-agent-name-for-testing"]
    history = [
        {"role": "assistant", "name": names[i % 3], "content": f"step {i}: the total is {i * 3}"}
        for i in range(6)
    ]
    file = tmp_path / "long-names.json"
    file.write_text(json.dumps({"history": history, "question": "What is the total?"}))
    output = CliRunner().invoke(main, ["attribute", str(file)], env={"COLUMNS": "80"}).output
    lines = _lines(output)
    assert max(len(line) for line in lines[1:]) <= 80
    rows = [line for line in lines if re.match(r"^\s+[►?◆ ]?\d+\s{2,}", line)]
    assert len(rows) == 6
    for row in rows:
        shown = re.split(r"\s{2,}", row.strip())[1]
        assert shown in names or (
            shown.endswith("…") and any(re.match(re.escape(shown[:-1]) + r"([-_ ]|$)", n) for n in names)
        ), shown  # "gaia-annotation-expert" whole; a longer name cut after a word, never inside one


def test_the_demo_s_table_fits_80_columns() -> None:
    task = next(task for task in TASKS if task.fault_agent is not None)
    blame = Blame("ab" * 16, task.name, "coder", 2, "word " * 40, 0.5, DEFAULT_METHOD, "cd" * 8)
    table = format_blame_table(blame, task, columns=80)
    assert max(len(line) for line in table.splitlines()) == 80


def test_inject_list_apps_gives_each_app_two_lines_at_most_at_80_columns() -> None:
    result = CliRunner().invoke(main, ["inject", "--list-apps"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = _lines(result.output)
    assert max(len(line) for line in lines) <= 80
    starts = [
        i for i, line in enumerate(lines) if re.match(r"^[a-z_]+\s{2,}\w", line) and "framework" not in line
    ]
    assert len(starts) >= 7
    for start, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        shape = [line for line in lines[start + 1 : end] if line.startswith("    ")]
        assert 1 <= len(shape) <= 2, lines[start:end]


# --- 8. `otel-blame top` --------------------------------------------------------------------------


@pytest.fixture
def store_file(tmp_path: Path) -> tuple[Path, list]:
    path = tmp_path / "blame-store.sqlite3"
    store = open_store(StoreConfig(path=path))
    runs = attributed_runs(8, start=time.time() - 600, spacing=60, services=("research-agents",))
    for run in runs:
        store.add(run)
    store.close()
    return path, runs


def test_top_reads_a_store_file_and_once_prints_no_quit_hint(store_file: tuple[Path, list]) -> None:
    path, runs = store_file
    result = CliRunner().invoke(main, ["top", "--store", str(path), "--once", "--all"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert f"{len(runs)} blames" in result.output
    assert "Ctrl-C" not in result.output
    lines = _lines(result.output)
    assert max(len(line) for line in lines) <= 80
    rows = [line for line in lines if "heuristic" in line]  # the leaderboard rows (one method)
    assert rows and all("research-agents" in row for row in rows)  # the service is not cut


def test_top_counts_decided_verdicts_unless_asked_for_all(store_file: tuple[Path, list]) -> None:
    path, runs = store_file
    decided = sum(run.decided for run in runs)
    assert 0 < decided < len(runs)
    result = CliRunner().invoke(main, ["top", "--store", str(path), "--once"], env={"COLUMNS": "120"})
    assert f"{decided} blames (decided verdicts; {len(runs) - decided} undecided not counted" in " ".join(
        result.output.split()
    )


def test_top_says_when_a_file_is_not_a_blame_store(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-store.sqlite3"
    bad.write_text("hello")
    result = CliRunner().invoke(main, ["top", "--store", str(bad), "--once"])
    assert result.exit_code == 1 and "cannot be read as a blame store" in result.output


def test_every_command_s_help_fits_80_columns() -> None:
    from otel_blame.cli import COMMANDS

    for name in ["", *(command.name for command in COMMANDS)]:
        result = CliRunner().invoke(main, [*([name] if name else []), "--help"], env={"COLUMNS": "80"})
        assert result.exit_code == 0, (name, result.output)
        wide = [line for line in result.output.splitlines() if len(line) > 80]
        assert not wide, (name, wide)  # a Choice's names listed in the help text, not the metavar


def test_eval_s_tables_fit_80_columns(tmp_path: Path) -> None:
    dataset = tmp_path / "dataset" / "Hand-Crafted"
    dataset.mkdir(parents=True)
    for name in ("1.json", "7.json"):
        (dataset / name).write_bytes((HAND_CRAFTED / name).read_bytes())
    result = CliRunner().invoke(
        main,
        ["eval", "--dataset", str(dataset.parent), "--out", str(tmp_path / "out")],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.output
    assert "margin over best baseline" in result.output
    wide = [line for line in result.output.splitlines() if len(line) > 80 and str(tmp_path) not in line]
    assert not wide, wide
