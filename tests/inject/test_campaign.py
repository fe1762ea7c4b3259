"""Fault-injection campaigns on the real AG2 demo app (scripted LLM), through the real in-process
processor: every fault kind planted, ground truth consistent with the attributed trajectory, the
labelled dataset scored by ``otel-blame eval``, the HTML report self-contained."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from otel_blame.cli import main
from otel_blame.inject import demo_app
from tests.inject.conftest import OTHER_FRAMEWORKS

pytest.importorskip("autogen")
pytestmark = pytest.mark.slow  # real AG2 runs in an app process per campaign

SEED_COVERING_EVERY_KIND = 4
RUNS = 6


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("campaign")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", OTHER_FRAMEWORKS)
        result = _run_campaign(out)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), out


def _run_campaign(out: Path):  # noqa: ANN202 - click's Result
    return CliRunner().invoke(
        main,
        [
            "inject",
            "--app",
            "demo",
            "--runs",
            str(RUNS),
            "--seed",
            str(SEED_COVERING_EVERY_KIND),
            "--json",
            "--html",
            str(out / "report.html"),
            "--dataset-out",
            str(out / "dataset"),
            "--calibration-out",
            str(out / "calibration.json"),
        ],
        catch_exceptions=False,
    )


def test_every_fault_kind_is_planted_through_the_message_path(campaign):
    report, _ = campaign
    assert report["runs"] == RUNS
    planted = {r["fault"]["kind"] for r in report["results"] if r["fault"]}
    assert planted == set(demo_app.FAULTS)  # the kinds the app declares, when --fault is not given
    assert report["baseline"]["status"] == "clean_passed"
    assert [s[0] for s in report["baseline"]["steps"]] == ["user", "planner", "coder", "executor", "reviewer"]
    # a planted fault changes what the later agents do: most runs fail, none crash or hang
    assert set(report["statuses"]) <= {"attributed", "masked"}
    assert report["statuses"]["attributed"] >= RUNS - 2
    assert report["scored"] == report["statuses"]["attributed"]


def test_the_report_scores_runs_against_the_planted_agent_and_step(campaign):
    report, _ = campaign
    scored = [r for r in report["results"] if r["status"] == "attributed"]
    for record in scored:
        prediction, fault = record["prediction"], record["fault"]
        assert record["agent_correct"] == (prediction["agent"] == fault["agent"])
        assert record["step_correct"] == (prediction["step"] == fault["step"])
        assert prediction["method"] == "heuristic" and 0 <= prediction["confidence"] <= 1
    agent_right = sum(r["agent_correct"] for r in scored) / len(scored)
    assert report["agent_accuracy"] == pytest.approx(agent_right, abs=1e-4)
    assert 0 <= report["step_accuracy"] <= 1
    assert sum(s["runs"] for s in report["by_fault_kind"].values()) == len(scored)
    assert sum(s["runs"] for s in report["by_agent"].values()) == len(scored)
    assert sum(n for row in report["confusion"].values() for n in row.values()) == len(scored)
    assert sum(b["runs"] for b in report["calibration"]) == len(scored)


def test_the_dataset_holds_the_planted_faults_where_the_processor_saw_them(campaign):
    report, out = campaign
    files = sorted((out / "dataset" / "Algorithm-Generated").glob("*.json"), key=lambda p: int(p.stem))
    scored = [r for r in report["results"] if r["status"] == "attributed"]
    assert len(files) == len(scored)
    for path, record in zip(files, scored, strict=True):
        log = json.loads(path.read_text())
        fault = record["fault"]
        assert (log["mistake_agent"], int(log["mistake_step"])) == (fault["agent"], fault["step"])
        step = log["history"][fault["step"]]
        assert step["name"] == fault["agent"]
        kind = fault["kind"]
        if kind == "tool_error":
            assert step["content"].startswith("exitcode: 1") and "503" in step["content"]
        elif kind == "terminate":
            assert step["content"].rstrip().endswith("TERMINATE")
        elif kind in ("number", "wrong_tool_result"):
            new = re.search(r"became (\S+)$", fault["description"]).group(1)
            assert new in step["content"]
        elif kind == "contradict_instruction":
            added = re.search(r": '(.+)'$", fault["description"]).group(1)
            assert added in step["content"]
        elif kind == "drop_instruction":
            dropped = re.search(r": '(.+)'$", fault["description"]).group(1)
            assert dropped not in step["content"]


def test_eval_scores_the_dataset_as_the_campaign_did(campaign, tmp_path):
    report, out = campaign
    predictions = tmp_path / "predictions.jsonl"
    result = CliRunner().invoke(
        main,
        ["eval", "--dataset", str(out / "dataset"), "--method", "heuristic", "--out", str(predictions)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in predictions.read_text().splitlines()]
    scored = [r for r in report["results"] if r["status"] == "attributed"]
    assert len(rows) == len(scored)
    eval_agent = sum(bool(r["agent_correct"]) for r in rows) / len(rows)
    assert eval_agent == pytest.approx(report["agent_accuracy"], abs=1e-4)


def test_the_html_report_is_self_contained_with_plots(campaign):
    _, out = campaign
    html = (out / "report.html").read_text()
    assert html.count("<svg") >= 3
    assert "reliability diagram" in html and "Confusion" in html
    external = re.findall(r"""(?:src|href)=["']?(?:https?:)?//""", html)
    assert not external, external
    assert "<script" not in html


def test_the_calibration_file_is_fitted_on_the_campaign(campaign):
    from otel_blame.attribution.calibration import Calibration

    report, out = campaign
    calibration = Calibration.load(out / "calibration.json")
    assert calibration.method == "heuristic" and calibration.target == "agent"
    assert calibration.runs == report["scored"]
    values = [p.calibrated for p in calibration.points]
    assert values == sorted(values)


def test_a_chosen_agent_step_and_fault_kind_are_where_the_fault_goes(monkeypatch):
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", OTHER_FRAMEWORKS)
    args = ["inject", "--json", "--runs", "2", "--agent", "planner", "--step", "1", "--fault", "number"]
    result = CliRunner().invoke(main, args)
    report = json.loads(result.stdout)
    faults = [(r["fault"]["kind"], r["fault"]["agent"], r["fault"]["step"]) for r in report["results"]]
    assert faults == [("number", "planner", 1)] * 2
    assert report["baseline"]["eligible"] == {"number": 1}


def test_an_agent_that_never_speaks_leaves_nothing_to_plant(monkeypatch):
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", OTHER_FRAMEWORKS)
    result = CliRunner().invoke(main, ["inject", "--json", "--runs", "2", "--agent", "nobody"])
    report = json.loads(result.stdout)
    assert result.exit_code == 1
    assert report["statuses"] == {"no_target": 2}
    assert any("no message of the clean run can take the chosen faults" in p for p in report["problems"])
