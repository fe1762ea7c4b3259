"""What every zoo app needs once per process: a scripted LLM server answering with the app's own
script, and a scratch directory (for databases, files, code), started on first use and shut down at
exit. An app's worker process serves many runs; these outlive each run, not the process.
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from otel_blame.demo.scripted_llm import Reply, ScriptedLLM

Script = Callable[[dict[str, Any]], "Reply | str"]
_SPEAKER = re.compile(r"You are (\w+)\b")


class AppResources:
    """One scripted LLM server (answering with ``script``) and one scratch directory per process."""

    def __init__(self, script: Script, prefix: str = "otel-blame-zoo-") -> None:
        self._script = script
        self._prefix = prefix
        self._lock = threading.Lock()
        self._llm: ScriptedLLM | None = None
        self._dir: Path | None = None

    def _start(self) -> None:
        if self._llm is None:
            self._dir = Path(tempfile.mkdtemp(prefix=self._prefix))
            self._llm = ScriptedLLM(self._script).__enter__()
            atexit.register(self.close)

    @property
    def base_url(self) -> str:
        with self._lock:
            self._start()
            assert self._llm is not None
            return self._llm.base_url

    @property
    def work_dir(self) -> Path:
        with self._lock:
            self._start()
            assert self._dir is not None
            return self._dir

    def forget_requests(self) -> None:
        """Drop the requests the server kept (it keeps each one; a campaign makes thousands)."""
        with self._lock:
            if self._llm is not None:
                self._llm.requests.clear()

    def close(self) -> None:
        with self._lock:
            if self._llm is not None:
                self._llm.__exit__(None, None, None)
                self._llm = None
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None


def asking_agent(request: dict[str, Any]) -> str | None:
    """The agent a chat request is for: the ``You are NAME`` its system message opens with."""
    for message in request.get("messages", []):
        if message.get("role") == "system":
            found = _SPEAKER.match(str(message.get("content") or ""))
            return found.group(1) if found else None
    return None
