"""Positional baselines, the heuristic's signal objects, cross-validated weight fitting, guided_check."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from otel_blame.attribution.baselines import POSITIONAL_RULES, PositionalBaseline, positional_baselines
from otel_blame.attribution.heuristic import HeuristicAttribution, Weights, gather_evidence, score_evidence
from otel_blame.attribution.llm_methods import max_calls
from otel_blame.attribution.ranker import RankerAttribution
from otel_blame.attribution.registry import create_method
from otel_blame.attribution.signals import SIGNAL_NAMES, SIGNALS, ScoringContext
from otel_blame.cli import main
from otel_blame.evaluation.who_and_when import best_baseline, evaluate_baselines, select_files
from otel_blame.training import crossval
from otel_blame.training.crossval import LabelledRun, cross_validate, fit_weights, make_folds, objective
from otel_blame.trajectory import Trajectory

from .conftest import make_trajectory


def coordinated_run(names: dict[str, str] | None = None) -> Trajectory:
    """A coordinator directing two workers; ``names`` renames agents in the log and in the text."""
    names = names or {}

    def n(agent: str) -> str:
        return names.get(agent, agent)

    steps = [("user", "How many rooms does the Grand Hotel in Lisbon have?")]
    steps.append((n("Boss"), f"Plan: {n('Scout')} searches the web, {n('Clerk')} reads files."))
    steps.append((n("Boss"), f"{n('Scout')}, please search for the Grand Hotel Lisbon room count."))
    steps.append((n("Scout"), "I searched 'Grand Hotel Lisbon rooms'. The page lists 120 rooms."))
    steps.append((n("Boss"), f"{n('Clerk')}, please check the brochure file for the number of rooms."))
    steps.append((n("Clerk"), "The brochure is missing; let's assume it says 95 rooms, a placeholder."))
    steps.append((n("Boss"), f"{n('Scout')}, please confirm the count with a second source."))
    steps.append((n("Scout"), "I could not open the second page; it seems broken."))
    steps.append((n("Boss"), "We have enough. Final answer: 95"))
    return make_trajectory(steps, input="How many rooms does the Grand Hotel in Lisbon have?")


# --- positional baselines ---------------------------------------------------------------------------


def test_positional_rules_pick_the_documented_steps():
    run = coordinated_run()
    picks = {b.rule: (b.attribute(run).step, b.attribute(run).agent) for b in positional_baselines()}
    assert picks == {
        "first_step": (0, "user"),
        "step_one": (1, "Boss"),
        "second_speaker": (3, "Scout"),  # after the request: Boss, then Scout
        "last_step": (8, "Boss"),
        "frequent_speaker": (1, "Boss"),
        "first_failed": (8, "Boss"),  # no step reported an error: the last step
    }
    assert set(POSITIONAL_RULES) == set(picks)
    single = make_trajectory([("A", "only one step")])
    assert all(b.attribute(single).step == 0 for b in positional_baselines())
    with pytest.raises(ValueError, match="unknown positional rule"):
        PositionalBaseline("clairvoyant")


def write_dataset(root: Path) -> Path:
    for subset, count in (("Algorithm-Generated", 4), ("Hand-Crafted", 2)):
        for number in range(count):
            path = root / subset / f"{number}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            history = [
                {"role": "user", "name": "Asker", "content": "What is 6 times 7?"},
                {
                    "role": "assistant",
                    "name": "Solver",
                    "content": "Let's assume it is 40. The answer is 40.",
                },
                {"role": "user", "name": "Checker", "content": "Verified, 40 is correct. TERMINATE"},
            ]
            mistake = (1, "Solver") if number % 2 == 0 else (2, "Checker")
            data = {"question": "What is 6 times 7?", "history": history}
            data |= {"mistake_agent": mistake[1], "mistake_step": str(mistake[0])}
            path.write_text(json.dumps(data))
    return root


def test_baselines_are_scored_per_subset_and_the_best_is_found(tmp_path: Path):
    dataset = write_dataset(tmp_path / "ds")
    baselines = evaluate_baselines(dataset, select_files(dataset), random_seeds=3)
    step_one = next(b for b in baselines if b.name == "baseline:step_one" and b.subset == "Hand-Crafted")
    assert (step_one.traces, step_one.agent_accuracy, step_one.step_accuracy) == (2, 0.5, 0.5)
    last = next(b for b in baselines if b.name == "baseline:last_step" and b.subset == "Algorithm-Generated")
    assert (last.agent_accuracy, last.step_accuracy) == (0.5, 0.5)
    assert {b.name for b in baselines} >= {"random", *(b.name for b in positional_baselines())}
    by_agent, by_step = best_baseline(baselines, "Algorithm-Generated")
    assert by_agent.agent_accuracy == max(b.agent_accuracy for b in baselines if b.subset == by_agent.subset)
    assert by_step.step_accuracy >= 0.5


def test_eval_prints_the_baselines_and_the_margin_over_the_best(tmp_path: Path):
    dataset = write_dataset(tmp_path / "ds")
    out = tmp_path / "pred.jsonl"
    result = CliRunner().invoke(main, ["eval", "--dataset", str(dataset), "--out", str(out)])
    assert result.exit_code == 0, result.output
    for rule in POSITIONAL_RULES:
        assert f"baseline:{rule}" in result.output
    assert "random" in result.output
    assert result.output.count("margin over best baseline") == 2  # one per subset
    assert re.search(r"agent [+-]\d+\.\d points \(vs baseline:\w+\)", result.output)


# --- signals as objects -----------------------------------------------------------------------------


def test_every_signal_is_named_documented_and_weighted():
    assert len(set(SIGNAL_NAMES)) == len(SIGNALS) >= 10
    weights = Weights().as_dict()
    for signal in SIGNALS:
        assert signal.__doc__ and len(signal.__doc__.split()) >= 15, signal.name
        assert signal.name in weights and signal.reason
        assert signal.scope in {"step", "agent"}


def test_the_scoring_context_is_built_once_per_run(monkeypatch: pytest.MonkeyPatch):
    built = []
    original = ScoringContext.build.__func__

    def counting(cls, trajectory, **kwargs):  # noqa: ANN001, ANN202
        built.append(trajectory)
        return original(cls, trajectory, **kwargs)

    monkeypatch.setattr(ScoringContext, "build", classmethod(counting))
    HeuristicAttribution().attribute(coordinated_run())
    assert len(built) == 1


def test_signals_read_the_coordinated_run():
    evidence = gather_evidence(coordinated_run()).by_signal
    context = ScoringContext.build(coordinated_run())
    assert context.coordinator == "Boss" and context.actors[0] == 1  # the request is not a suspect
    assert set(evidence["fabrication"]) == {5}  # "let's assume ... placeholder"
    assert set(evidence["final_answer"]) == {5}  # 95 entered at the Clerk's made-up figure
    assert set(evidence["soft_error"]) == set()  # no tool results in this run
    result = HeuristicAttribution().attribute(coordinated_run())
    assert (result.agent, result.step) == ("Clerk", 5)


def test_renaming_agents_everywhere_changes_nothing():
    names = {"Boss": "Conductor_9", "Scout": "w1", "Clerk": "ArchiveReader"}
    original = HeuristicAttribution().attribute(coordinated_run())
    renamed_run = coordinated_run(names)
    renamed_run = Trajectory.from_steps(
        [step.model_copy(update={"role": "r"}) for step in renamed_run.steps],
        task=renamed_run.task,
        outcome=renamed_run.outcome,
    )
    renamed = HeuristicAttribution().attribute(renamed_run)
    assert renamed.step == original.step and renamed.agent == names.get(original.agent, original.agent)
    assert [c.step for c in renamed.candidates] == [c.step for c in original.candidates]
    assert [c.score for c in renamed.candidates] == [c.score for c in original.candidates]


def test_an_agent_scope_signal_moves_the_agent_not_the_step_scores():
    run = make_trajectory(
        [
            ("Lead", "Plan: Finder looks up the two prices, then we add them."),
            ("Finder", "I cannot access the page, so let's assume hypothetical prices of 12 and 30."),
            ("Lead", 'Updated ledger: {"is_request_satisfied": {"reason": "done", "answer": true}}'),
            ("Lead", "Final answer: 42"),
        ],
        input="What is the sum of the two prices?",
    )
    evidence = gather_evidence(run)
    assert evidence.by_signal["premature_acceptance"] == {2: 1.0}
    off, on = (Weights(fabrication=0.45, premature_acceptance=p) for p in (0.0, 1.6))
    assert [(s.step.index, s.score) for s in score_evidence(evidence, off)] == [
        (s.step.index, s.score) for s in score_evidence(evidence, on)
    ]
    low = HeuristicAttribution(weights=off).attribute(run)
    high = HeuristicAttribution(weights=on).attribute(run)
    assert (low.agent, low.step) == ("Finder", 1)
    assert high.agent == "Lead" and high.step == 0  # the agent who let it through, at its best step
    assert "accepted a result without the evidence" in high.reason


# --- cross-validated fitting -----------------------------------------------------------------------


def labelled(trajectory: Trajectory, subset: str, agent: str, step: int, name: str) -> LabelledRun:
    evidence = gather_evidence(trajectory)
    context = evidence.context
    rows = [
        (
            index,
            context.steps[index].agent,
            tuple(evidence.by_signal.get(s, {}).get(index, 0.0) for s in SIGNAL_NAMES),
        )
        for index in context.actors
    ]
    return LabelledRun(name, subset, agent, step, evidence, rows)


def made_up_runs(count: int) -> list[LabelledRun]:
    """Runs where the culprit is always a later step that fabricated its data (never the first)."""
    runs = []
    for number in range(count):
        filler = [
            (f"Agent{k}", f"I reviewed part {k} of the notes for item {number}.")
            for k in range(number % 3 + 1)
        ]
        culprit = len(filler)
        steps = [
            *filler,
            ("Maker", "I cannot access the file, so let's assume hypothetical values: 5 and 9."),
        ]
        steps.append(("Closer", "Done. TERMINATE"))
        subset = "Algorithm-Generated" if number % 2 else "Hand-Crafted"
        runs.append(labelled(make_trajectory(steps), subset, "Maker", culprit, f"{subset}/{number}.json"))
    return runs


def test_fast_scoring_path_agrees_with_the_method():
    runs = made_up_runs(8) + [labelled(coordinated_run(), "Hand-Crafted", "Clerk", 5, "Hand-Crafted/c.json")]
    for weights in (Weights(), crossval.neutral_start(), Weights(fabrication=0.0, agent_support=0.5)):
        method = HeuristicAttribution(weights=weights)
        for run in runs:
            answer = method.attribute(run.evidence.context.trajectory)
            fast = crossval._predict(run, crossval._vector(weights), weights.agent_support)
            assert fast == (answer.agent, answer.step)


def test_fitting_finds_the_predictive_signal():
    runs = made_up_runs(10)
    without = crossval.neutral_start().__class__(**{**crossval.neutral_start().as_dict(), "fabrication": 0.0})
    fitted = fit_weights(runs, start=without)
    assert fitted.fabrication > 0.0
    assert objective(runs, fitted) == 1.0 > objective(runs, without)


def test_folds_are_stratified_disjoint_complete_and_seeded():
    runs = made_up_runs(23)
    folds = make_folds(runs, 5, seed=0)
    flat = sorted(i for fold in folds for i in fold)
    assert flat == list(range(len(runs)))
    for fold in folds:
        subsets = [runs[i].subset for i in fold]
        assert abs(subsets.count("Hand-Crafted") - subsets.count("Algorithm-Generated")) <= 2
    assert make_folds(runs, 5, seed=0) == folds and make_folds(runs, 5, seed=1) != folds


def test_cross_validation_never_scores_a_run_with_weights_fit_on_it(monkeypatch: pytest.MonkeyPatch):
    runs = made_up_runs(12)
    trained_on: list[set[str]] = []
    real_fit = crossval.fit_weights

    def spying_fit(training, **kwargs):  # noqa: ANN001, ANN202
        trained_on.append({run.file for run in training})
        return real_fit(training, **kwargs)

    monkeypatch.setattr(crossval, "fit_weights", spying_fit)
    result = cross_validate(runs, k=4, seed=0)
    folds = make_folds(runs, 4, seed=0)
    assert len(trained_on) == 4
    for fold, training in zip(folds, trained_on, strict=True):
        held_out = {runs[i].file for i in fold}
        assert not held_out & training and len(held_out | training) == len(runs)
    total = sum(sum(f.held_out[s][0] for s in f.held_out) for f in result.folds)
    assert total == len(runs)  # every run scored exactly once
    agent, step = result.accuracy("Hand-Crafted")
    assert agent == step == 1.0 and len(result.per_fold("Hand-Crafted")) == 4


# --- guided_check ----------------------------------------------------------------------------------


def user_text(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] != "system")


def test_guided_check_checks_the_rankers_candidates_best_first_and_stops(llm):
    run = coordinated_run()
    proposed = [c.step for c in RankerAttribution().attribute(run).candidates[:3]]
    confirm = proposed[1]

    def script(request: dict) -> str:
        step = int(re.search(r"Check of candidate step (\d+)", user_text(request)).group(1))
        return json.dumps({"decisive": step == confirm, "confidence": 0.8, "reason": f"checked {step}"})

    with llm(script) as (server, settings):
        result = create_method("guided_check", llm=settings).attribute(run)
    checked = [int(re.search(r"candidate step (\d+)", user_text(r)).group(1)) for r in server.requests]
    assert checked == proposed[:2]  # the ranker's best first, stopped at the first confirmed
    assert (result.step, result.reason, result.method) == (confirm, f"checked {confirm}", "guided_check")
    assert result.agent == run.steps[confirm].agent and result.cost.llm_calls == 2


def test_guided_check_falls_back_to_the_offline_answer_and_costs_no_more_than_all_at_once(llm):
    run = coordinated_run()
    offline = RankerAttribution().attribute(run)
    never = json.dumps({"decisive": False, "confidence": 0.4, "reason": "no"})
    with llm(lambda request: never) as (server, settings):
        result = create_method("guided_check", llm=settings).attribute(run)
    assert (result.agent, result.step) == (offline.agent, offline.step)
    assert result.confidence <= 0.2 and server.calls <= max_calls("guided_check", len(run.steps))
    blame = json.dumps({"agent": "Clerk", "step": 5, "reason": "r", "confidence": 0.5})
    with llm(lambda request: blame) as (server, settings):
        once = create_method("all_at_once", llm=settings).attribute(run)
    # a short log: each check shows at least min_check_chars, so allow the fixed per-call overhead
    assert result.cost.input_tokens <= 3 * once.cost.input_tokens
