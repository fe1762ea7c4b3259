"""Method names -> attribution methods: the one place the CLI and the processor build them from."""

from __future__ import annotations

from collections.abc import Callable

from otel_blame.attribution.base import AttributionMethod
from otel_blame.attribution.heuristic import HeuristicAttribution
from otel_blame.attribution.llm_client import LLMClient, LLMSettings
from otel_blame.attribution.llm_methods import LLM_METHODS
from otel_blame.attribution.random_baseline import RandomAttribution
from otel_blame.attribution.ranker import RankerAttribution

DEFAULT_METHOD = "ranker"

# "heuristic" names the offline default too (configurations, calibration files and metric labels
# written for it keep working, and get the ranker); "signals" is the earlier weighted sum of failure
# signals (otel_blame.attribution.heuristic), kept for comparison.
_OFFLINE: dict[str, Callable[[bool], AttributionMethod]] = {
    "ranker": lambda with_ground_truth: RankerAttribution(with_ground_truth=with_ground_truth),
    "heuristic": lambda with_ground_truth: RankerAttribution(
        with_ground_truth=with_ground_truth, name="heuristic"
    ),
    "signals": lambda with_ground_truth: HeuristicAttribution(with_ground_truth=with_ground_truth),
    "random": lambda with_ground_truth: RandomAttribution(seed=0),
}
_LLM: dict[str, Callable[[LLMSettings, bool], AttributionMethod]] = {
    name: (
        lambda settings, with_ground_truth, cls=cls: cls(
            LLMClient(settings), with_ground_truth=with_ground_truth
        )
    )
    for name, cls in LLM_METHODS.items()
}

METHOD_NAMES: tuple[str, ...] = (*_OFFLINE, *_LLM)


def create_method(
    name: str, *, llm: LLMSettings | None = None, with_ground_truth: bool = False
) -> AttributionMethod:
    """Build a method by name; LLM methods use ``llm`` or, when None, settings from the environment."""
    if name in _OFFLINE:
        return _OFFLINE[name](with_ground_truth)
    if name in _LLM:
        return _LLM[name](llm or LLMSettings.from_env(), with_ground_truth)
    raise ValueError(f"unknown attribution method {name!r}; choose one of: {', '.join(METHOD_NAMES)}")


def is_llm_method(name: str) -> bool:
    return name in _LLM
