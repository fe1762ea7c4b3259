"""Which MAST failure mode the blamed agent's failure is: a small fitted model of the evidence.

MAST's fourteen modes (``otel_blame.attribution.systemic.FAILURE_MODES``) differ in what the failing
agent says and in how it stands in the run: a derailed agent talks past the task, one that repeats
handled work copies what others did, one that drops its termination conditions keeps going, a wrong
verification approves. The model reads the blamed agent's own words (each word's weight, the run's
agent names left out, so no system's names are learned) and its part in the run (the agent stage's
features: how much it writes and copies, whether it answers, checks or is checked, how its words
relate to the task), and scores each mode linearly; a softmax gives each mode's probability. The mode
named is the likeliest of the likeliest MAST group (a group's probability: its modes' summed), and
only where its probability stands out (``min_probability``): otherwise the evidence does not
support one.

Fitted offline (:mod:`otel_blame.training.mode_fit`) on runs whose failing agents are labelled with
their modes; shipped as a data file read with the standard library.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path

from otel_blame.trajectory import Trajectory

MODEL_FILE = "mode_model.json"
MESSAGE_CHARS = 1500  # what is read of each of the agent's messages
AGENT_CHARS = 12000  # and of all of them (its first messages): a bounded cost per verdict
_WORD = re.compile(r"[a-z][a-z']{2,}")


def agent_words(trajectory: Trajectory, agent: str) -> Counter[str]:
    """The words of ``agent``'s messages (lower-cased, three letters or more; the head of each, up to
    ``AGENT_CHARS`` in all), the run's agent names left out."""
    heads: list[str] = []
    joined = -1  # the length of the heads joined so far
    for step in trajectory.steps:
        if step.agent == agent and joined < AGENT_CHARS:  # (a later head would be cut off)
            heads.append(step.content[:MESSAGE_CHARS])
            joined += len(heads[-1]) + 1
    words = Counter(_WORD.findall(" ".join(heads)[:AGENT_CHARS].lower()))
    for name in trajectory.agents:  # (counted, then dropped: the other words keep their order)
        del words[name.lower()]
    return words


def mast_group(mode: str) -> str:
    """A failure mode's MAST group: ``FM-2.4`` -> ``FM-2``."""
    return mode.split(".", 1)[0]


@dataclass(frozen=True)
class ModeModel:
    """A linear score per mode over the agent's weighted words and its standardised role features."""

    modes: tuple[str, ...]  # MAST numbers, e.g. "FM-2.3"
    vocabulary: tuple[str, ...]
    idf: tuple[float, ...]
    word_weights: tuple[tuple[float, ...], ...]  # per word, one weight per mode
    structure: tuple[str, ...]
    structure_mean: tuple[float, ...]
    structure_scale: tuple[float, ...]
    structure_weights: tuple[tuple[float, ...], ...]  # per role feature, one weight per mode
    bias: tuple[float, ...]
    min_probability: float = 0.0
    trained_on: str = ""

    @cached_property
    def _index(self) -> dict[str, int]:
        """Each word's position in the vocabulary (built once per model)."""
        return {word: position for position, word in enumerate(self.vocabulary)}

    @cached_property
    def _columns(self) -> list[tuple[float, ...]]:
        """Each mode's weights over the vocabulary (the word weights transposed, once per model)."""
        if not self.word_weights:
            return [() for _ in self.bias]
        return list(zip(*self.word_weights, strict=True))

    def probabilities(self, words: Counter[str], role: dict[str, float]) -> list[tuple[float, str]]:
        """(probability, mode) for every mode, best first. (Each mode's score is summed over its
        column of word weights: the same additions, in the same order, as a loop over the words.)"""
        index = self._index
        found = [(index[word], math.log1p(count)) for word, count in words.items() if word in index]
        weighted = [(position, value * self.idf[position]) for position, value in found]
        norm = math.sqrt(sum(value * value for _, value in weighted)) or 1.0
        scores = []
        for score, column in zip(self.bias, self._columns, strict=True):
            for position, value in weighted:
                score += column[position] * value / norm
            scores.append(score)
        for name, mean, scale, weights in zip(
            self.structure, self.structure_mean, self.structure_scale, self.structure_weights, strict=True
        ):
            value = (role.get(name, 0.0) - mean) / scale
            for mode, weight in enumerate(weights):
                scores[mode] += weight * value
        top = max(scores)
        exps = [math.exp(score - top) for score in scores]
        total = sum(exps)
        found = [(value / total, mode) for value, mode in zip(exps, self.modes, strict=True)]
        return sorted(found, reverse=True)

    def predict(self, trajectory: Trajectory, agent: str, role: dict[str, float]) -> str | None:
        """The blamed agent's mode (a MAST number): the likeliest mode of the likeliest MAST group, a
        group's probability its modes' summed (the group is what the evidence tells apart most surely,
        and the mode named is always of it); None where that mode does not stand out."""
        found = self.probabilities(agent_words(trajectory, agent), role)
        groups: dict[str, float] = {}
        for probability, mode in found:
            group = mast_group(mode)
            groups[group] = groups.get(group, 0.0) + probability
        best = max(groups, key=groups.__getitem__)  # (ties: the group of the likelier mode)
        probability, mode = next(item for item in found if mast_group(item[1]) == best)
        return mode if probability >= self.min_probability else None

    @classmethod
    def from_dict(cls, data: dict) -> ModeModel:
        return cls(
            modes=tuple(data["modes"]),
            vocabulary=tuple(data["vocabulary"]),
            idf=tuple(float(v) for v in data["idf"]),
            word_weights=tuple(tuple(float(v) for v in row) for row in data["word_weights"]),
            structure=tuple(data["structure"]),
            structure_mean=tuple(float(v) for v in data["structure_mean"]),
            structure_scale=tuple(float(v) for v in data["structure_scale"]),
            structure_weights=tuple(tuple(float(v) for v in row) for row in data["structure_weights"]),
            bias=tuple(float(v) for v in data["bias"]),
            min_probability=float(data.get("min_probability", 0.0)),
            trained_on=str(data.get("trained_on", "")),
        )

    def to_dict(self) -> dict:
        def rounded(row: tuple[float, ...]) -> list[float]:
            return [round(v, 4) for v in row]

        return {
            "modes": list(self.modes),
            "vocabulary": list(self.vocabulary),
            "idf": rounded(self.idf),
            "word_weights": [rounded(row) for row in self.word_weights],
            "structure": list(self.structure),
            "structure_mean": rounded(self.structure_mean),
            "structure_scale": rounded(self.structure_scale),
            "structure_weights": [rounded(row) for row in self.structure_weights],
            "bias": rounded(self.bias),
            "min_probability": self.min_probability,
            "trained_on": self.trained_on,
        }

    @classmethod
    def load(cls, path: Path | None = None) -> ModeModel | None:
        """The packaged model (None when the package ships none), or the one at ``path``."""
        if path is None:
            return _packaged_model()
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


@lru_cache(maxsize=1)
def _packaged_model() -> ModeModel | None:
    found = resources.files("otel_blame.attribution").joinpath(MODEL_FILE)
    if not found.is_file():
        return None
    return ModeModel.from_dict(json.loads(found.read_text(encoding="utf-8")))
