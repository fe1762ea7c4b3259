"""Escalation to an LLM: decided verdicts spend nothing, undecided ones go to guided_check, and an
LLM that cannot answer leaves the offline verdict standing (against the scripted server)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from otel_blame.attribution.base import AttributionError
from otel_blame.attribution.escalation import EscalatingAttribution
from otel_blame.attribution.llm_client import LLMClient, LLMSettings
from otel_blame.attribution.llm_methods import GuidedCheck, max_calls
from otel_blame.attribution.ranker import RankerAttribution, RankerModel
from otel_blame.attribution.registry import create_method, escalates
from otel_blame.attribution.result import Candidate
from otel_blame.trajectory import Trajectory
from tests.ports import reserve_port
from tests.support import Reply
from tests.support.decided import ALWAYS_DECIDED, NEVER_DECIDED, set_decided_threshold

from .test_signals_baselines_crossval import coordinated_run


@pytest.fixture
def decided_threshold(monkeypatch):
    """``decided_threshold(t)``: the shipped ranker with its decided threshold set to ``t``."""
    return lambda threshold: set_decided_threshold(monkeypatch, threshold)


def asked_step(request: dict) -> int:
    text = "\n".join(m["content"] for m in request["messages"] if m["role"] != "system")
    return int(re.search(r"Check of candidate step (\d+)", text).group(1))


def checked_steps(server) -> list[int]:  # noqa: ANN001
    return [asked_step(request) for request in server.requests]


def confirming(step: int):  # noqa: ANN201
    """A script that confirms ``step`` and rejects every other candidate."""

    def script(request: dict) -> str:
        asked = asked_step(request)
        return json.dumps({"decisive": asked == step, "confidence": 0.8, "reason": f"checked {asked}"})

    return script


REJECT_ALL = json.dumps({"decisive": False, "confidence": 0.4, "reason": "not this one"})


class CountingRanker(RankerAttribution):
    """The ranker, counting its verdicts: the escalation must reuse the one it has."""

    def __init__(self, threshold: float) -> None:
        super().__init__(model=replace(RankerModel.load(), decided_threshold=threshold))
        self.verdicts = 0

    def attribute(self, trajectory: Trajectory):  # noqa: ANN201
        self.verdicts += 1
        return super().attribute(trajectory)


def escalating(
    settings: LLMSettings, threshold: float, escalation: str = "undecided"
) -> EscalatingAttribution:
    return EscalatingAttribution(
        CountingRanker(threshold), GuidedCheck(LLMClient(settings)), escalation=escalation
    )


def test_a_decided_verdict_makes_no_llm_call(llm, decided_threshold):
    decided_threshold(ALWAYS_DECIDED)
    run = coordinated_run()
    offline = create_method("ranker").attribute(run)
    with llm([], default=REJECT_ALL) as (server, settings):
        method = create_method("ranker", llm=settings, escalation="undecided")
        result = method.attribute(run)
    assert method.name == "ranker+guided_check"
    assert server.calls == 0 and result.cost.llm_calls == 0 and result.cost.input_tokens == 0
    assert result.decided and result.method == "ranker"
    assert result.model_dump(exclude={"cost"}) == offline.model_dump(exclude={"cost"})


def test_an_undecided_verdict_goes_to_the_llm_and_takes_the_confirmed_candidate(llm):
    run = coordinated_run()
    offline = RankerAttribution(model=replace(RankerModel.load(), decided_threshold=NEVER_DECIDED))
    proposed = [c.step for c in offline.attribute(run).candidates[:3]]
    confirm = proposed[1]
    with llm(confirming(confirm)) as (server, settings):
        method = escalating(settings, NEVER_DECIDED)
        result = method.attribute(run)
    assert checked_steps(server) == proposed[:2]  # the offline verdict's best first, stopped at the confirmed
    assert (result.step, result.agent) == (confirm, run.steps[confirm].agent)
    assert result.decided and result.method == "ranker+guided_check" and result.model == "scripted-model"
    assert result.reason == f"checked {confirm}" and result.candidates[0].step == confirm
    assert result.cost.llm_calls == 2 == server.calls and result.cost.input_tokens > 0
    assert result.cost.output_tokens > 0
    assert method.offline.verdicts == 1  # the offline verdict was reused, not made again


def test_no_confirmed_candidate_leaves_the_offline_ranking_undecided(llm):
    run = coordinated_run()
    with llm([], default=REJECT_ALL) as (server, settings):
        method = escalating(settings, NEVER_DECIDED)
        result = method.attribute(run)
    offline = method.offline.attribute(run)
    assert server.calls == max_calls("guided_check", len(run.steps)) == result.cost.llm_calls
    assert (result.agent, result.step) == (offline.agent, offline.step)
    assert not result.decided and result.method == "ranker+guided_check"
    assert result.candidates == offline.candidates  # the offline ranking stands as the suspects
    assert result.category == offline.category and result.confidence <= 0.2
    assert "No candidate was confirmed by the LLM" in result.reason and result.cost.input_tokens > 0


def test_never_builds_the_offline_method_even_with_an_endpoint(llm, decided_threshold):
    decided_threshold(NEVER_DECIDED)
    with llm([], default=REJECT_ALL) as (server, settings):
        method = create_method("ranker", llm=settings, escalation="never")
        result = method.attribute(coordinated_run())
    assert isinstance(method, RankerAttribution) and server.calls == 0
    assert result.method == "ranker" and not result.decided


def test_always_checks_decided_verdicts_too(llm, decided_threshold):
    decided_threshold(ALWAYS_DECIDED)
    run = coordinated_run()
    offline = create_method("ranker").attribute(run)
    with llm(confirming(offline.step)) as (server, settings):
        result = create_method("heuristic", llm=settings, escalation="always").attribute(run)
    assert server.calls == 1 and checked_steps(server) == [offline.step]
    assert result.method == "heuristic+guided_check" and result.decided and result.step == offline.step
    assert result.category == offline.category  # the same step: what the offline reading said holds


def test_without_an_endpoint_nothing_changes_and_always_is_a_clear_error():
    run = coordinated_run()
    method = create_method("ranker", escalation="undecided")
    assert isinstance(method, RankerAttribution) and method.attribute(run).method == "ranker"
    assert not escalates("ranker", "undecided", LLMSettings())
    assert escalates("ranker", "always", LLMSettings())
    assert not escalates("all_at_once", "always", LLMSettings(base_url="http://127.0.0.1:9/v1"))
    with pytest.raises(AttributionError, match="no LLM configured"):
        create_method("ranker", escalation="always")


def test_an_endpoint_from_the_environment_turns_escalation_on(monkeypatch, llm, decided_threshold):
    decided_threshold(NEVER_DECIDED)
    with llm([], default=REJECT_ALL) as (server, settings):
        monkeypatch.setenv("OPENAI_BASE_URL", settings.base_url)
        result = create_method("ranker", escalation="undecided").attribute(coordinated_run())
    assert result.method == "ranker+guided_check" and server.calls > 0


def test_a_down_endpoint_leaves_the_offline_verdict_with_a_reason():
    settings = LLMSettings(
        base_url=f"http://127.0.0.1:{reserve_port()}/v1", api_key="sk-test", max_retries=1, backoff_seconds=0
    )
    run = coordinated_run()
    method = escalating(settings, NEVER_DECIDED)
    result = method.attribute(run)
    offline = method.offline.attribute(run)
    assert result.method == "ranker(fallback:guided_check)"
    assert (result.agent, result.step, result.decided) == (offline.agent, offline.step, False)
    assert result.candidates == offline.candidates and result.category == offline.category
    assert result.reason.startswith("The LLM check (guided_check) failed, so the offline verdict stands")
    assert "APIConnectionError" in result.reason and "failed after 2 attempt(s)" in result.reason
    assert result.reason.endswith(offline.reason) and result.cost.llm_calls == 0


def test_an_erroring_endpoint_is_retried_then_the_offline_verdict_stands(llm):
    run = coordinated_run()
    with llm([], default=Reply(status=503, content="overloaded"), max_retries=2) as (server, settings):
        result = escalating(settings, NEVER_DECIDED).attribute(run)
    assert server.calls == 3  # the client's retries, reused
    assert result.method == "ranker(fallback:guided_check)" and "InternalServerError" in result.reason


def test_unusable_answers_fall_back_and_the_tokens_they_cost_are_kept(llm):
    with llm([], default="the culprit is obvious") as (server, settings):
        result = escalating(settings, NEVER_DECIDED).attribute(coordinated_run())
    assert server.calls == 2  # one corrective re-ask
    assert result.method == "ranker(fallback:guided_check)" and "no usable answer" in result.reason
    assert result.cost.llm_calls == 2 and result.cost.input_tokens > 0


def test_only_what_goes_to_the_llm_is_prepared_for_it(llm):
    secret = "Ab3_dE-fGh1_jK2-lMn3_oP4-qRs5"
    run = coordinated_run()
    steps = list(run.steps)
    steps[5] = steps[5].model_copy(update={"content": steps[5].content + f" key sk-proj-{secret}"})
    run = run.model_copy(update={"steps": steps})
    seen: list[str] = []

    def masked(trajectory: Trajectory) -> Trajectory:
        seen.append(trajectory.steps[5].content)
        hidden = [
            s.model_copy(update={"content": s.content.replace(secret, "***")}) for s in trajectory.steps
        ]
        return trajectory.model_copy(update={"steps": hidden})

    with llm([], default=REJECT_ALL) as (server, settings):
        offline = CountingRanker(NEVER_DECIDED)
        method = EscalatingAttribution(offline, GuidedCheck(LLMClient(settings)), for_llm=masked)
        method.attribute(run)
    assert secret in seen[0]  # the offline method and the hook read the run as given
    assert server.calls > 0 and secret not in json.dumps(server.requests)


def test_an_escalating_method_needs_a_mode_that_escalates(llm):
    with llm([]) as (_, settings):
        with pytest.raises(ValueError, match="undecided or always"):
            EscalatingAttribution(RankerAttribution(), GuidedCheck(LLMClient(settings)), escalation="never")


def test_guided_check_alone_is_decided_only_when_it_confirms(llm):
    run = coordinated_run()
    offline = RankerAttribution().attribute(run)
    with llm(confirming(offline.step)) as (_, settings):
        confirmed = create_method("guided_check", llm=settings).attribute(run)
    with llm([], default=REJECT_ALL) as (_, settings):
        rejected = create_method("guided_check", llm=settings).attribute(run)
    assert confirmed.decided and confirmed.method == "guided_check" and confirmed.step == offline.step
    assert not rejected.decided and rejected.candidates == offline.candidates


def test_guided_check_judges_the_candidates_of_the_verdict_it_is_given(llm):
    run = coordinated_run()
    given = (
        RankerAttribution()
        .attribute(run)
        .model_copy(
            update={
                "step": 6,
                "agent": run.steps[6].agent,
                "candidates": [Candidate(step=6, agent=run.steps[6].agent, score=0.5)]
                + [Candidate(step=2, agent=run.steps[2].agent, score=0.3)],
            }
        )
    )
    with llm(confirming(2)) as (server, settings):
        result = GuidedCheck(LLMClient(settings)).check(run, given)
    assert checked_steps(server) == [6, 2] and result.step == 2 and result.decided
