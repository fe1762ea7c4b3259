"""One method's answer on one run, as every data set's evaluation asks for it: timed, and a run the
method cannot answer kept as its error (scored wrong), never raised."""

from __future__ import annotations

import time
from dataclasses import dataclass

from otel_blame.attribution.base import AttributionError, AttributionMethod
from otel_blame.attribution.result import Attribution
from otel_blame.trajectory import Trajectory


@dataclass(frozen=True)
class Attempt:
    attribution: Attribution | None  # None: the method failed on this run
    error: AttributionError | None
    seconds: float  # wall time of the method's call


def attempt(method: AttributionMethod, trajectory: Trajectory) -> Attempt:
    started = time.perf_counter()
    try:
        attribution = method.attribute(trajectory)
    except AttributionError as error:
        return Attempt(None, error, time.perf_counter() - started)
    return Attempt(attribution, None, time.perf_counter() - started)
