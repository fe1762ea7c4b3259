"""Blame accuracy on the built-in AG2 app under fault injection, per fault kind, with the LLM methods'
cost per run against the scripted server.

Runs ``otel-blame inject --app demo --runs N --seed S --json --dataset-out DIR`` (the offline default
through the in-process processor), then on the labelled dataset it wrote: the positional and random
baselines (the same-run baseline, as a ratio) and every LLM method's calls and tokens per run,
answered by the scripted OpenAI-compatible server (its answers are not a model's, so only the cost
is reported for them, never their accuracy). Prints markdown rows for docs/benchmarks.md.

Usage: python bench/inject_campaign.py [--runs 200] [--seed 0] [--report report.json --dataset DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from attribution_accuracy import scripted_answer  # noqa: E402 - the bench's scripted model

from otel_blame.attribution.llm_client import LLMSettings  # noqa: E402
from otel_blame.attribution.llm_methods import LLM_METHODS  # noqa: E402
from otel_blame.attribution.registry import create_method  # noqa: E402
from otel_blame.demo.scripted_llm import ScriptedLLM  # noqa: E402
from otel_blame.evaluation.who_and_when import evaluate, evaluate_baselines  # noqa: E402

SUBSET = "Algorithm-Generated"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def run_campaign(runs: int, seed: int, dataset: Path) -> tuple[dict, float, float]:
    command = [
        sys.executable, "-m", "otel_blame.cli", "inject", "--app", "demo", "--runs", str(runs),
        "--seed", str(seed), "--json", "--dataset-out", str(dataset),
    ]  # fmt: skip
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"otel-blame inject failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout), time.monotonic() - started, max(load_before, os.getloadavg()[0])


def _score_row(name: str, score: dict) -> str:
    agent, step = _pct(score["agent_accuracy"]), _pct(score["step_accuracy"])
    return f"| {name} | {score['runs']} | {agent} | {step} |"


def accuracy_rows(report: dict) -> list[str]:
    rows = ["| fault kind | runs scored | agent % | step % |", "| --- | ---: | ---: | ---: |"]
    for kind, score in report["by_fault_kind"].items():
        rows.append(_score_row(kind, score))
    rows.append(_score_row("**all**", {**report, "runs": report["scored"]}))
    rows += ["", "| planted agent | runs scored | agent % | step % |", "| --- | ---: | ---: | ---: |"]
    for agent, score in report["by_agent"].items():
        rows.append(_score_row(agent, score))
    return rows


def baseline_rows(report: dict, dataset: Path, files: list[Path]) -> list[str]:
    rows = ["| baseline (same runs) | agent % | step % |", "| --- | ---: | ---: |"]
    best_agent = best_step = 0.0
    for summary in evaluate_baselines(dataset, files):
        rows.append(f"| {summary.name} | {_pct(summary.agent_accuracy)} | {_pct(summary.step_accuracy)} |")
        best_agent = max(best_agent, summary.agent_accuracy)
        best_step = max(best_step, summary.step_accuracy)
    ratio_agent = (report["agent_accuracy"] or 0) / best_agent if best_agent else float("nan")
    ratio_step = (report["step_accuracy"] or 0) / best_step if best_step else float("nan")
    rows.append(
        f"\nheuristic vs the best baseline on the same runs: agent {ratio_agent:.2f}x, step {ratio_step:.2f}x"
    )
    return rows


def llm_cost_rows(dataset: Path, files: list[Path]) -> list[str]:
    kind_of = {p.name: json.loads(p.read_text())["fault_kind"] for p in files}
    rows = [
        "| method | fault kind | runs | LLM calls / run | input tokens / run | output tokens / run "
        "| vs all_at_once (input) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]  # fmt: skip
    reference: dict[str, float] = {}
    with ScriptedLLM(scripted_answer) as server:
        settings = LLMSettings(
            base_url=server.base_url, api_key="scripted", model="scripted", backoff_seconds=0
        )
        for name in LLM_METHODS:
            records = evaluate(create_method(name, llm=settings), dataset, files)
            groups: dict[str, list] = defaultdict(list)
            for record in records:
                groups[kind_of[Path(record.file).name]].append(record)
                groups["all"].append(record)
            for kind in sorted(groups, key=lambda k: (k == "all", k)):
                group = groups[kind]
                n = len(group)
                tokens_in = sum(r.input_tokens for r in group) / n
                if name == "all_at_once":
                    reference[kind] = tokens_in
                ratio = tokens_in / reference[kind] if reference.get(kind) else float("nan")
                calls = sum(r.llm_calls for r in group) / n
                tokens_out = sum(r.output_tokens for r in group) / n
                figures = f"{calls:.1f} | {tokens_in:,.0f} | {tokens_out:,.0f} | {ratio:.2f}x"
                rows.append(f"| {name} | {kind} | {n} | {figures} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report", type=Path, help="reuse a campaign's --json output instead of running one")
    parser.add_argument("--dataset", type=Path, help="the --dataset-out of that campaign")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.report:
            report, seconds, load = json.loads(args.report.read_text()), None, os.getloadavg()[0]
            dataset = args.dataset
        else:
            dataset = Path(tmp) / "dataset"
            report, seconds, load = run_campaign(args.runs, args.seed, dataset)
        files = sorted((dataset / SUBSET).glob("*.json"), key=lambda p: int(p.stem))
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
            f"load average up to {load:.1f}" + (f"; campaign wall time {seconds:.0f} s" if seconds else "")
        )
        print(f"statuses: {report['statuses']}; method {report['method']}; problems: {report['problems']}")
        print(f"expected calibration error (agent): {report['expected_calibration_error']}\n")
        print("\n".join(accuracy_rows(report)))
        print()
        print("\n".join(baseline_rows(report, dataset, files)))
        print()
        print("\n".join(llm_cost_rows(dataset, files)))


if __name__ == "__main__":
    main()
