"""A child process of the processor (an analysis worker, a receiving process) ends with it.

Why: after ``kill -9`` nothing tells a child that its processor is gone, and a receiving process
would go on holding the port and its log. A daemon thread checks once a second."""

from __future__ import annotations

import os
import threading
import time


def end_with(processor_pid: int) -> None:
    """Start the watch: this process exits within a second of ``processor_pid`` ending."""
    threading.Thread(target=_watch, args=(processor_pid,), name="otel-blame-watch", daemon=True).start()


def _watch(pid: int) -> None:
    while True:
        time.sleep(1.0)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:
            pass  # alive, another user's (cannot be ours, but never exit on a doubt)
