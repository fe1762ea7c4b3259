"""The port allocator (tests/ports.py): no port twice in a run, across processes, and no other road."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.ports import PortAllocator, ephemeral_range, reservable_range, reserve_port, reserve_ports

TESTS = Path(__file__).resolve().parent


def test_one_process_never_gets_a_port_twice() -> None:
    ports = reserve_ports(400)
    assert len(set(ports)) == len(ports)
    low, high = ephemeral_range()
    assert all(not low <= port <= high for port in ports), "a port in the kernel's ephemeral range"
    assert reserve_port() not in ports


def test_a_released_allocator_still_never_hands_a_port_out_again(tmp_path: Path) -> None:
    allocator = PortAllocator(range(25_000, 25_003), lock_dir=tmp_path)
    first = [allocator.reserve() for _ in range(3)]
    allocator.close()
    with pytest.raises(RuntimeError, match="no free port left"):
        allocator.reserve()
    assert sorted(first) == [25_000, 25_001, 25_002]


def test_a_port_someone_listens_on_is_skipped(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        allocator = PortAllocator(range(taken, taken + 1), lock_dir=tmp_path)
        with pytest.raises(RuntimeError):
            allocator.reserve()


def test_concurrent_processes_share_no_port(tmp_path: Path) -> None:
    """Four processes draw from one narrow range at once: the locks keep their draws apart."""
    span = range(26_000, 26_400)
    child = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from tests.ports import PortAllocator
        allocator = PortAllocator(range({span.start}, {span.stop}), lock_dir=Path({str(tmp_path)!r}))
        ports = [allocator.reserve() for _ in range(90)]
        print(" ".join(map(str, ports)), flush=True)
        sys.stdin.read()  # hold the locks until the parent has read every draw
        """
    )
    repo = TESTS.parent
    children = [
        subprocess.Popen(
            [sys.executable, "-c", child], cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    draws = []
    try:
        for process in children:
            assert process.stdout is not None
            draws.append([int(port) for port in process.stdout.readline().split()])
    finally:
        for process in children:
            process.communicate(timeout=30)
    every = [port for draw in draws for port in draw]
    assert [len(draw) for draw in draws] == [90] * 4
    assert len(set(every)) == len(every), "two processes were handed the same port"
    assert set(every) <= set(span)


def test_the_range_lies_outside_the_ephemeral_one() -> None:
    assert reservable_range((32_768, 60_999)) == range(12_768, 32_768)
    assert reservable_range((1_024, 50_000)) == range(50_001, 65_536)
    with pytest.raises(RuntimeError):
        reservable_range((1_024, 65_000))


# What picking a port by hand looks like: a socket bound to port 0, its number read, the socket closed.
_OTHER_ROADS = re.compile(r"getsockname\(\)\[1\]|def _?free_port|def _closed_port")


def test_no_test_picks_a_port_by_another_road() -> None:
    allowed = {TESTS / "ports.py", Path(__file__).resolve()}
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{number}: {line.strip()}"
        for path in sorted(TESTS.rglob("*.py"))
        if path not in allowed
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _OTHER_ROADS.search(line)
    ]
    assert not offenders, "ports must come from tests.ports.reserve_port:\n" + "\n".join(offenders)
