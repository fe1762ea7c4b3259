"""Fitting the failure-mode model (:mod:`otel_blame.attribution.modes`) on agents labelled with their
MAST modes (AEGIS), offline, with numpy.

Each labelled faulty agent of a run is one example: its words, weighted by how rare they are across
the examples (the vocabulary: the most frequent words, in at least ``MIN_DOCUMENTS`` examples), and
its role features from the agent stage that do not depend on the ranking. A multinomial logistic
model with an L2 penalty, fitted by full-batch Adam (deterministic). An agent labelled with several
modes counts once for each.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from otel_blame.attribution.agents import agent_rows
from otel_blame.attribution.modes import ModeModel, agent_words
from otel_blame.attribution.ranker import RankerModel, rank
from otel_blame.training.runs import LabelledRun

VOCABULARY = 3000
MIN_DOCUMENTS = 10
L2 = 1e-4
ITERATIONS = 400
LEARNING_RATE = 0.05
# the agent stage's features that describe the agent's part in the run, not the ranking's say
ROLE_FEATURES: tuple[str, ...] = (
    "share",
    "arrival",
    "opens",
    "answers",
    "closes",
    "coordinator",
    "copied",
    "testifies",
    "testified",
    "failed_calls",
    "on_task",
    "length",
    "agents",
    "only_agent",
)


@dataclass
class Example:
    run: LabelledRun
    agent: str
    words: Counter[str]
    role: dict[str, float]
    modes: tuple[str, ...]


def examples(runs: Sequence[LabelledRun], model: RankerModel) -> list[Example]:
    """One example per labelled faulty agent that is a candidate of its run."""
    found = []
    for run in runs:
        if not run.modes:
            continue
        table = agent_rows(run.rows, rank(run.rows, model))
        roles = dict(zip(table.agents, table.rows, strict=True))
        for agent, modes in run.modes.items():
            if agent in roles and modes:
                found.append(Example(run, agent, agent_words(run.trajectory, agent), roles[agent], modes))
    return found


def fit_modes(train: Sequence[Example], *, l2: float = L2, trained_on: str = "") -> ModeModel:
    modes = sorted({mode for example in train for mode in example.modes})
    documents = Counter(word for example in train for word in example.words)
    vocabulary = [word for word, count in documents.most_common(VOCABULARY) if count >= MIN_DOCUMENTS]
    idf = np.array([math.log(len(train) / documents[word]) for word in vocabulary])
    index = {word: position for position, word in enumerate(vocabulary)}
    # one row per (example, mode): an agent with two modes teaches both
    pairs = [(example, mode) for example in train for mode in example.modes]
    words = np.zeros((len(pairs), len(vocabulary)))
    for row, (example, _) in enumerate(pairs):
        for word, count in example.words.items():
            position = index.get(word)
            if position is not None:
                words[row, position] = math.log1p(count) * idf[position]
    words /= np.linalg.norm(words, axis=1, keepdims=True) + 1e-12
    roles = np.array([[example.role.get(name, 0.0) for name in ROLE_FEATURES] for example, _ in pairs])
    mean = roles.mean(axis=0)
    scale = roles.std(axis=0)
    scale[scale < 1e-6] = 1.0
    x = np.hstack([words, (roles - mean) / scale])
    target = np.zeros((len(pairs), len(modes)))
    for row, (_, mode) in enumerate(pairs):
        target[row, modes.index(mode)] = 1.0
    weights = np.zeros((x.shape[1], len(modes)))
    bias = np.zeros(len(modes))
    first, second = np.zeros_like(weights), np.zeros_like(weights)
    for step in range(1, ITERATIONS + 1):
        scores = x @ weights + bias
        scores -= scores.max(axis=1, keepdims=True)
        probabilities = np.exp(scores)
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        error = probabilities - target
        gradient = x.T @ error / len(x) + l2 * weights
        bias -= 0.5 * error.mean(axis=0)
        first = 0.9 * first + 0.1 * gradient
        second = 0.999 * second + 0.001 * gradient**2
        weights -= LEARNING_RATE * (first / (1 - 0.9**step)) / (np.sqrt(second / (1 - 0.999**step)) + 1e-8)
    return ModeModel(
        modes=tuple(modes),
        vocabulary=tuple(vocabulary),
        idf=tuple(float(v) for v in idf),
        word_weights=tuple(tuple(float(v) for v in row) for row in weights[: len(vocabulary)]),
        structure=ROLE_FEATURES,
        structure_mean=tuple(float(v) for v in mean),
        structure_scale=tuple(float(v) for v in scale),
        structure_weights=tuple(tuple(float(v) for v in row) for row in weights[len(vocabulary) :]),
        bias=tuple(float(v) for v in bias),
        trained_on=trained_on or f"{len(train)} labelled agents",
    )
