"""Attribution accuracy and cost on a Who&When-layout dataset.

Measures, in one run:
1. the positional baselines and the random one (mean of ``--seeds`` seeds) on each subset, and the
   offline ``heuristic`` under k-fold cross-validation across both subsets (``--folds``, seed
   ``--cv-seed``): weights refit on the training folds only, each log scored once by weights that
   never saw it; pooled accuracy, per-fold spread, and the margin over the best baseline. The
   in-sample figure of the shipped default weights is printed too, labelled as such;
2. an ablation: the same cross-validation with each signal switched off;
3. the heuristic's CPU time per 100 steps, on a synthetic 100-step run and over the dataset's logs,
   as ratios to two same-run baselines: the random method, and parsing the same run from JSON;
4. each LLM method's LLM calls and input/output tokens per log, against the scripted
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
import os
import re
import statistics
import time
from pathlib import Path

from otel_blame.attribution.heuristic import HeuristicAttribution
from otel_blame.attribution.llm_client import LLMSettings
from otel_blame.attribution.llm_methods import LLM_METHODS
from otel_blame.attribution.random_baseline import RandomAttribution
from otel_blame.attribution.ranker import RankerAttribution
from otel_blame.attribution.registry import create_method
from otel_blame.attribution.signals import SIGNAL_NAMES
from otel_blame.datasets.who_and_when import SUBSETS, iter_cases
from otel_blame.demo.scripted_llm import ScriptedLLM  # the class tests.support re-exports
from otel_blame.evaluation.who_and_when import (
    BaselineSummary,
    best_baseline,
    evaluate,
    evaluate_baselines,
    select_files,
    summarise,
)
from otel_blame.training.crossval import FIXED, CrossValidation, ablate, cross_validate, load_runs
from otel_blame.trajectory import Step, Trajectory


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


INJECTED = "Injected"
_extra: list[Path] = []


def labelled_runs(dataset: Path) -> list:
    """The Who&When runs, plus the labelled runs of fault-injection campaigns given with
    ``--injected DIR`` (``otel-blame inject --dataset-out DIR``) as a third group, ``Injected``: they
    are fitted on and scored under the same folds, and count as one group in the objective."""
    runs = load_runs(dataset)
    for folder in _extra:
        injected = load_runs(folder, ["Algorithm-Generated"])
        for run in injected:
            run.subset = INJECTED
        runs.extend(injected)
    return runs


def accuracy_rows(
    dataset: Path, seeds: int, folds: int, cv_seed: int
) -> tuple[list[str], list[str], CrossValidation, list[BaselineSummary]]:
    files = select_files(dataset, SUBSETS)
    baselines = evaluate_baselines(dataset, files, random_seeds=seeds)
    in_sample = {s.subset: s for s in summarise(evaluate(HeuristicAttribution(), dataset, files))}
    runs = labelled_runs(dataset)
    cv = cross_validate(runs, k=folds, seed=cv_seed)
    rows, margins = [], []
    for subset in SUBSETS:
        if subset not in in_sample:
            continue
        count = in_sample[subset].traces
        agent, step = cv.accuracy(subset)
        agent_sd, step_sd = cv.spread(subset)
        rows.append(
            f"| **heuristic, {folds}-fold CV** (mean ± sd over folds) | {subset} | {count} | "
            f"**{_pct(agent)}** ± {_pct(agent_sd)} | **{_pct(step)}** ± {_pct(step_sd)} |"
        )
        rows.append(
            f"| heuristic, default weights (in-sample: fit on these logs) | {subset} | {count} | "
            f"{_pct(in_sample[subset].agent_accuracy)} | {_pct(in_sample[subset].step_accuracy)} |"
        )
        for b in (b for b in baselines if b.subset == subset):
            rows.append(
                f"| {b.name} ({b.description}) | {subset} | {b.traces} | {_pct(b.agent_accuracy)} | "
                f"{_pct(b.step_accuracy)} |"
            )
        by_agent, by_step = best_baseline(baselines, subset)
        margins.append(
            f"| {subset} | {_pct(agent - by_agent.agent_accuracy)} (vs {by_agent.name}) | "
            f"{_pct(step - by_step.step_accuracy)} (vs {by_step.name}) |"
        )
    if _extra:
        agent, step = cv.accuracy(INJECTED)
        agent_sd, step_sd = cv.spread(INJECTED)
        count = sum(1 for run in runs if run.subset == INJECTED)
        rows.append(
            f"| **heuristic, {folds}-fold CV** (mean ± sd over folds) | {INJECTED} (fault-injection "
            f"campaign) | {count} | **{_pct(agent)}** ± {_pct(agent_sd)} | "
            f"**{_pct(step)}** ± {_pct(step_sd)} |"
        )
    return rows, margins, cv, baselines


def repeat_rows(dataset: Path, folds: int, repeats: int) -> str:
    """The same cross-validation over other random fold splits (seeds 0..repeats-1): how much the
    reported figure depends on one split."""
    runs = labelled_runs(dataset)
    results = [cross_validate(runs, k=folds, seed=seed) for seed in range(repeats)]
    lines = [
        "| fold seed | " + " | ".join(f"{s} CV agent / step %" for s in SUBSETS) + " |",
        "| ---: | " + " | ".join("---" for _ in SUBSETS) + " |",
    ]
    for seed, cv in enumerate(results):
        cells = [f"{_pct(cv.accuracy(s)[0])} / {_pct(cv.accuracy(s)[1])}" for s in SUBSETS]
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    means = []
    for subset in SUBSETS:
        agent = statistics.fmean(cv.accuracy(subset)[0] for cv in results)
        step = statistics.fmean(cv.accuracy(subset)[1] for cv in results)
        means.append(f"**{_pct(agent)} / {_pct(step)}**")
    lines.append("| mean | " + " | ".join(means) + " |")
    return "\n".join(lines)


def fold_rows(cv: CrossValidation) -> list[str]:
    rows = []
    for fold in cv.folds:
        cells = []
        for subset in SUBSETS:
            runs, agent, step = fold.held_out.get(subset, (0, 0, 0))
            cells.append(f"{agent}/{runs}, {step}/{runs}" if runs else "-")
        chosen = ", ".join(
            f"{name} {value:g}" for name, value in fold.weights.as_dict().items() if name not in FIXED
        )
        rows.append(f"| {fold.fold} | " + " | ".join(cells) + f" | {chosen} |")
    return rows


def ablation_rows(dataset: Path, folds: int, cv_seed: int, full: CrossValidation) -> list[str]:
    runs = labelled_runs(dataset)
    rows = []
    for signal in SIGNAL_NAMES:
        if signal in FIXED:
            continue
        without = ablate(runs, signal, k=folds, seed=cv_seed)
        cells = []
        for subset in SUBSETS:
            agent, step = without.accuracy(subset)
            full_agent, full_step = full.accuracy(subset)
            change = f"{100 * (full_agent - agent):+.1f} / {100 * (full_step - step):+.1f}"
            cells.append(f"{_pct(agent)} / {_pct(step)} ({change})")
        rows.append(f"| {signal} | " + " | ".join(cells) + " |")
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


def _cpu_median(function, repeats: int) -> float:
    """Median CPU seconds of ``function`` (process time: less distorted than wall time when other
    processes compete for the 2 cores)."""
    samples = []
    for _ in range(repeats):
        started = time.process_time()
        function()
        samples.append(time.process_time() - started)
    return statistics.median(samples)


def timing_rows(dataset: Path, repeats: int = 50) -> list[str]:
    """The offline default's (the ranker's) and the previous default's (``signals``) time per 100
    steps on the synthetic run and on the dataset's logs, each with same-run baselines: the random
    method, and reading the same run from its JSON (what any consumer of a trace must do at least)."""
    methods = (
        ("ranker (default)", RankerAttribution()),
        ("signals (previous default)", HeuristicAttribution()),
    )
    random_method = RandomAttribution(0)
    synthetic = synthetic_run()
    raw = synthetic.model_dump_json()
    r = _cpu_median(lambda: random_method.attribute(synthetic), repeats)
    p = _cpu_median(lambda: Trajectory.model_validate_json(raw), repeats)
    rows = []
    for what, method in methods:
        method.attribute(synthetic)
        h = _cpu_median(lambda method=method: method.attribute(synthetic), repeats)
        rows.append(
            f"| synthetic 100-step run ({len(raw):,} bytes of JSON), {what} | {1000 * h:.2f} | "
            f"{1000 * r:.3f} ({h / r:.0f}x) | {1000 * p:.3f} ({h / p:.0f}x) |"
        )
    runs = [case.trajectory for case in iter_cases(dataset)]
    raws = [run.model_dump_json() for run in runs]
    steps = sum(len(run.steps) for run in runs)

    def over_all(function) -> float:
        return _cpu_median(lambda: [function(run) for run in runs], max(3, repeats // 10)) * 100 / steps

    r = over_all(random_method.attribute)
    p = _cpu_median(lambda: [Trajectory.model_validate_json(raw) for raw in raws], 5) * 100 / steps
    for what, method in methods:
        h = over_all(method.attribute)
        rows.append(
            f"| the {len(runs)} dataset logs ({steps:,} steps), per 100 steps, {what} | {1000 * h:.2f} | "
            f"{1000 * r:.3f} ({h / r:.0f}x) | {1000 * p:.3f} ({h / p:.0f}x) |"
        )
    return rows


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
    if "Check of candidate step" in text:
        step = int(re.search(r"Check of candidate step (\d+)", text).group(1))
        return json.dumps({"decisive": step >= total // 3, "confidence": 0.6, "reason": "scripted"})
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
    reference: dict[str, float] = {}
    with ScriptedLLM(scripted_answer) as server:
        settings = LLMSettings(
            base_url=server.base_url, api_key="scripted", model="scripted", backoff_seconds=0
        )
        for name in LLM_METHODS:
            method = create_method(name, llm=settings)
            for summary in summarise(evaluate(method, dataset, files)):
                if name == "all_at_once":
                    reference[summary.subset] = summary.mean_input_tokens
                ratio = summary.mean_input_tokens / reference[summary.subset] if reference else float("nan")
                rows.append(
                    f"| {name} | {summary.subset} | {summary.traces} | {summary.mean_llm_calls:.1f} | "
                    f"{summary.mean_input_tokens:,.0f} | {summary.mean_output_tokens:,.0f} | "
                    f"{summary.failed} | {ratio:.2f}x |"
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=10, help="seeds of the random baseline")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--cv-seed", type=int, default=0)
    parser.add_argument("--no-ablation", action="store_true")
    parser.add_argument(
        "--injected",
        type=Path,
        action="append",
        default=[],
        help="a fault-injection campaign's labelled runs (otel-blame inject --dataset-out DIR), fitted on",
    )
    parser.add_argument(
        "--cv-repeats", type=int, default=4, help="repeat the CV with fold seeds 0..N-1 (other splits)"
    )
    parser.add_argument("--llm-limit", type=int, default=None, help="logs per subset for the LLM cost part")
    args = parser.parse_args()
    print(
        f"Measured {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on 2 cores / 24 GiB polyglot.\n"
    )
    _extra.extend(args.injected)
    rows, margins, cv, _ = accuracy_rows(args.dataset, args.seeds, args.folds, args.cv_seed)
    print("| method | subset | logs | agent % | step % |")
    print("| --- | --- | ---: | ---: | ---: |")
    print("\n".join(rows))
    print()
    print("| subset | CV agent margin over the best baseline (points) | CV step margin (points) |")
    print("| --- | --- | --- |")
    print("\n".join(margins))
    print()
    print(
        "| fold | "
        + " | ".join(f"{s} agent, step (held out)" for s in SUBSETS)
        + " | weights chosen on the other folds |"
    )
    print("| ---: | " + " | ".join("---" for _ in SUBSETS) + " | --- |")
    print("\n".join(fold_rows(cv)))
    if args.cv_repeats > 1:
        print()
        print(repeat_rows(args.dataset, args.folds, args.cv_repeats))
    if not args.no_ablation:
        print()
        print(
            "| signal switched off | "
            + " | ".join(f"{s} CV agent / step % (full minus this)" for s in SUBSETS)
            + " |"
        )
        print("| --- | " + " | ".join("---" for _ in SUBSETS) + " |")
        print("\n".join(ablation_rows(args.dataset, args.folds, args.cv_seed, cv)))
    print()
    print(f"Heuristic CPU time (median, process time; load average {os.getloadavg()[0]:.1f} at the start):")
    print()
    print(
        "| run | heuristic ms | random baseline ms (heuristic ×) | JSON parse of the run ms (heuristic ×) |"
    )
    print("| --- | ---: | ---: | ---: |")
    print("\n".join(timing_rows(args.dataset)))
    print()
    print(
        "| LLM method | subset | logs | LLM calls per log | input tokens per log | output tokens per log "
        "| unanswered | input tokens vs all_at_once |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(llm_cost_rows(args.dataset, args.llm_limit)))


if __name__ == "__main__":
    main()
