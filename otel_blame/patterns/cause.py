"""What one verdict says about its failure's cause, made comparable across runs. Pure.

A :class:`Cause` is the verdict's *signature*: the workflow (service and workflow name), the blamed
agent's role, the category (agent, dependency, specification), the failing dependency, the failure
mode and the kind of decisive action (a tool call and its tool, a hand-off, an answer, a stop); and
the *gist* of its reason, with agent names, ids, numbers, quoted values and addresses taken out.
Runs whose causes share a signature and whose gists are similar (:mod:`.index`) are one pattern.

An undecided verdict (``decided`` false: a ranked guess) says nothing decided about an agent, its
step, its action or the reason: its cause is only what is decided about the run, a failing
dependency (category ``dependency``) or a faulty task (category ``specification``), and it never
joins a pattern of decided verdicts. With neither, the run belongs to its workflow's *undecided*
group (:func:`undecided_id`), which is not a cause and is counted apart.

The role of the blamed agent is its name within the workflow (:func:`role_of`): a framework names
an agent by its job (``planner``, ``WebSurfer``, ``Node-2``), the same in every run of the workflow;
ids a run generates (``worker-3f9a2c1b``, ``agent_1723``) are taken out so the role is the same
across runs. (A position in the conversation, such as the first speaker or the last to answer,
shifts whenever a run takes an extra turn, and group chats put one agent at many positions.)
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from otel_blame.attribution.result import Attribution
from otel_blame.trajectory import StepKind, Trajectory

GIST_CHARS = 300  # what the similarity reads of a reason (verdict reasons are a sentence or two)
ID_HEX = 12  # hex digits of a pattern's id after its one-letter prefix

# what kind of decisive action a step is
ACTION_ANSWER = "answer"
ACTION_HANDOFF = "handoff"
ACTION_STOP = "stop"
ACTION_CODE = "code"
TOOL_PREFIX = "tool:"

KIND_CAUSE = "cause"  # a pattern: what decided verdicts (or the decided facts of undecided ones) share
KIND_UNDECIDED = "undecided"  # a workflow's undecided runs with nothing decided about them

_STOP = re.compile(r"\bTERMINATE\b|^\W*(?:terminate|exit|stop|end)\W*$", re.IGNORECASE)
_HANDOFF_TOOL = re.compile(r"(?:^|[_\-.])(?:transfer|handoff|hand_off|delegate)(?:[_\-.]|$)", re.IGNORECASE)
_HANDOFF_TEXT = re.compile(
    r"\bhand(?:ing|ed|s)?\s+(?:this|it|the task)?\s*(?:over|off)\b|\btransferr?(?:ing|ed)?\s+to\b"
    r"|\bover to you\b|^\s*next speaker\b",
    re.IGNORECASE | re.MULTILINE,
)
_CALL_IN_TEXT = re.compile(r"\btool_call\s+([A-Za-z_][\w.\-]*)\(")  # how saved runs write a call

# run-generated ids in an agent's name: a UUID, a hex run, a long number
_NAME_ID = re.compile(
    r"[-_.:#]?(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,}|\d{4,})(?![0-9a-z])",
    re.IGNORECASE,
)
_QUOTED = re.compile(
    r"\"[^\"\n]{0,400}\"|“[^”\n]{0,400}”|‘[^’\n]{0,400}’|`[^`\n]{0,400}`|«[^»\n]{0,400}»"
    r"|(?<![\w'])'[^'\n]{1,400}'(?![\w'])"
)
_ADDRESS = re.compile(r"\b[a-z][a-z0-9+.\-]*://\S+|(?<![\w/])(?:/[\w.\-]+){2,}/?", re.IGNORECASE)
_MIXED = re.compile(r"(?<![\w-])(?=[\w.\-#]*\d)(?=[\w.\-#]*[A-Za-z])[#\w][\w.\-#]*(?![\w-])")
_NUMBER = re.compile(r"[-+]?(?:\d[\d,_]*(?:\.\d+)?|\.\d+)(?:e[-+]?\d+)?%?", re.IGNORECASE)
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Signature:
    """What runs of one pattern share exactly; fields not decided are None."""

    service: str
    workflow: str
    category: str | None = None
    dependency: str | None = None
    role: str | None = None
    failure_mode: str | None = None
    action: str | None = None
    decided: bool = True  # False: the decided facts of undecided verdicts (dependency or category only)

    def key(self) -> str:
        """The signature as one string: what the pattern book files patterns under."""
        return json.dumps(
            [
                self.service,
                self.workflow,
                self.category,
                self.dependency,
                self.role,
                self.failure_mode,
                self.action,
                self.decided,
            ],
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_key(cls, key: str) -> Signature:
        """The signature :meth:`key` wrote."""
        service, workflow, category, dependency, role, mode, action, decided = json.loads(key)
        return cls(service, workflow, category, dependency, role, mode, action, bool(decided))


@dataclass(frozen=True, slots=True)
class Cause:
    """One verdict's cause: its signature and the gist of its reason (empty for undecided runs)."""

    signature: Signature
    gist: str = ""
    kind: str = KIND_CAUSE

    @property
    def undecided(self) -> bool:
        """The run is in its workflow's undecided group (nothing decided about its cause)."""
        return self.kind == KIND_UNDECIDED

    def candidate_id(self) -> str:
        """The id this cause has when it opens a pattern of its own (or its undecided group's id)."""
        if self.undecided:
            return undecided_id(self.signature.service, self.signature.workflow)
        return pattern_id(self.signature, self.gist)


OTHER_REASONS = "*"  # the gist of a signature's overflow pattern: reasons past the bound on its patterns


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=ID_HEX // 2).hexdigest()


def pattern_id(signature: Signature, gist: str) -> str:
    """A pattern's id: a hash of its signature and of the gist that opened it, so every replica (and a
    restart) that opens the same pattern names it the same. ``p`` and 12 hex digits."""
    return "p" + _digest(f"{signature.key()}\n{gist}")


def undecided_id(service: str, workflow: str) -> str:
    """The id of a workflow's undecided group: ``u`` and 12 hex digits."""
    return "u" + _digest(json.dumps(["undecided", service, workflow], ensure_ascii=False))


def is_pattern_id(value: str) -> bool:
    """Whether ``value`` is shaped like a pattern's or an undecided group's id."""
    return len(value) == ID_HEX + 1 and value[0] in "pu" and all(c in "0123456789abcdef" for c in value[1:])


def role_of(agent: str) -> str:
    """The blamed agent's role within its workflow: its name with the ids a run generates taken out
    (``worker-3f9a2c1b`` -> ``worker``); slot numbers a system gives its agents stay (``Assistant2``)."""
    role = _NAME_ID.sub("", agent).strip(" -_.:#")
    return role or agent


def action_of(trajectory: Trajectory, step: int) -> str | None:
    """The kind of decisive action: ``tool:NAME`` (a tool call and its tool), ``code``, ``handoff``,
    ``stop`` (the step ended the run) or ``answer`` (what the agent said); None for no such step."""
    if not 0 <= step < len(trajectory.steps):
        return None
    at = trajectory.steps[step]
    if at.kind != StepKind.MESSAGE:
        name = at.tool_name
        if name and _HANDOFF_TOOL.search(name):
            return ACTION_HANDOFF
        if name:
            return TOOL_PREFIX + name
        return ACTION_CODE if at.kind == StepKind.CODE_EXECUTION else TOOL_PREFIX + "unknown"
    content = at.content or ""
    if _STOP.search(content):
        return ACTION_STOP
    call = _CALL_IN_TEXT.search(content)
    if call is not None:
        name = call.group(1)
        return ACTION_HANDOFF if _HANDOFF_TOOL.search(name) else TOOL_PREFIX + name
    if "->" in (at.role or "") or _HANDOFF_TEXT.search(content):
        return ACTION_HANDOFF
    return ACTION_ANSWER


def gist(reason: str, names: tuple[str, ...] | list[str] = ()) -> str:
    """The gist of a reason: lower case, one space between words, and the agent ``names`` (the run's),
    quoted values, addresses, ids and numbers each replaced by a placeholder; at most
    :data:`GIST_CHARS` characters."""
    text = reason
    for name in sorted({n for n in names if len(n) > 1}, key=len, reverse=True):
        text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", "<agent>", text)
    text = _QUOTED.sub("<q>", text)
    text = _ADDRESS.sub("<url>", text)
    text = _MIXED.sub("<id>", text)
    text = _NUMBER.sub("<n>", text)
    text = _SPACE.sub(" ", text).strip().lower()
    return text[:GIST_CHARS]


def cause_of(service: str, workflow: str, trajectory: Trajectory, attribution: Attribution) -> Cause:
    """What a verdict says about its cause (see the module's docstring)."""
    if attribution.decided:
        dependency = attribution.dependency if attribution.category == "dependency" else None
        return Cause(
            Signature(
                service=service,
                workflow=workflow,
                category=attribution.category,
                dependency=dependency,
                role=role_of(attribution.agent),
                failure_mode=attribution.failure_mode,
                action=action_of(trajectory, attribution.step),
                decided=True,
            ),
            gist(attribution.reason, trajectory.agents),
        )
    if attribution.category == "dependency" and attribution.dependency:
        decided = Signature(service, workflow, "dependency", attribution.dependency, decided=False)
        return Cause(decided)
    if attribution.category == "specification":
        return Cause(Signature(service, workflow, "specification", decided=False))
    return Cause(Signature(service, workflow, decided=False), kind=KIND_UNDECIDED)
