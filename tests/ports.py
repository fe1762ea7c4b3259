"""The one road to a TCP port for a process a test starts (Collector, Jaeger, Tempo, Prometheus,
Alertmanager, PostgreSQL, `otel-blame serve`, a uvicorn thread, a closed port to be refused on).

Picking a port by binding port 0 and closing the socket has two holes: the kernel may hand the same
number to the next pick (it did: a Collector's OTLP port and its health port collided), and any
process on the machine may take it before the child binds it. So ports come from here instead:

- from below the kernel's ephemeral range (``ip_local_port_range``), where neither a ``bind(0)`` nor
  an outgoing connection ever lands, so nothing but an explicit bind can take one;
- each one checked free on 127.0.0.1 (and ::1 where the machine has it) when it is handed out;
- each one held, for the life of the process that reserved it, by an exclusive ``flock`` on a file
  named after it in a directory every test process shares: pytest-xdist workers and two test runs
  side by side never share one, and a crashed process's locks go with it;
- never handed out twice in one process (a set), so a run gets every number once.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

LOCK_DIR = Path(
    os.environ.get("OTEL_BLAME_TEST_PORT_LOCKS", Path(tempfile.gettempdir()) / "otel-blame-test-ports")
)
LOWEST = 10_000  # below: well-known services a machine may run (and under 1024, root-only)
SPAN = 20_000  # at most this many ports, just under the ephemeral range


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The kernel's range for ``bind(0)`` and outgoing connections (Linux's default elsewhere)."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def reservable_range(ephemeral: tuple[int, int] | None = None) -> range:
    """Ports outside the ephemeral range: below it when it leaves room there, else above it."""
    low, high = ephemeral or ephemeral_range()
    if low - LOWEST >= 2_000:
        return range(max(LOWEST, low - SPAN), low)
    if 65_535 - high >= 2_000:
        return range(high + 1, min(65_536, high + 1 + SPAN))
    raise RuntimeError(f"the ephemeral port range {low}-{high} leaves no room for test ports")


def _bindable(port: int) -> bool:
    """Nothing listens on, or is bound to, ``port`` on the loopback addresses right now."""
    for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            probe = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 here
            continue
        with probe:
            try:
                probe.bind((address, port))
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL:  # the family exists but this address does not
                    continue
                return False
    return True


class PortAllocator:
    """Hands out ports that no other reservation of any test process holds; see the module's doc."""

    def __init__(self, ports: range | None = None, lock_dir: Path = LOCK_DIR):
        self.ports = ports if ports is not None else reservable_range()
        self.lock_dir = lock_dir
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}  # port -> the file descriptor whose flock holds it
        self._given: set[int] = set()
        # Processes start at different places so that they rarely contend for the same locks.
        self._next = random.Random(os.getpid()).randrange(len(self.ports))

    def reserve(self) -> int:
        with self._lock:
            self.lock_dir.mkdir(parents=True, exist_ok=True)
            for _ in range(len(self.ports)):
                port = self.ports[self._next]
                self._next = (self._next + 1) % len(self.ports)
                if port in self._given:
                    continue
                descriptor = self._claim(port)
                if descriptor is None:
                    continue
                if not _bindable(port):
                    os.close(descriptor)
                    continue
                self._held[port] = descriptor
                self._given.add(port)
                return port
        raise RuntimeError(f"no free port left in {self.ports.start}-{self.ports.stop - 1}")

    def _claim(self, port: int) -> int | None:
        """An open descriptor holding ``port``'s lock, or None when another process holds it."""
        descriptor = os.open(self.lock_dir / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(descriptor)
            return None
        return descriptor

    def given(self) -> frozenset[int]:
        """Every port this allocator has handed out."""
        with self._lock:
            return frozenset(self._given)

    def close(self) -> None:
        """Let the locks go (the ports stay given: this allocator never hands one out again)."""
        with self._lock:
            for descriptor in self._held.values():
                os.close(descriptor)
            self._held.clear()


_ALLOCATORS: dict[int, PortAllocator] = {}  # by process id: a forked child makes its own
_ALLOCATORS_LOCK = threading.Lock()


def allocator() -> PortAllocator:
    """This process's allocator, made on first use."""
    with _ALLOCATORS_LOCK:
        pid = os.getpid()
        if pid not in _ALLOCATORS:
            _ALLOCATORS[pid] = PortAllocator()
        return _ALLOCATORS[pid]


def reserve_port() -> int:
    """A loopback TCP port for a child to bind, held for this test process until it exits."""
    return allocator().reserve()


def reserve_ports(count: int) -> list[int]:
    """``count`` distinct ports (see ``reserve_port``)."""
    return [reserve_port() for _ in range(count)]
