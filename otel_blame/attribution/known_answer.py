"""How a verdict compares with a known answer: a file's ``mistake_agent``/``mistake_step``, a
campaign's planted fault, an agent filter.

Agent names are compared case- and space-insensitively: a log that calls its agent "Websurfer"
and a verdict that says "WebSurfer" (the name the steps carry) name the same agent. The CLI, the
web UI, the API's filters and the injection campaign all compare through :func:`same_agent`, so
the same pair is a match everywhere.
"""

from __future__ import annotations

from typing import Protocol


class Answer(Protocol):
    """An agent and a step: a known answer (a file's annotation) or a verdict (an Attribution, a
    stored run)."""

    @property
    def agent(self) -> str | None: ...

    @property
    def step(self) -> int | None: ...


def agent_key(name: str) -> str:
    """What two names of one agent have in common: no white space, case folded."""
    return "".join(name.split()).casefold()


def same_agent(one: str | None, other: str | None) -> bool:
    """Whether two agent names name the same agent (None names no agent)."""
    return one is not None and other is not None and agent_key(one) == agent_key(other)


def compare(known: Answer, verdict: Answer | None) -> tuple[str, str]:
    """(``agent and step match`` …, a style word: good, partial, bad, none) for a verdict against the
    known answer, in the words the CLI and the web UI both show; ``("", "none")`` when nothing was
    blamed (no verdict, or one without an agent)."""
    if verdict is None or verdict.agent is None:
        return "", "none"
    agent_ok = same_agent(known.agent, verdict.agent)
    step_ok = known.step is not None and known.step == verdict.step
    if agent_ok and step_ok:
        return "agent and step match", "good"
    if agent_ok:
        return "agent matches, step does not", "partial"
    if step_ok:
        return "step matches, agent does not", "partial"
    return "does not match", "bad"
