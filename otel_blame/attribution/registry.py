"""Method names -> attribution methods: the one place the CLI and the processor build them from.

Names are known without importing any method, and a method's module is imported only when it is
built: ``otel-blame attribute`` with the offline default never loads the LLM client, its prompts
or tenacity (start-up time, docs/benchmarks.md "CLI start-up").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from otel_blame.attribution.base import AttributionMethod
    from otel_blame.attribution.llm_client import LLMSettings
    from otel_blame.attribution.result import Attribution
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


class _AskedFor:
    """A method whose verdicts say the registry name it was built under: ``signals`` is the earlier
    offline method, whose own name (``heuristic``) is now the ranker's alias, so without this the
    failures list showed two "heuristic" rows for one file with different culprits."""

    def __init__(self, method: AttributionMethod, name: str) -> None:
        self.method = method
        self.name = name

    def attribute(self, trajectory: Trajectory) -> Attribution:
        attribution = self.method.attribute(trajectory)
        if attribution.method == self.name:
            return attribution
        return attribution.model_copy(update={"method": self.name})

    def __getattr__(self, attribute: str) -> Any:  # score_steps, weights … of the method itself
        return getattr(self.method, attribute)


def _offline(name: str, with_ground_truth: bool) -> AttributionMethod:
    if name in ("ranker", "heuristic"):
        from otel_blame.attribution.ranker import RankerAttribution

        return RankerAttribution(with_ground_truth=with_ground_truth, name=name)
    if name == "signals":
        from otel_blame.attribution.heuristic import HeuristicAttribution

        return _AskedFor(HeuristicAttribution(with_ground_truth=with_ground_truth), name)
    from otel_blame.attribution.random_baseline import RandomAttribution

    return RandomAttribution(seed=0)


def create_method(
    name: str, *, llm: LLMSettings | None = None, with_ground_truth: bool = False
) -> AttributionMethod:
    """Build a method by name; LLM methods use ``llm`` or, when None, settings from the environment.
    Its verdicts carry ``name`` as their method, whatever the method calls itself."""
    if name in OFFLINE_METHOD_NAMES:
        return _offline(name, with_ground_truth)
    if name in LLM_METHOD_NAMES:
        from otel_blame.attribution.llm_client import LLMClient, LLMSettings
        from otel_blame.attribution.llm_methods import LLM_METHODS

        settings = llm or LLMSettings.from_env()
        return LLM_METHODS[name](LLMClient(settings), with_ground_truth=with_ground_truth)
    raise ValueError(f"unknown attribution method {name!r}; choose one of: {', '.join(METHOD_NAMES)}")


def is_llm_method(name: str) -> bool:
    return name in LLM_METHOD_NAMES
