"""The one background batching unit (late blame spans, the verdict bus), and the bus's order: a blame
is kept before its trace's spans go on, and the other listeners hear it after."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from otel_blame.attribution.result import Attribution
from otel_blame.processor.batching import BatchingWorker
from otel_blame.processor.counters import Counters
from otel_blame.processor.listeners import TraceVerdict, VerdictBus


def test_every_item_is_handled_once_in_order_in_batches() -> None:
    handled: list[list[int]] = []
    gate = threading.Event()

    def handle(batch: list[int]) -> None:
        gate.wait(10)  # the first batch holds the thread while the rest queue up
        handled.append(batch)

    worker: BatchingWorker[int] = BatchingWorker(handle, name="test-batching", max_batch=4)
    for item in range(10):
        worker.put(item)
    assert worker.waiting == 10
    gate.set()
    assert worker.wait_idle(time.monotonic() + 10)
    worker.close()
    assert [item for batch in handled for item in batch] == list(range(10))
    assert len(handled) < 10 and max(len(batch) for batch in handled) <= 4


def test_a_batch_that_raises_does_not_stop_the_ones_behind_it() -> None:
    handled: list[int] = []

    def handle(batch: list[int]) -> None:
        if 0 in batch:
            raise RuntimeError("a bad batch")
        handled.extend(batch)

    worker: BatchingWorker[int] = BatchingWorker(handle, name="test-batching", max_batch=1)
    for item in range(3):
        worker.put(item)
    assert worker.wait_idle(time.monotonic() + 10)
    worker.close()
    assert handled == [1, 2]


def test_close_handles_what_waits() -> None:
    handled: list[int] = []
    worker: BatchingWorker[int] = BatchingWorker(handled.extend, name="test-batching")
    for item in range(100):
        worker.put(item)
    worker.close()
    assert handled == list(range(100))


class _Recorder:
    def __init__(self, name: str, events: list[str], *, fails: bool = False) -> None:
        self._name, self._events, self._fails = name, events, fails

    def on_verdicts(self, verdicts: Sequence[TraceVerdict]) -> None:
        self._events.extend(f"{self._name} {verdict.trace_id}" for verdict in verdicts)
        if self._fails:
            raise RuntimeError("a broken listener")


def _verdict(n: int) -> TraceVerdict:
    return TraceVerdict(f"{n:032x}", "failure", "svc", "svc", None, None)


def test_the_blamed_spans_go_on_after_the_blame_is_kept_and_before_the_other_listeners() -> None:
    events: list[str] = []
    bus = VerdictBus(keeping=[_Recorder("kept", events)], queued=[_Recorder("counted", events)])
    for n in range(20):
        trace = f"{n:032x}"
        bus.publish(_verdict(n), then=lambda trace=trace: events.append(f"exported {trace}"))
    assert bus.wait_idle(time.monotonic() + 10)
    bus.close()
    for n in range(20):
        trace = f"{n:032x}"
        kept, exported, counted = (
            events.index(f"{what} {trace}") for what in ("kept", "exported", "counted")
        )
        assert kept < exported < counted


def test_a_listener_that_raises_does_not_hold_the_spans_back() -> None:
    events: list[str] = []
    bus = VerdictBus(keeping=[_Recorder("kept", events, fails=True)])
    bus.publish(_verdict(1), then=lambda: events.append("exported"))
    assert bus.wait_idle(time.monotonic() + 10)
    bus.close()
    assert events == [f"kept {1:032x}", "exported"]


def test_without_queued_listeners_the_spans_go_on_at_once() -> None:
    events: list[str] = []
    bus = VerdictBus(inline=[_Recorder("metrics", events)])
    bus.publish(_verdict(1), then=lambda: events.append("exported"))
    assert events == [f"metrics {1:032x}", "exported"]
    bus.close()


def test_a_verdict_with_nothing_but_its_outcome_is_counted_inline_only() -> None:
    events: list[str] = []
    bus = VerdictBus(inline=[_Recorder("metrics", events)], queued=[_Recorder("counted", events)])
    bus.publish(_verdict(1))  # no trajectory, no blame
    assert bus.wait_idle(time.monotonic() + 10)
    bus.close()
    assert events == [f"metrics {1:032x}"]


def _blamed(n: int, *, replayed: bool) -> TraceVerdict:
    blame = Attribution(agent="solver", step=1, confidence=0.9, reason="said 41", method="heuristic")
    return TraceVerdict(f"{n:032x}", "failure", "svc", "svc", None, blame, replayed=replayed)


def test_a_replayed_blame_kept_before_the_stop_goes_to_no_listener_again_and_its_spans_go_on() -> None:
    events: list[str] = []
    kept_before = {f"{1:032x}"}
    counters = Counters()
    bus = VerdictBus(
        keeping=[_Recorder("kept", events)],
        queued=[_Recorder("counted", events)],
        kept=kept_before.__contains__,
        counters=counters,
    )
    bus.publish(_blamed(1, replayed=True), then=lambda: events.append("exported 1"))
    bus.publish(_blamed(2, replayed=True), then=lambda: events.append("exported 2"))  # not kept before
    bus.publish(_blamed(1, replayed=False), then=lambda: events.append("exported 1 again"))  # a new verdict
    assert bus.wait_idle(time.monotonic() + 10)
    bus.close()
    assert [event for event in events if not event.startswith("exported")] == [
        f"kept {2:032x}",
        f"kept {1:032x}",
        f"counted {2:032x}",
        f"counted {1:032x}",
    ]
    assert {"exported 1", "exported 2", "exported 1 again"} <= set(events)
    assert counters.snapshot()["replayed_blames_kept_before"] == 1


def test_a_trace_replayed_twice_in_one_batch_is_written_once() -> None:
    events: list[str] = []
    gate = threading.Event()
    bus = VerdictBus(keeping=[_Recorder("kept", events)], kept=lambda trace_id: False)
    bus.publish(TraceVerdict(f"{0:032x}", "failure", "", "", None, None), then=lambda: gate.wait(10))
    bus.publish(_blamed(3, replayed=True))  # from its deferred job
    bus.publish(_blamed(3, replayed=True))  # and from its own rows, replayed too
    gate.set()
    assert bus.wait_idle(time.monotonic() + 10)
    bus.close()
    assert events.count(f"kept {3:032x}") == 1
