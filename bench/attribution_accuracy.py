"""Attribution accuracy and cost on a Who&When-layout dataset.

Measures, in one run:
1. the offline ``heuristic`` on each subset (exact-match agent and step accuracy, step within
   ±1 / ±3, milliseconds per log), next to the random baseline scored the same way and averaged
   over ``--seeds`` seeds;
2. the heuristic's time on a synthetic 100-step run (median of repeats), as a ratio to the
   random baseline's time on the same run;
3. each LLM method's LLM calls and input/output tokens per log, against the scripted
   OpenAI-compatible server (no real LLM: the answers are scripted, so only the cost is
   meaningful, not the accuracy). The script answers as a plausible model would: the decisive
   error is placed at the middle step of each log.

Usage: python bench/attribution_accuracy.py --dataset ../shared/who_and_when/dev [--llm-limit N]
Prints a Markdown section for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import time
from pathlib import Path

from otel_blame.attribution.heuristic import HeuristicAttribution
from otel_blame.attribution.llm_client import LLMSettings
from otel_blame.attribution.llm_methods import LLM_METHODS
from otel_blame.attribution.random_baseline import RandomAttribution
from otel_blame.attribution.registry import create_method
from otel_blame.bench.evaluate import evaluate, select_files, summarise
from otel_blame.bench.who_and_when import SUBSETS
from otel_blame.demo.scripted_llm import ScriptedLLM
from otel_blame.trajectory import Step, Trajectory


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def accuracy_rows(dataset: Path, seeds: int) -> list[str]:
    files = select_files(dataset, SUBSETS)
    rows = []
    heuristic = summarise(evaluate(HeuristicAttribution(), dataset, files))
    per_seed = [summarise(evaluate(RandomAttribution(seed), dataset, files)) for seed in range(seeds)]
    for position, summary in enumerate(heuristic):
        rows.append(
            f"| heuristic | {summary.subset} | {summary.traces} | {_pct(summary.agent_accuracy)} | "
            f"{_pct(summary.step_accuracy)} | {_pct(summary.step_within_1)} | "
            f"{_pct(summary.step_within_3)} | {1000 * summary.mean_seconds:.2f} |"
        )
        randoms = [seed_summaries[position] for seed_summaries in per_seed]

        def mean(field: str, randoms: list = randoms) -> float:
            return statistics.fmean(getattr(r, field) for r in randoms)

        rows.append(
            f"| random (mean of {seeds} seeds) | {summary.subset} | {summary.traces} | "
            f"{_pct(mean('agent_accuracy'))} | {_pct(mean('step_accuracy'))} | "
            f"{_pct(mean('step_within_1'))} | {_pct(mean('step_within_3'))} | "
            f"{1000 * mean('mean_seconds'):.2f} |"
        )
    return rows


def synthetic_run(steps: int = 100) -> Trajectory:
    built = []
    for index in range(steps):
        agent = f"agent_{index % 5}"
        if index % 4 == 3:
            content = (
                f"exitcode: {index % 3} (execution)\nCode output: value {index * 37}\n" + "row,1,2\n" * 40
            )
            built.append(Step(index=index, agent="executor", content=content, kind="code_execution"))
        else:
            text = f"Step {index}: I checked the source and found {index * 37}. " * 30
            built.append(Step(index=index, agent=agent, content=text + "\n```python\nprint(1)\n```"))
    return Trajectory(steps=built)


def timing_row(repeats: int = 50) -> str:
    trajectory = synthetic_run()
    timings = {}
    for name, method in (("heuristic", HeuristicAttribution()), ("random", RandomAttribution(0))):
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            method.attribute(trajectory)
            samples.append(time.perf_counter() - started)
        timings[name] = statistics.median(samples)
    ratio = timings["heuristic"] / timings["random"]
    return (
        f"heuristic on a synthetic 100-step run: median {1000 * timings['heuristic']:.2f} ms "
        f"({repeats} repeats), {ratio:.1f}x the random baseline's {1000 * timings['random']:.3f} ms."
    )


def scripted_answer(request: dict) -> str:
    """A plausible model: the decisive error sits in the middle of what it is shown (step-by-step:
    the first step in the second half of the log)."""
    text = "\n".join(m["content"] for m in request["messages"] if m["role"] != "system")
    shown = [int(s) for s in re.findall(r"<<STEP (\d+) \| agent: ", text)]
    agents = dict(re.findall(r"<<STEP (\d+) \| agent: (.*?) \| ", text))
    everything = re.search(r"Agents in this run: (.*)", text)
    total = int(re.search(r"The full log has (\d+) steps", text).group(1))
    target = shown[len(shown) // 2] if shown else 0
    if "Rank up to three suspects" in text:
        return json.dumps({"suspects": [{"step": target, "agent": agents.get(str(target), "")}]})
    if "Counterfactual check of step" in text:
        return json.dumps({"fixes_failure": True, "confidence": 0.7, "reason": "scripted"})
    if "Look only at step" in text:
        step = int(re.search(r"Look only at step (\d+)", text).group(1))
        return json.dumps({"error": step >= total // 2, "reason": "scripted"})
    if "first half" in text:
        return json.dumps({"half": "first", "reason": "scripted"})
    agent = agents.get(str(target)) or (everything.group(1).split(", ")[0] if everything else "")
    return json.dumps(
        {"found": True, "agent": agent, "step": target, "reason": "scripted", "confidence": 0.6}
    )


def llm_cost_rows(dataset: Path, limit: int | None) -> list[str]:
    rows = []
    files = select_files(dataset, SUBSETS, limit)
    with ScriptedLLM(scripted_answer) as server:
        settings = LLMSettings(
            base_url=server.base_url, api_key="scripted", model="scripted", backoff_seconds=0
        )
        for name in LLM_METHODS:
            method = create_method(name, llm=settings)
            for summary in summarise(evaluate(method, dataset, files)):
                rows.append(
                    f"| {name} | {summary.subset} | {summary.traces} | {summary.mean_llm_calls:.1f} | "
                    f"{summary.mean_input_tokens:,.0f} | {summary.mean_output_tokens:,.0f} | "
                    f"{summary.failed} |"
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--llm-limit", type=int, default=None, help="logs per subset for the LLM cost part")
    args = parser.parse_args()
    print(
        f"Measured {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on 2 cores / 24 GiB polyglot.\n"
    )
    print("| method | subset | logs | agent % | step % | step ±1 % | step ±3 % | ms per log |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(accuracy_rows(args.dataset, args.seeds)))
    print()
    print(timing_row())
    print()
    print(
        "| LLM method | subset | logs | LLM calls per log | input tokens per log | output tokens per log "
        "| unanswered |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(llm_cost_rows(args.dataset, args.llm_limit)))


if __name__ == "__main__":
    main()
