"""What escalation to an LLM costs per run on a Who&When-layout dataset, against all-at-once.

Runs, on every log of both subsets, against the scripted OpenAI-compatible server (no real LLM:
the answers are scripted, so the calls and tokens are what this measures, not accuracy):

- ``all_at_once``, the baseline (the whole log in one request, one per chunk when it is too long);
- the offline default escalating with ``undecided`` (only the verdicts the ranker leaves undecided
  go to ``guided_check``) and with ``always`` (every verdict does);

each escalation under two scripts that bound its cost: ``first`` confirms the first candidate
checked (one call per escalated run, the cheapest) and ``none`` confirms no candidate (every one of
the ``max_candidates`` checked, the dearest). Per subset and pooled: the share of runs escalated,
mean LLM calls, input and output tokens per run, and the input tokens as a ratio of all-at-once's
on the same logs in the same run.

The share escalated is the share of verdicts the ranker leaves undecided, so it follows the
ranker's ``decided_threshold`` in ``ranker_model.json`` (printed with the figures): re-run this
script after a refit.

Usage: PYTHONPATH=$PWD .venv/bin/python bench/escalation_cost.py --dataset ../shared/who_and_when/dev
[--limit N]. Prints a Markdown section for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from otel_blame.attribution.base import AttributionError, AttributionMethod
from otel_blame.attribution.llm_methods import GuidedCheck
from otel_blame.attribution.llm_settings import LLMSettings
from otel_blame.attribution.ranker import RankerModel
from otel_blame.attribution.registry import DEFAULT_METHOD, create_method
from otel_blame.datasets.who_and_when import SUBSETS, WhoAndWhenCase, load_case
from otel_blame.demo.scripted_llm import ScriptedLLM  # the class tests.support re-exports
from otel_blame.evaluation.who_and_when import select_files

POOLED = "both subsets"


def _user_text(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] != "system")


def scripted_answer(confirm: bool):  # noqa: ANN201 - a ScriptedLLM script
    """A script: guided_check's checks confirmed (``confirm``) or rejected; all-at-once answered
    with the first step it is shown (a valid answer: what it says does not change the cost)."""

    def answer(request: dict) -> str:
        text = _user_text(request)
        if "Check of candidate step" in text:
            return json.dumps({"decisive": confirm, "confidence": 0.6, "reason": "scripted"})
        step, agent = re.search(r"<<STEP (\d+) \| agent: (.*?) \| ", text).groups()
        return json.dumps(
            {"found": True, "agent": agent, "step": int(step), "reason": "scripted", "confidence": 0.6}
        )

    return answer


@dataclass
class Tally:
    """One configuration's spend on one group of logs."""

    runs: int = 0
    escalated: int = 0
    unanswered: int = 0
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, calls: int, input_tokens: int, output_tokens: int, *, escalated: bool) -> None:
        self.runs += 1
        self.escalated += escalated
        self.calls += calls
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens

    def mean(self, total: int) -> float:
        return total / self.runs if self.runs else float("nan")


def measure(method: AttributionMethod, cases: list[WhoAndWhenCase]) -> dict[str, Tally]:
    """Per subset and pooled: what ``method`` spent on each log, and whether it escalated."""
    tallies = {subset: Tally() for subset in [*SUBSETS, POOLED]}
    for case in cases:
        try:
            verdict = method.attribute(case.trajectory)
        except AttributionError as error:
            cost, escalated = error.cost, True
            for group in (case.subset, POOLED):
                tallies[group].unanswered += 1
        else:
            cost, escalated = verdict.cost, "guided_check" in verdict.method
        for group in (case.subset, POOLED):
            calls, into, out = (cost.llm_calls, cost.input_tokens, cost.output_tokens) if cost else (0, 0, 0)
            tallies[group].add(calls, into, out, escalated=escalated)
    return tallies


def _git_commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=None, help="at most N logs from each subset")
    args = parser.parse_args()
    load_before = os.getloadavg()
    cases = [load_case(path, args.dataset) for path in select_files(args.dataset, SUBSETS, args.limit)]
    cases = [case for case in cases if case.trajectory.steps]
    model = RankerModel.load()
    rows: list[tuple[str, dict[str, Tally]]] = []
    for script in ("first", "none"):
        with ScriptedLLM(scripted_answer(confirm=script == "first")) as server:
            settings = LLMSettings(
                base_url=server.base_url, api_key="scripted", model="scripted", backoff_seconds=0
            )
            if script == "first":
                rows.append(("all_at_once", measure(create_method("all_at_once", llm=settings), cases)))
            for escalation in ("undecided", "always"):
                method = create_method(DEFAULT_METHOD, llm=settings, escalation=escalation)
                rows.append((f"{escalation}, script confirms {script}", measure(method, cases)))
    load_after = os.getloadavg()
    now = datetime.datetime.now(datetime.UTC)
    print(
        f"**{now:%Y-%m-%d %H:%M} UTC, commit {_git_commit()}, 2 cores / 24 GiB, load average "
        f"{load_before[0]:.2f} before / {load_after[0]:.2f} after.** {len(cases)} logs of {args.dataset}; "
        f"the ranker's `decided_threshold` {model.decided_threshold:g} (`ranker_model.json` at that commit); "
        f"`guided_check` checks at most {GuidedCheck.max_candidates} candidates.\n"
    )
    print(
        "| configuration | logs | escalated | LLM calls / run | input tokens / run | output tokens / run "
        "| input vs all_at_once | input vs always | unanswered |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    by_name = dict(rows)
    for group in [*SUBSETS, POOLED]:
        for name, tallies in rows:
            tally = tallies[group]
            if not tally.runs:
                continue
            mean_input = tally.mean(tally.input_tokens)
            baseline = by_name["all_at_once"][group]
            versus_once = f"{mean_input / baseline.mean(baseline.input_tokens):.2f}x"
            versus_always = "—"
            if name.startswith("undecided"):
                always = by_name[name.replace("undecided", "always", 1)][group]
                versus_always = f"{mean_input / always.mean(always.input_tokens):.2f}x"
            escalated = "—" if name == "all_at_once" else f"{100 * tally.escalated / tally.runs:.1f} %"
            print(
                f"| {name} | {group} ({tally.runs}) | {escalated} | {tally.mean(tally.calls):.2f} | "
                f"{mean_input:,.0f} | {tally.mean(tally.output_tokens):,.1f} | {versus_once} | "
                f"{versus_always} | {tally.unanswered} |"
            )


if __name__ == "__main__":
    main()
