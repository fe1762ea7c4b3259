"""Receiving processes: the OTLP/gRPC port served by processes of their own, each with its own log.

Why: an acknowledgement waits for its request's log commit, and a commit is a few handovers of
the GIL between the receiving thread and the log's writer thread. In the processor's own process
the GIL is wanted by every stage at once (completing and exporting traces, the blame listeners,
the analysis results), and each handover waits in that queue: a commit that takes 2 ms alone took
15-20 ms there at saturation, and that wait, not the CPU, set the accepted rate. A receiving
process has nothing else to do; its commits take the time the disk takes.

With ``receivers.grpc_processes`` = N (>= 1), N processes bind the gRPC endpoint together
(``SO_REUSEPORT``: the kernel spreads the connections over them). Each does what the log stage
does (:class:`~otel_blame.processor.ingest.Ingest`): check a request, store it in its own log
(``wal.dir/grpc-<n>/``, group commit), cut it by trace id, acknowledge it; and it hands the cut
request to the processor over a pipe, from a sending thread (a bounded queue: a processor that
falls behind slows the senders down). The processor assembles those groups with the rest, so every
trace reaches the one assembler whichever process received its spans. A group's log row is named
by the shard's number and the row's id (:func:`row_ref`); when the trace is delivered, the
processor sends the release back to the shard that stored it, which deletes the row once all its
traces are out. On start each shard replays what its log holds before it opens the port; a shard
ends with the processor (also after ``kill -9``, within a second), and its log is replayed on the
next start. Requests that come over OTLP/HTTP or through :meth:`BlameProcessor.accept_traces` go
to the processor's own log, as before.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from otel_blame.processor.assembler import ArrivedGroups
from otel_blame.processor.config import DetectionConfig, ProcessorConfig, ReceiversConfig, WALConfig
from otel_blame.processor.counters import Counters
from otel_blame.processor.decision import FailureDetector
from otel_blame.processor.errors import Accepted
from otel_blame.processor.ingest import Ingest
from otel_blame.processor.lifeline import end_with
from otel_blame.processor.stage import Consumer
from otel_blame.processor.wal import KIND_LOGS, KIND_TRACES, SharedBytes, WriteAheadLog

log = logging.getLogger(__name__)

_SHARD_BITS = 40  # a row ref: shard number above these bits, the row's id below (0: the processor's log)


def row_ref(shard: int, row_id: int) -> int:
    return shard << _SHARD_BITS | row_id


def shard_of(ref: int) -> tuple[int, int]:
    """(shard number, row id) of a row ref; shard 0 is the processor's own log."""
    return ref >> _SHARD_BITS, ref & ((1 << _SHARD_BITS) - 1)


# -- messages over the pipe -------------------------------------------------------------------------
# shard -> processor: ("groups", ArrivedGroups), ("stats", dict, asked), ("ready", port), ("stopped",),
#                     ("closed", rows left on disk or None), ("failed", message)
# processor -> shard: ("release", [row ids]), ("stats", asked), ("stop", grace seconds), ("close",)


class ReceivingProcesses:
    """The processor's side: starts the shards, takes in what they received, routes releases."""

    def __init__(
        self,
        config: ProcessorConfig,
        count: int,
        *,
        assembly: Consumer[ArrivedGroups],
        release_own: Callable[[list[int]], None],
        shared_bytes: SharedBytes,
    ) -> None:
        self._config = config
        self._shared_bytes = shared_bytes
        self._count = count
        self._assembly = assembly
        self._release_own = release_own
        self._shards: list[_Shard] = []
        self.port = 0
        self.host = ""

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> None:
        """Start the shards one after the other (the first binds the configured endpoint, port 0
        included; the others bind the port it got), each after replaying its log."""
        endpoint = self._config.receivers.grpc_endpoint or ""
        self.host, _, port = endpoint.rpartition(":")
        context = multiprocessing.get_context("forkserver")
        for number in range(1, self._count + 1):
            ours, theirs = context.Pipe(duplex=True)
            process = context.Process(
                target=shard_main,
                args=(
                    number,
                    _ShardConfig.of(self._config),
                    f"{self.host}:{port}",
                    theirs,
                    os.getpid(),
                    self._shared_bytes,
                ),
                name=f"otel-blame-grpc-{number}",
                daemon=True,
            )
            process.start()
            theirs.close()
            shard = _Shard(number, process, ours, self)
            self._shards.append(shard)
            port = str(shard.wait_ready(timeout))
        self.port = int(port)

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def stop_receiving(self, grace: float) -> None:
        """No new requests; returns once everything the shards stored was handed over."""
        for shard in self._shards:
            shard.send(("stop", grace))
        for shard in self._shards:
            shard.stopped.wait(grace + 10)

    def close(self, timeout: float = 10.0) -> None:
        """Close the shards' logs (after the releases sent so far) and end them."""
        for shard in self._shards:
            shard.send(("close",))
        for shard in self._shards:
            shard.closed.wait(timeout)
            shard.process.join(timeout)
            if shard.process.is_alive():
                shard.process.kill()
            shard.connection.close()

    @property
    def empty(self) -> bool:
        """True when every shard's log was empty when it closed."""
        return all(shard.rows_left == 0 for shard in self._shards)

    @property
    def rows_left(self) -> int:
        return sum(shard.rows_left or 0 for shard in self._shards)

    # -- the chain --------------------------------------------------------------------------------
    def release(self, refs: list[int]) -> None:
        """The exporter's ``on_delivered``: each row ref to the log that holds it."""
        own: list[int] = []
        by_shard: dict[int, list[int]] = {}
        for ref in refs:
            shard, row_id = shard_of(ref)
            if shard == 0:
                own.append(row_id)
            else:
                by_shard.setdefault(shard, []).append(row_id)
        if own:
            self._release_own(own)
        for number, rows in by_shard.items():
            self._shards[number - 1].send(("release", rows))

    def stats(self) -> dict[str, int]:
        """The shards' counters and log gauges, summed, asked for now. The answer comes down the pipe
        after every request a shard acknowledged before, so it is also a barrier: once it is here,
        those requests are in the assembler (verdicts use it so). A shard that does not answer
        within a second gives its last counts."""
        total: dict[str, int] = {}
        for shard in self._shards:
            for key, value in shard.ask_stats(1.0).items():
                total[key] = total.get(key, 0) + value
        return total


class _Shard:
    """One receiving process, as the processor sees it: its pipe and the thread that reads it."""

    def __init__(self, number: int, process: Any, connection: Connection, owner: ReceivingProcesses) -> None:
        self.number = number
        self.process = process
        self.connection = connection
        self.owner = owner
        self.stats: dict[str, int] = {}
        self.rows_left: int | None = None
        self.ready: queue.SimpleQueue[int | str] = queue.SimpleQueue()
        self.stopped = threading.Event()
        self.closed = threading.Event()
        self._send_lock = threading.Lock()
        self._asking = threading.Lock()
        self._asked = 0  # the last stats request sent
        self._answered = threading.Condition()
        self._answer = 0  # the request the last stats answer answered
        self._reader = threading.Thread(target=self._read, name=f"otel-blame-shard-{number}", daemon=True)
        self._reader.start()

    def wait_ready(self, timeout: float) -> int:
        try:
            answer = self.ready.get(timeout=timeout)
        except queue.Empty:
            raise OSError(f"receiving process {self.number} did not start within {timeout:.0f} s") from None
        if isinstance(answer, str):
            raise OSError(f"receiving process {self.number}: {answer}")
        return answer

    def ask_stats(self, timeout: float) -> dict[str, int]:
        with self._asking:
            if self.closed.is_set():
                return self.stats
            self._asked += 1
            asked = self._asked
            self.send(("stats", asked))
            with self._answered:
                self._answered.wait_for(lambda: self._answer >= asked or self.closed.is_set(), timeout)
            return self.stats

    def send(self, message: tuple) -> None:
        with self._send_lock:
            try:
                self.connection.send(message)
            except OSError:  # the shard is gone: its log is replayed on the next start
                log.warning("receiving process %d is gone; %s not sent", self.number, message[0])

    def _read(self) -> None:
        assembly, number = self.owner._assembly, self.number
        while True:
            try:
                message = self.connection.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind == "groups":
                got: ArrivedGroups = message[1]
                ref = row_ref(number, got.row)
                assembly.consume(ArrivedGroups(got.kind, got.groups, ref, got.logs, got.replayed))
            elif kind == "stats":
                with self._answered:
                    self.stats = message[1]
                    self._answer = max(self._answer, message[2])
                    self._answered.notify_all()
            elif kind == "ready":
                self.ready.put(int(message[1]))
            elif kind == "failed":
                self.ready.put(str(message[1]))
            elif kind == "stopped":
                self.stopped.set()
            elif kind == "closed":
                self.rows_left = message[1]
                self.closed.set()
        if not self.closed.is_set():
            log.error("receiving process %d ended; its log is replayed on the next start", number)
        self.stopped.set()
        self.closed.set()


# -- the receiving process ------------------------------------------------------------------------
@dataclass(frozen=True)
class _ShardConfig:
    """The sections a receiving process reads (the layered configuration class does not pickle)."""

    receivers: ReceiversConfig
    wal: WALConfig
    detection: DetectionConfig

    @classmethod
    def of(cls, config: ProcessorConfig) -> _ShardConfig:
        return cls(config.receivers, config.wal, config.detection)


@dataclass
class _Facade:
    """The gRPC receiver's handler in a shard."""

    ingest: Ingest

    def accept_traces(self, body: bytes) -> Accepted:
        return self.ingest.accept(KIND_TRACES, body)

    def accept_logs(self, body: bytes) -> Accepted:
        return self.ingest.accept(KIND_LOGS, body)


class _Outbox:
    """Hands cut requests to the processor from a thread of its own, so that an acknowledgement does
    not wait for the processor to read them; at most ``capacity`` wait (then receiving waits)."""

    def __init__(self, connection: Connection, lock: threading.Lock, capacity: int = 64) -> None:
        self._connection = connection
        self._lock = lock
        self._queue: queue.Queue[tuple | None] = queue.Queue(capacity)
        self._thread = threading.Thread(target=self._run, name="otel-blame-shard-out", daemon=True)
        self._thread.start()

    def consume(self, item: ArrivedGroups) -> None:
        self._queue.put(("groups", item))

    def put(self, message: tuple) -> None:
        self._queue.put(message)

    def flush_and_close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (message := self._queue.get()) is not None:
            with self._lock:
                self._connection.send(message)


def shard_main(
    number: int,
    config: _ShardConfig,
    endpoint: str,
    connection: Connection,
    processor_pid: int,
    shared_bytes: SharedBytes,
) -> None:
    """A receiving process: its log, replayed; the gRPC receiver; the pipe to the processor."""
    from otel_blame.processor.receivers import GRPCReceiver

    send_lock = threading.Lock()
    try:
        wal = WriteAheadLog(
            config.wal.dir / f"grpc-{number}",
            config.wal.max_bytes,
            config.wal.reserve_bytes,
            shared=shared_bytes,
        )
    except OSError as error:
        connection.send(("failed", str(error)))
        return
    counters = Counters()
    outbox = _Outbox(connection, send_lock)
    ingest = Ingest(wal, config.wal, outbox, None, counters, FailureDetector(config.detection).failure_reason)
    ingest.replay()
    try:
        receiver = GRPCReceiver(endpoint, config.receivers, _Facade(ingest), share_port=True)
    except OSError as error:
        outbox.put(("failed", str(error)))
        outbox.flush_and_close()
        wal.close()
        return
    ingest.accepting = True
    receiver.start()
    outbox.put(("ready", receiver.port))
    end_with(processor_pid)
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            os._exit(0)  # the processor is gone
        kind = message[0]
        if kind == "release":
            wal.release(message[1])
        elif kind == "stats":
            outbox.put(("stats", _shard_stats(counters, wal), message[1]))
        elif kind == "stop":
            ingest.accepting = False
            receiver.stop(grace=float(message[1]))
            outbox.put(("stopped",))
        elif kind == "close":
            outbox.put(("stats", _shard_stats(counters, wal), 0))
            outbox.flush_and_close()
            wal.close()
            with send_lock:
                connection.send(("closed", wal.rows_on_disk))
            return


def _shard_stats(counters: Counters, wal: WriteAheadLog) -> dict[str, int]:
    stats = {key: value for key, value in counters.snapshot().items() if value}
    stats.update(wal.stats())
    return stats
