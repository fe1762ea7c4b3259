"""The failure patterns in the blame store: its pattern book (one for every replica sharing a PostgreSQL
store), the definitions each kept blame carries, and the report the web UI, the API and `otel-blame top
--by pattern` read.

Real SQLite files and a real PostgreSQL server (Debian's, on loopback); two pattern books on two
connection pools assigning concurrently stand for two replicas."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from otel_blame.attribution.result import Attribution, Candidate
from otel_blame.patterns import PatternDefinition, cause_of
from otel_blame.store import StoreConfig, open_store
from otel_blame.store.patterns import StorePatternBook
from otel_blame.store.records import build_run
from otel_blame.trajectory import Outcome, Trajectory
from tests.postgres_cluster import empty_store_tables

TRAJECTORY = Trajectory.from_steps(
    [
        {"agent": "planner", "content": "Plan: refund order ORD-1042, 20 EUR."},
        {"agent": "coder", "content": "refund = 200"},
        {"agent": "lookup", "content": "HTTP 503", "kind": "tool", "tool_name": "orders_api"},
        {"agent": "reviewer", "content": "Looks fine. Final answer: 200"},
    ],
    outcome=Outcome.FAILURE,
)
# one cause written three ways (numbers, clause order), and another
REASONS = (
    "Step 1 by coder: it overrode what it was given; a value first appears here.",
    "Step 1 by coder: a value first appears here; it overrode what it was given.",
    "Step 3 by coder: it overrode what it was given; a value first appears here.",
)
OTHER = "Step 1 by coder: a later step says it went wrong."


def _verdict(reason: str, *, decided: bool = True, **fields: object) -> Attribution:
    values: dict[str, object] = {"category": "agent", "candidates": []}
    values.update(fields)
    return Attribution(
        agent="coder", step=1, confidence=0.8, decided=decided, reason=reason, method="ranker", **values
    )  # type: ignore[arg-type]


def _kept(book: StorePatternBook, verdict: Attribution, trace: int, at: float):  # noqa: ANN202
    cause = cause_of("shop", "refund", TRAJECTORY, verdict)
    known = book.assign(cause, at)
    return build_run(
        TRAJECTORY,
        verdict,
        trace_id=f"{trace:032x}",
        service="shop",
        attributed_at=at,
        pattern=PatternDefinition.of(known, cause),
    )


def test_the_report_counts_each_pattern_and_keeps_undecided_runs_apart(tmp_path: Path, now: float) -> None:
    store = open_store(StoreConfig(path=tmp_path / "store.sqlite3"))
    book = StorePatternBook(store.engine, similarity=90, max_per_signature=100)
    runs = [
        _kept(book, _verdict(reason), trace, now - 2970 + 60 * trace) for trace, reason in enumerate(REASONS)
    ]
    runs.append(_kept(book, _verdict(OTHER), 10, now - 100))
    guessed = [Candidate(step=1, agent="coder", score=0.4), Candidate(step=0, agent="planner", score=0.3)]
    runs.append(_kept(book, _verdict(OTHER, decided=False, candidates=guessed), 11, now - 50))
    store.add_many(runs)
    report = store.patterns(3600, now=now, buckets=6)
    assert [(p.count, p.role, p.action) for p in report.patterns] == [
        (3, "coder", "answer"),
        (1, "coder", "answer"),
    ]
    first = report.patterns[0]
    assert first.id == runs[0].pattern
    assert first.first_seen == pytest.approx(now - 2970, abs=0.002)
    assert first.last_seen == pytest.approx(now - 2970 + 120, abs=0.002)
    assert first.agents == {"coder": 3} and first.series == [0, 3, 0, 0, 0, 0]
    assert [e.trace_id for e in first.examples] == [runs[2].trace_id, runs[1].trace_id, runs[0].trace_id]
    assert report.total == 4 and report.undecided_runs == 1
    (undecided,) = report.undecided
    assert undecided.examples[0].candidates == ["coder", "planner"]
    # the failures list filters by pattern
    page = store.failures(pattern=first.id)
    assert page.total == 3 and {f.pattern for f in page.failures} == {first.id}
    store.close()


def test_a_book_reopened_on_the_store_joins_the_older_pattern(tmp_path: Path, now: float) -> None:
    store = open_store(StoreConfig(path=tmp_path / "store.sqlite3"))
    first = StorePatternBook(store.engine, similarity=90, max_per_signature=100)
    opened = first.assign(cause_of("shop", "refund", TRAJECTORY, _verdict(REASONS[0])), now)
    again = StorePatternBook(store.engine, similarity=90, max_per_signature=100)  # after a restart
    assert again.assign(cause_of("shop", "refund", TRAJECTORY, _verdict(REASONS[1])), now + 1) == opened
    assert store.pattern_definitions()[opened.id].first_seen == pytest.approx(now, abs=0.001)
    store.close()


def test_a_blame_kept_while_the_book_could_not_write_brings_its_pattern(tmp_path: Path, now: float) -> None:
    store = open_store(StoreConfig(path=tmp_path / "store.sqlite3"))
    verdict = _verdict(OTHER)
    cause = cause_of("shop", "refund", TRAJECTORY, verdict)
    from otel_blame.patterns import Known

    known = Known(cause.candidate_id(), cause.gist, round(now, 3))  # assigned from memory: not kept
    run = build_run(
        TRAJECTORY, verdict, trace_id="ab" * 16, service="shop", attributed_at=now,
        pattern=PatternDefinition.of(known, cause),
    )  # fmt: skip
    store.add_many([run])
    assert store.pattern_definitions() == {known.id: PatternDefinition.of(known, cause)}
    assert store.run("ab" * 16).pattern == known.id
    store.close()


def _engine(url: str):  # noqa: ANN202
    return create_engine(url.replace("postgresql://", "postgresql+psycopg://"), pool_pre_ping=True)


def test_two_replicas_meeting_new_causes_at_once_open_one_pattern_each(postgres_url: str) -> None:
    pytest.importorskip("psycopg")
    empty_store_tables(postgres_url)
    books = [StorePatternBook(_engine(postgres_url), similarity=90, max_per_signature=100) for _ in range(2)]
    reasons = [REASONS[i % 3] for i in range(30)] + [OTHER] * 10
    answers: list[list[str]] = [[], []]
    start = threading.Barrier(2)

    def replica(which: int) -> None:
        start.wait()
        for reason in reasons[which::2] + reasons[1 - which :: 2]:
            cause = cause_of("shop", "refund", TRAJECTORY, _verdict(reason))
            answers[which].append(book_of(which).assign(cause, 1.0).id)

    def book_of(which: int) -> StorePatternBook:
        return books[which]

    threads = [threading.Thread(target=replica, args=(which,)) for which in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(set(answers[0])) == len(set(answers[1])) == 2
    assert set(answers[0]) == set(answers[1])
    for book in books:
        book.engine.dispose()
