"""The app zoo: offline apps of distinct shapes that ``otel-blame inject --app zoo:NAME`` runs.

Each app runs one task per call (``run_task(seed) -> bool``, the inject app contract) on the scripted
LLM, with replies computed from the conversation so a planted fault changes what follows. The
registry lists every app without importing it: an app's framework may be missing here, or live in
another environment (CrewAI has a virtualenv of its own), and ``--list-apps`` says so.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

PREFIX = "zoo:"
DEFAULT_ENVIRONMENT = "default"
# environment name -> the variable naming its interpreter, and where a checkout keeps it
ENVIRONMENTS: dict[str, tuple[str, str]] = {
    DEFAULT_ENVIRONMENT: ("OTEL_BLAME_PYTHON", ".venv"),
    "crewai": ("OTEL_BLAME_CREWAI_PYTHON", ".venv-crewai"),
}


@dataclass(frozen=True)
class ZooApp:
    name: str  # e.g. "triage"; `otel-blame inject --app zoo:triage`
    framework: str  # "ag2" | "autogen" | "agentchat" | "openai_agents" | "langgraph" | "crewai" | "api"
    shape: str  # one line, e.g. "triage desk with hand-offs to specialists"
    reference: str  # "otel_blame.inject.zoo.triage:run_task"
    environment: str = DEFAULT_ENVIRONMENT  # "crewai" when it needs .venv-crewai

    @property
    def module(self) -> str:
        return self.reference.partition(":")[0]


APPS: tuple[ZooApp, ...] = (
    ZooApp(
        "demo",
        "ag2",
        "five-agent arithmetic pipeline: plan, code, execute, review",
        "otel_blame.inject.demo_app:run_task",
    ),
    ZooApp(
        "orchestrator",
        "api",
        "orchestrator with a task ledger and web / file / code workers over a local corpus (Magentic-One)",
        "otel_blame.inject.zoo.orchestrator:run_task",
    ),
    ZooApp(
        "customer_service",
        "api",
        "assistant, simulated customer, SQLite tools, a written policy and a flaky service (tau-bench)",
        "otel_blame.inject.zoo.customer_service:run_task",
    ),
    ZooApp(
        "triage",
        "openai_agents",
        "triage desk with hand-offs to specialists",
        "otel_blame.inject.zoo.triage:run_task",
    ),
    ZooApp(
        "debate",
        "agentchat",
        "debate / voting team that settles on one answer",
        "otel_blame.inject.zoo.debate:run_task",
    ),
    ZooApp(
        "supervisor",
        "langgraph",
        "supervisor graph with research and writer nodes and a retrieval tool",
        "otel_blame.inject.zoo.supervisor:run_task",
    ),
    ZooApp(
        "crew",
        "crewai",
        "hierarchical crew with a manager delegating to specialists",
        "otel_blame.inject.zoo.crew:run_task",
        environment="crewai",
    ),
)

_BY_NAME = {app.name: app for app in APPS}


class UnknownApp(KeyError):
    """No zoo app of that name."""


def get_app(name: str) -> ZooApp:
    """The app named ``name`` (with or without the ``zoo:`` prefix)."""
    key = name.removeprefix(PREFIX)
    try:
        return _BY_NAME[key]
    except KeyError:
        raise UnknownApp(f"no zoo app {key!r}; the zoo has: {', '.join(_BY_NAME)}") from None


def is_zoo_reference(app: str) -> bool:
    return app.startswith(PREFIX)


def current_environment() -> str:
    """The environment this interpreter is: ``crewai`` when CrewAI imports here, else the default."""
    return "crewai" if importlib.util.find_spec("crewai") is not None else DEFAULT_ENVIRONMENT


def module_present(app: ZooApp) -> bool:
    """Whether the app's module is in this checkout (found without importing it or its framework)."""
    try:
        return importlib.util.find_spec(app.module) is not None
    except ModuleNotFoundError:
        return False


def interpreter_for(app: ZooApp) -> str | None:
    """The Python that runs ``app``: this one in its own environment, else the environment's
    interpreter (``$OTEL_BLAME_CREWAI_PYTHON``, or ``.venv-crewai`` in the working directory or the
    checkout), or None when that environment is not installed."""
    if app.environment == current_environment():
        return sys.executable
    variable, folder = ENVIRONMENTS.get(app.environment, ("", ""))
    configured = os.environ.get(variable) if variable else None
    if configured:
        return configured
    checkout = Path(__file__).resolve().parents[3]
    for root in (Path.cwd(), checkout):
        candidate = root / folder / "bin" / "python"
        if folder and candidate.exists():
            return str(candidate)
    return None


def availability(app: ZooApp) -> str:
    """One word for ``--list-apps``: ``ready``, ``other env`` (runs through that interpreter),
    ``no env`` (that environment is not installed) or ``missing`` (the module is not here)."""
    if not module_present(app):
        return "missing"
    if app.environment == current_environment():
        return "ready"
    return "other env" if interpreter_for(app) else "no env"
