"""Apps for the campaign tests, imported by the campaign's worker process as ``module:function``."""

from __future__ import annotations

import time

import autogen  # noqa: F401 - imported when the worker loads the app, not inside a timed run

from otel_blame.inject import demo_app
from otel_blame.instrumentation import set_outcome, task


def raises() -> None:
    raise RuntimeError("the app broke before its first message")


def hangs() -> None:
    with task("hangs"):
        time.sleep(600)


def never_fails(seed: int = 0) -> None:
    """The demo's group chat, but the app calls every answer right."""
    from otel_blame.demo.scenario import build_group_chat

    problem = demo_app.problem_for(seed)
    base_url, work_dir = demo_app._RESOURCES.get()
    user, manager = build_group_chat(base_url, work_dir)
    with task("never-fails", input=problem.question):
        user.initiate_chat(manager, message=problem.question, summary_method="last_msg")
        set_outcome(True)


def hangs_on_odd_seeds(seed: int = 0) -> bool:
    if seed % 2:
        with task("hangs"):
            time.sleep(600)
    return demo_app.run_task(seed)
