"""Which pattern a cause falls into: the oldest pattern of its signature whose gist is similar. Pure.

Similarity is rapidfuzz's ``token_sort_ratio`` (0..100: the edit-distance ratio of the two gists with
their words sorted, so reordered clauses still match) at or above :data:`DEFAULT_SIMILARITY`. The rule
is *the oldest* similar pattern, not the most similar one: patterns are only ever added, so an index
that knows the patterns up to some point answers what one that knows every pattern would (a newer
pattern cannot be older than one it knows). That is what lets every replica keep its own copy and
consult the shared pattern book only for a cause none of its patterns takes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from rapidfuzz import fuzz

from otel_blame.patterns.cause import Cause, Signature

DEFAULT_SIMILARITY = 90.0


@dataclass(frozen=True, slots=True)
class Known:
    """A pattern as the index keeps it: its id, the gist that opened it, and when it was first seen."""

    id: str
    gist: str
    first_seen: float


class PatternIndex:
    """Known patterns per signature, oldest first. Thread-safe."""

    def __init__(self, similarity: float = DEFAULT_SIMILARITY) -> None:
        if not 0 < similarity <= 100:
            raise ValueError(f"similarity {similarity}: expected more than 0 and at most 100")
        self.similarity = similarity
        self._by_signature: dict[str, list[Known]] = {}
        self._exact: dict[tuple[str, str], Known] = {}
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, pattern_id: str) -> bool:
        return pattern_id in self._ids

    def find(self, cause: Cause) -> Known | None:
        """The oldest known pattern of the cause's signature whose gist is similar enough, or None."""
        key = cause.signature.key()
        with self._lock:
            exact = self._exact.get((key, cause.gist))
            if exact is not None:  # opened because no older pattern took this very gist: none does now
                return exact
            known = list(self._by_signature.get(key, ()))
        for pattern in known:  # oldest first: the first similar one is the answer
            if self.similar(cause.gist, pattern.gist):
                return pattern
        return None

    def similar(self, gist: str, other: str) -> bool:
        if gist == other:
            return True
        return fuzz.token_sort_ratio(gist, other, score_cutoff=self.similarity) > 0

    def add(self, signature: Signature, known: Known) -> None:
        """A pattern, in the order patterns were opened (a known id is not added twice)."""
        key = signature.key()
        with self._lock:
            if known.id in self._ids:
                return
            self._ids.add(known.id)
            self._by_signature.setdefault(key, []).append(known)
            self._exact.setdefault((key, known.gist), known)

    def extend(self, signature: Signature, patterns: Iterable[Known]) -> None:
        for known in patterns:
            self.add(signature, known)

    def assign(self, cause: Cause, at: float) -> tuple[Known, bool]:
        """The pattern the cause falls into, opening one when none does; (pattern, opened)."""
        found = self.find(cause)
        if found is not None:
            return found, False
        opened = Known(cause.candidate_id(), cause.gist, at)
        self.add(cause.signature, opened)
        return opened, True
