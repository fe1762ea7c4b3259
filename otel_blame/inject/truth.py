"""Causes an app knows itself: a run that fails because a dependency the app made flaky failed.

An app with a flaky dependency (a service that answers HTTP 503 at a set rate) knows when a run
failed from the dependency alone. It says so with :func:`declare_dependency_failure` (the step whose
call failed, the agent whose call it was); the campaign's worker collects the declaration after the
run, and a run that failed with no planted fault is then labelled with it (fault kind
``dependency``) instead of being an unexplained clean failure. Without a campaign (no worker
collecting) a declaration costs one list append per run and is dropped at the next run.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

DEPENDENCY = "dependency"


@dataclass(frozen=True)
class DeclaredCause:
    kind: str  # "dependency"
    agent: str  # whose call it was
    step: int  # the step of the failed call's result
    dependency: str  # the failing service or tool
    description: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_lock = threading.Lock()
_declared: list[DeclaredCause] = []


def declare_dependency_failure(agent: str, step: int, dependency: str, description: str) -> None:
    """This run fails because ``dependency`` failed at ``step`` (a call of ``agent``)."""
    with _lock:
        _declared.append(DeclaredCause(DEPENDENCY, agent, step, dependency, description))


def take_declared() -> list[DeclaredCause]:
    """The causes declared since the last call (the worker calls it once per run)."""
    with _lock:
        taken = list(_declared)
        _declared.clear()
    return taken
