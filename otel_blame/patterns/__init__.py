"""Failure patterns: what keeps breaking across runs.

A pattern is what verdicts say about their failure's cause, made comparable across runs
(:mod:`.cause`), grouped by a text similarity of their reasons (:mod:`.index`). Pure: the processor,
the blame store, the CLI and the benchmarks all group through this package.
"""

from otel_blame.patterns.cause import (
    KIND_CAUSE,
    KIND_UNDECIDED,
    OTHER_REASONS,
    Cause,
    Signature,
    action_of,
    cause_of,
    gist,
    is_pattern_id,
    pattern_id,
    role_of,
    undecided_id,
)
from otel_blame.patterns.index import DEFAULT_MAX_PER_SIGNATURE, DEFAULT_SIMILARITY, Known, PatternIndex
from otel_blame.patterns.report import (
    PatternDefinition,
    PatternExample,
    PatternReport,
    PatternRun,
    PatternSummary,
    build_report,
)

__all__ = [
    "DEFAULT_MAX_PER_SIGNATURE",
    "DEFAULT_SIMILARITY",
    "OTHER_REASONS",
    "PatternDefinition",
    "PatternExample",
    "PatternReport",
    "PatternRun",
    "PatternSummary",
    "build_report",
    "KIND_CAUSE",
    "KIND_UNDECIDED",
    "Cause",
    "Known",
    "PatternIndex",
    "Signature",
    "action_of",
    "cause_of",
    "gist",
    "is_pattern_id",
    "pattern_id",
    "role_of",
    "undecided_id",
]
