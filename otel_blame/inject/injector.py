"""The message interceptor a campaign run installs: watches every outgoing message, plants one fault.

It sees messages through the instrumentation's own message path
(:mod:`otel_blame.instrumentation.interception`): the changed copy it returns is what the framework
hook hands the recipient and what the step records. The fault goes into the first message of the
planned agent at or after the planned step that the fault kind can change; the step index that
message got is the ground truth.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import asdict, dataclass
from typing import Any

from otel_blame.inject.faults import FaultKind, applies, apply_fault
from otel_blame.instrumentation.interception import OutgoingMessage


@dataclass(frozen=True)
class FaultPlan:
    kind: FaultKind
    agent: str
    step: int
    seed: int
    exact: bool = False  # only at ``step`` (the user fixed it); else the first fitting message from it on


@dataclass(frozen=True)
class SeenMessage:
    agent: str
    step: int | None
    kind: str
    text: str


@dataclass(frozen=True)
class PlantedFault:
    """The ground truth of a run: which agent's message, at which step, changed how."""

    kind: str
    agent: str
    step: int
    description: str
    before: str
    after: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Injector:
    """A :class:`~otel_blame.instrumentation.interception.MessageInterceptor` for one run."""

    def __init__(self, plan: FaultPlan | None) -> None:
        self.plan = plan
        self.seen: list[SeenMessage] = []
        self.planted: PlantedFault | None = None

    def __call__(self, outgoing: OutgoingMessage) -> OutgoingMessage | None:
        self.seen.append(SeenMessage(outgoing.agent, outgoing.step, outgoing.kind, outgoing.text))
        plan = self.plan
        if plan is None or self.planted is not None or outgoing.step is None:
            return None
        if outgoing.agent != plan.agent or outgoing.step < plan.step:
            return None
        if plan.exact and outgoing.step != plan.step:
            return None
        if not applies(plan.kind, outgoing.text, outgoing.kind):
            return None
        injected = apply_fault(plan.kind, outgoing.text, random.Random(plan.seed))
        self.planted = PlantedFault(
            kind=plan.kind.value,
            agent=outgoing.agent,
            step=outgoing.step,
            description=injected.description,
            before=outgoing.text,
            after=injected.text,
        )
        return dataclasses.replace(outgoing, text=injected.text)
