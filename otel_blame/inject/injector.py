"""The message interceptor a campaign run installs: watches every outgoing message, plants one fault.

It sees messages through the instrumentation's own message path
(:mod:`otel_blame.instrumentation.interception`): the changed copy it returns (other text, or another
tool name for a tool call) is what the framework hook hands the recipient or the tool and what the
step records. The fault goes into the first message of the planned agent at or after the planned
step that the fault kind can change; the step index that message got is the ground truth.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from otel_blame.inject.faults import TOOL_KINDS, FaultKind, applies, apply_fault, is_error_result
from otel_blame.instrumentation.interception import OutgoingMessage


@dataclass(frozen=True)
class FaultPlan:
    kind: FaultKind
    agent: str
    step: int
    seed: int
    exact: bool = False  # only at ``step`` (the user fixed it); else the first fitting message from it on
    tools: tuple[str, ...] = ()  # tools the clean run called: the choices of a wrong tool


@dataclass(frozen=True)
class SeenMessage:
    agent: str
    step: int | None
    kind: str
    text: str
    tool_name: str | None = None


@dataclass(frozen=True)
class Situation:
    """What a fault needs to know about a message beyond its text: where it stands in the run."""

    tools: tuple[str, ...]
    after_error: bool


def situations(seen: Sequence[SeenMessage], known_tools: Sequence[str] = ()) -> list[Situation]:
    """Per seen message: the tools called in the run so far (with ``known_tools``), and whether the
    latest tool result before it was a failure."""
    tools = dict.fromkeys(known_tools)
    after_error = False
    out = []
    for message in seen:
        if message.kind in ("tool_call", "tool") and message.tool_name:
            tools.setdefault(message.tool_name)
        out.append(Situation(tuple(tools), after_error))
        if message.kind in TOOL_KINDS:
            after_error = is_error_result(message.text)
    return out


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
        tool_name = outgoing.tool_name
        self.seen.append(SeenMessage(outgoing.agent, outgoing.step, outgoing.kind, outgoing.text, tool_name))
        plan = self.plan
        if plan is None or self.planted is not None or outgoing.step is None:
            return None
        if outgoing.agent != plan.agent or outgoing.step < plan.step:
            return None
        if plan.exact and outgoing.step != plan.step:
            return None
        situation = situations(self.seen, plan.tools)[-1]
        if not applies(
            plan.kind,
            outgoing.text,
            outgoing.kind,
            tool_name=tool_name,
            tools=situation.tools,
            after_error=situation.after_error,
        ):
            return None
        injected = apply_fault(
            plan.kind, outgoing.text, random.Random(plan.seed), tool_name=tool_name, tools=situation.tools
        )
        before, after = outgoing.text, injected.text
        if injected.tool_name is not None:
            before, after = f"{tool_name}({before})", f"{injected.tool_name}({after})"
        self.planted = PlantedFault(
            kind=plan.kind.value,
            agent=outgoing.agent,
            step=outgoing.step,
            description=injected.description,
            before=before,
            after=after,
        )
        if injected.tool_name is not None:
            return dataclasses.replace(outgoing, text=injected.text, tool_name=injected.tool_name)
        return dataclasses.replace(outgoing, text=injected.text)
