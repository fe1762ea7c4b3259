"""Blame the app can act on while it runs: the offline attribution of the task in progress.

:func:`attribute_current_task` builds a Trajectory from the steps the running task has recorded
so far (every framework hook and ``record_message`` go through one place, which keeps them on the
:class:`~otel_blame.instrumentation.TaskRun`) and runs an attribution method on it, in-process, with
no processor and no network. An orchestrator that sees a wrong answer can then retry with a
corrected instruction to the blamed agent (``docs/self-healing.md``). It needs pydantic (the
``processor`` extra); the instrumentation itself does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_blame.instrumentation.core import TaskRun, current_task

if TYPE_CHECKING:
    from otel_blame.attribution.result import Attribution
    from otel_blame.trajectory import Trajectory


def current_trajectory(task: TaskRun | None = None, *, failed: bool = True) -> Trajectory | None:
    """The recorded steps of ``task`` (default: the current one) as a Trajectory, or None without steps."""
    from otel_blame.trajectory import Outcome, Step, StepKind, Task, Trajectory

    run = task if task is not None else current_task()
    if run is None:
        return None
    steps = run.remembered_steps()
    if not steps:
        return None
    built = [
        Step(
            index=position,
            agent=step.agent,
            role=step.role,
            content=step.content,
            kind=StepKind(step.kind),
            tool_name=step.tool_name,
            is_error=step.is_error,
        )
        for position, step in enumerate(steps)
    ]
    return Trajectory(
        task=Task(
            name=run.name,
            input=run.input,
            expected_output=run.expected_output,
            conversation_id=run.conversation_id,
        ),
        steps=built,
        outcome=Outcome.FAILURE if failed else Outcome.UNKNOWN,
        trace_id=run.trace_id_hex,
        root_span_id=f"{run.span.get_span_context().span_id:016x}",
    )


def attribute_current_task(task: TaskRun | None = None, *, method: str = "heuristic") -> Attribution | None:
    """Which agent, at which step, most likely broke the task in progress (assumed failed).

    ``task`` defaults to the task the caller runs in; ``method`` is an offline method name
    (``heuristic``, the processor's default). Returns None outside a task or before its first
    step. ``Attribution.step`` is the step index the task's spans carry (``otel_blame.step.index``).
    """
    from otel_blame.attribution.registry import create_method, is_llm_method

    if is_llm_method(method):
        raise ValueError(f"{method} is an LLM method; attribute_current_task runs offline methods only")
    trajectory = current_trajectory(task)
    if trajectory is None:
        return None
    attribution = create_method(method).attribute(trajectory)
    return attribution
