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

from otel_blame.patterns.cause import OTHER_REASONS, Cause, Signature, pattern_id

DEFAULT_SIMILARITY = 90.0
DEFAULT_MAX_PER_SIGNATURE = 100


@dataclass(frozen=True, slots=True)
class Known:
    """A pattern as the index keeps it: its id, the gist that opened it, and when it was first seen."""

    id: str
    gist: str
    first_seen: float


class PatternIndex:
    """Known patterns per signature, oldest first. Thread-safe."""

    def __init__(
        self, similarity: float = DEFAULT_SIMILARITY, max_per_signature: int = DEFAULT_MAX_PER_SIGNATURE
    ) -> None:
        if not 0 < similarity <= 100:
            raise ValueError(f"similarity {similarity}: expected more than 0 and at most 100")
        if max_per_signature < 1:
            raise ValueError(f"max_per_signature {max_per_signature}: expected at least 1")
        self.similarity = similarity
        self.max_per_signature = max_per_signature
        self._by_signature: dict[str, list[Known]] = {}
        self._exact: dict[tuple[str, str], Known] = {}
        self._by_id: dict[str, Known] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, pattern_id: str) -> bool:
        return pattern_id in self._by_id

    def find(self, cause: Cause) -> Known | None:
        """The oldest known pattern of the cause's signature whose gist is similar enough, or None."""
        key = cause.signature.key()
        with self._lock:
            exact = self._exact.get((key, cause.gist))
            if exact is not None:  # opened because no older pattern took this very gist: none does now
                return exact
            known = list(self._by_signature.get(key, ()))
        for pattern in known:  # oldest first: the first similar one is the answer
            if pattern.gist != OTHER_REASONS and self.similar(cause.gist, pattern.gist):
                return pattern
        return None

    def count(self, signature: Signature) -> int:
        """How many patterns the signature has."""
        with self._lock:
            return len(self._by_signature.get(signature.key(), ()))

    def opening(self, cause: Cause, at: float) -> Known:
        """The pattern a cause no known pattern takes opens: its own, or once its signature has
        ``max_per_signature`` patterns, the signature's *other reasons* pattern (so reasons that never
        repeat, as an LLM's may not, cannot grow the patterns without bound)."""
        if self.count(cause.signature) >= self.max_per_signature:
            return Known(pattern_id(cause.signature, OTHER_REASONS), OTHER_REASONS, at)
        return Known(cause.candidate_id(), cause.gist, at)

    def similar(self, gist: str, other: str) -> bool:
        if gist == other:
            return True
        return fuzz.token_sort_ratio(gist, other, score_cutoff=self.similarity) > 0

    def add(self, signature: Signature, known: Known) -> None:
        """A pattern, in the order patterns were opened (a known id is not added twice)."""
        key = signature.key()
        with self._lock:
            if known.id in self._by_id:
                return
            self._by_id[known.id] = known
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
        opened = self.opening(cause, at)
        if opened.id in self:  # the signature's other-reasons pattern, opened before
            return self.get(opened.id) or opened, False
        self.add(cause.signature, opened)
        return opened, True

    def get(self, pattern_id: str) -> Known | None:
        with self._lock:
            return self._by_id.get(pattern_id)
