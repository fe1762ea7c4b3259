"""Options shared by ``attribute`` and ``eval``, and the attribution method they build."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from otel_blame.attribution.registry import (
    DEFAULT_ESCALATION,
    DEFAULT_METHOD,
    ESCALATIONS,
    METHOD_NAMES,
    OFFLINE_METHOD_NAMES,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from otel_blame.attribution.base import AttributionMethod
    from otel_blame.attribution.registry import Escalation
    from otel_blame.trajectory import Trajectory

method_option = click.option(
    "--method",
    "method_name",
    type=click.Choice(METHOD_NAMES),
    metavar="METHOD",
    default=DEFAULT_METHOD,
    show_default=True,
    help=f"Attribution method: {', '.join(METHOD_NAMES)}. The offline ones "
    f"({', '.join(OFFLINE_METHOD_NAMES)}) need no LLM.",
)
model_option = click.option("--model", default=None, help="LLM model (default: $OTEL_BLAME_MODEL or gpt-4o).")
base_url_option = click.option(
    "--base-url", default=None, help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL, else OpenAI)."
)
ground_truth_option = click.option(
    "--with-ground-truth", is_flag=True, help="Show the expected answer to the method, when the file has one."
)
cache_option = click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Cache LLM answers here.",
)

escalation_option = click.option(
    "--escalation",
    type=click.Choice(ESCALATIONS),
    default=DEFAULT_ESCALATION,
    show_default=True,
    envvar="OTEL_BLAME_ESCALATION",
    help="With an LLM endpoint configured (--base-url, $OPENAI_BASE_URL or $OPENAI_API_KEY), which "
    "verdicts of the offline method the LLM checks (guided_check, the top candidates only): never, "
    "undecided (decided verdicts spend no tokens) or always. Without an endpoint, undecided does "
    "nothing. Env: OTEL_BLAME_ESCALATION.",
)


def build_method(
    method_name: str,
    model: str | None,
    base_url: str | None,
    with_ground_truth: bool,
    cache_dir: Path | None,
    escalation: Escalation = "never",
    for_llm: Callable[[Trajectory], Trajectory] | None = None,
) -> AttributionMethod:
    """The named method; an LLM method, or an offline one escalating to an LLM, with settings from
    the flags and the environment; ``for_llm`` prepares what the escalation's LLM is shown."""
    from otel_blame.attribution.base import AttributionError
    from otel_blame.attribution.llm_settings import LLMSettings
    from otel_blame.attribution.registry import create_method, is_llm_method

    settings = None
    if is_llm_method(method_name) or escalation != "never":
        settings = LLMSettings.from_env(model=model, base_url=base_url, cache_dir=cache_dir)
    try:
        return create_method(
            method_name,
            llm=settings,
            with_ground_truth=with_ground_truth,
            escalation=escalation,
            for_llm=for_llm,
        )
    except AttributionError as error:
        what = "" if is_llm_method(method_name) else f"--escalation {escalation}: "
        raise click.ClickException(f"{what}{error}") from None
