"""Escalation to an LLM only where it pays: the offline verdict first, the LLM for the undecided.

The offline method (the ranker) answers every run in milliseconds and says whether its evidence
supports the verdict (``Attribution.decided``). With an LLM endpoint configured, an
:class:`EscalatingAttribution` hands the runs the offline evidence leaves undecided to
``guided_check`` (:class:`~otel_blame.attribution.llm_methods.GuidedCheck`), which judges only the
offline verdict's best candidates, one call each, and stops at the first it confirms. A decided
run spends no tokens. The setting:

- ``never``: the offline verdict, always (the registry then builds the offline method itself);
- ``undecided`` (the default when an endpoint is set): the LLM checks undecided verdicts only;
- ``always``: the LLM checks every verdict.

The escalated verdict says what happened: ``method`` is e.g. ``ranker+guided_check``, ``decided``
is true when the LLM confirmed a candidate and false when it confirmed none (the offline answer and
its ranking stand), ``cost`` holds the calls and tokens spent. When the LLM cannot answer (the
endpoint down or erring after the client's retries, the token budget or the processor's deadline
spent) the offline verdict stands as it was, with ``method`` ``ranker(fallback:guided_check)`` and a
reason that says why, and whatever the failed attempt cost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from otel_blame.attribution.base import AttributionError, AttributionMethod
from otel_blame.attribution.llm_client import one_line
from otel_blame.attribution.result import Attribution, Cost
from otel_blame.trajectory import Trajectory

if TYPE_CHECKING:
    from otel_blame.attribution.llm_methods import GuidedCheck

log = logging.getLogger(__name__)

_MAX_PROBLEM_CHARS = 240


def _spent(*costs: Cost) -> Cost:
    return Cost(
        llm_calls=sum(cost.llm_calls for cost in costs),
        input_tokens=sum(cost.input_tokens for cost in costs),
        output_tokens=sum(cost.output_tokens for cost in costs),
        seconds=round(sum(cost.seconds for cost in costs), 4),
    )


class EscalatingAttribution:
    """The offline method's verdict, checked by the LLM when it is undecided (or always).

    ``for_llm`` prepares what the LLM is shown (the processor and ``otel-blame attribute`` redact
    it); the offline method reads the trajectory as given.
    """

    def __init__(
        self,
        offline: AttributionMethod,
        checker: GuidedCheck,
        *,
        escalation: Literal["undecided", "always"] = "undecided",
        for_llm: Callable[[Trajectory], Trajectory] | None = None,
    ) -> None:
        if escalation not in ("undecided", "always"):
            raise ValueError(f"escalation {escalation!r}: an escalating method escalates undecided or always")
        self.offline = offline
        self.checker = checker
        self.escalation = escalation
        self.for_llm = for_llm
        self.name = f"{offline.name}+{checker.name}"

    def escalates(self, verdict: Attribution) -> bool:
        return self.escalation == "always" or not verdict.decided

    def attribute(self, trajectory: Trajectory) -> Attribution:
        verdict = self.offline.attribute(trajectory)
        if not self.escalates(verdict):
            return verdict
        shown = self.for_llm(trajectory) if self.for_llm is not None else trajectory
        try:
            checked = self.checker.check(shown, verdict)
        except AttributionError as error:
            problem = one_line(str(error), _MAX_PROBLEM_CHARS)
            log.warning(
                "trace %s: %s failed, the offline verdict stands: %s",
                trajectory.trace_id,
                self.checker.name,
                problem,
            )
            return verdict.model_copy(
                update={
                    "method": f"{verdict.method}(fallback:{self.checker.name})",
                    "reason": f"The LLM check ({self.checker.name}) failed, so the offline verdict stands: "
                    f"{problem}. {verdict.reason}",
                    "cost": _spent(verdict.cost, error.cost or Cost()),
                }
            )
        return checked.model_copy(
            update={
                "method": f"{verdict.method}+{self.checker.name}",
                "cost": _spent(verdict.cost, checked.cost),
            }
        )
