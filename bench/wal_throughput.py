"""Write-ahead log throughput: this tree's ``WriteAheadLog`` against the one of another commit.

Threads append request-sized rows (each append waits for its group commit, as a receiver does) and
release them at once (as the exporter does on delivery), so every writer round commits appends and
deletes. The other commit's ``wal.py`` is loaded from git beside this tree's; runs alternate, so
both see the same machine load. Reports appends/s and CPU per append for each run, and the median ratios.

    .venv/bin/python bench/wal_throughput.py --baseline 9522cee --seconds 10 --rounds 3
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType

from otel_blame.processor import wal as current


def load_baseline(commit: str) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{commit}:otel_blame/processor/wal.py"], check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="wal-baseline-")) / "wal_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("wal_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["wal_baseline"] = module
    spec.loader.exec_module(module)
    return module


def measure(module: ModuleType, seconds: float, threads: int, body_bytes: int) -> tuple[float, float]:
    """Appends per second, and the process's CPU microseconds per append (less sensitive than the
    rate to what else runs on the machine)."""
    with tempfile.TemporaryDirectory(prefix="wal-bench-", dir=os.environ.get("WAL_BENCH_DIR")) as directory:
        log = module.WriteAheadLog(Path(directory), max_bytes=1 << 34, reserve_bytes=4 << 20)
        done = [0] * threads
        stop = time.monotonic() + seconds

        def work(index: int) -> None:
            body = os.urandom(body_bytes)
            while time.monotonic() < stop:
                row = log.append(module.KIND_TRACES, body, parts=1)
                log.release([row])
                done[index] += 1

        workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        started, cpu = time.monotonic(), time.process_time()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
        log.close()
        return sum(done) / elapsed, cpu * 1e6 / max(1, sum(done))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", default="9522cee", help="commit whose wal.py is the baseline")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--body-bytes", type=int, default=16_384)
    args = parser.parse_args()
    baseline = load_baseline(args.baseline)
    rates, costs = [], []
    for round_ in range(args.rounds):
        old_rate, old_cpu = measure(baseline, args.seconds, args.threads, args.body_bytes)
        new_rate, new_cpu = measure(current, args.seconds, args.threads, args.body_bytes)
        rates.append(new_rate / old_rate)
        costs.append(new_cpu / old_cpu)
        print(
            f"round {round_}: baseline {old_rate:,.0f} appends/s {old_cpu:,.0f} us CPU each; "
            f"this tree {new_rate:,.0f} appends/s {new_cpu:,.0f} us CPU each"
        )
    print(
        f"median ratios this tree / baseline: rate {statistics.median(rates):.3f}, "
        f"CPU {statistics.median(costs):.3f}"
    )


if __name__ == "__main__":
    main()
