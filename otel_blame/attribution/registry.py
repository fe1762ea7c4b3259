"""Method names -> attribution methods: the one place the CLI and the processor build them from.

Names are known without importing any method, and a method's module is imported only when it is
built: ``otel-blame attribute`` with the offline default never loads the LLM client, its prompts
or tenacity (start-up time, docs/benchmarks.md "CLI start-up").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from otel_blame.attribution.base import AttributionMethod
    from otel_blame.attribution.llm_client import LLMSettings
    from otel_blame.trajectory import Trajectory

DEFAULT_METHOD = "ranker"

# "heuristic" names the offline default too (configurations, calibration files and metric labels
# written for it keep working, and get the ranker); "signals" is the earlier weighted sum of failure
# signals (otel_blame.attribution.heuristic), kept for comparison.
OFFLINE_METHOD_NAMES: tuple[str, ...] = ("ranker", "heuristic", "signals", "random")
# the ``name`` of each class in otel_blame.attribution.llm_methods.LLM_METHODS (a test keeps them equal)
LLM_METHOD_NAMES: tuple[str, ...] = (
    "all_at_once",
    "step_by_step",
    "binary_search",
    "hybrid",
    "counterfactual",
    "guided_check",
    "self_consistency",
)
METHOD_NAMES: tuple[str, ...] = (*OFFLINE_METHOD_NAMES, *LLM_METHOD_NAMES)

# when an offline method's verdicts go to an LLM (otel_blame.attribution.escalation)
Escalation = Literal["never", "undecided", "always"]
ESCALATIONS: tuple[Escalation, ...] = ("never", "undecided", "always")
DEFAULT_ESCALATION: Escalation = "undecided"  # takes effect only with an LLM endpoint configured


def _offline(name: str, with_ground_truth: bool) -> AttributionMethod:
    if name in ("ranker", "heuristic"):
        from otel_blame.attribution.ranker import RankerAttribution

        return RankerAttribution(with_ground_truth=with_ground_truth, name=name)
    if name == "signals":
        from otel_blame.attribution.heuristic import HeuristicAttribution

        return HeuristicAttribution(with_ground_truth=with_ground_truth, name=name)
    from otel_blame.attribution.random_baseline import RandomAttribution

    return RandomAttribution(seed=0)


def _llm_settings(llm: LLMSettings | None) -> LLMSettings:
    from otel_blame.attribution.llm_settings import LLMSettings

    return llm or LLMSettings.from_env()


def escalates(name: str, escalation: Escalation, llm: LLMSettings | None = None) -> bool:
    """Whether ``name`` built with ``escalation`` hands verdicts to an LLM: an offline method, an
    escalation other than ``never``, and an endpoint configured (``llm``, else the environment)."""
    if name not in OFFLINE_METHOD_NAMES or escalation == "never":
        return False
    return escalation == "always" or _llm_settings(llm).configured


def create_method(
    name: str,
    *,
    llm: LLMSettings | None = None,
    with_ground_truth: bool = False,
    escalation: Escalation = "never",
    for_llm: Callable[[Trajectory], Trajectory] | None = None,
) -> AttributionMethod:
    """Build a method by name; LLM methods use ``llm`` or, when None, settings from the environment.
    Its verdicts carry ``name`` as their method, whatever the method calls itself.

    ``escalation`` (offline methods; :mod:`otel_blame.attribution.escalation`): ``undecided`` or
    ``always`` wraps the offline method so that its verdicts go to ``guided_check`` when an endpoint
    is configured (``undecided`` without one builds the offline method; ``always`` without one is
    the client's "no LLM configured" error). ``for_llm`` prepares what the LLM is shown (redaction).
    """
    if name in OFFLINE_METHOD_NAMES:
        offline = _offline(name, with_ground_truth)
        if not escalates(name, escalation, llm):
            return offline
        from otel_blame.attribution.escalation import EscalatingAttribution
        from otel_blame.attribution.llm_client import LLMClient
        from otel_blame.attribution.llm_methods import GuidedCheck

        checker = GuidedCheck(LLMClient(_llm_settings(llm)), with_ground_truth=with_ground_truth)
        mode: Literal["undecided", "always"] = "always" if escalation == "always" else "undecided"
        return EscalatingAttribution(offline, checker, escalation=mode, for_llm=for_llm)
    if name in LLM_METHOD_NAMES:
        from otel_blame.attribution.llm_client import LLMClient
        from otel_blame.attribution.llm_methods import LLM_METHODS

        return LLM_METHODS[name](LLMClient(_llm_settings(llm)), with_ground_truth=with_ground_truth)
    raise ValueError(f"unknown attribution method {name!r}; choose one of: {', '.join(METHOD_NAMES)}")


def is_llm_method(name: str) -> bool:
    return name in LLM_METHOD_NAMES
