"""1,100 idle HTTP connections against ``otel-blame serve`` under a low open-file limit: the HTTP
receiver caps what it holds and closes the rest at once, so the gRPC port keeps serving exports."""

from __future__ import annotations

import json
import os
import resource
import selectors
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.support import RecordingOTLPSink

from .spans import record_agent_run

SERVE_NOFILE = 512
IDLE_CONNECTIONS = 1_100


def _serve_with_nofile(downstream: str, wal: Path) -> tuple[subprocess.Popen, dict]:
    def lower_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (SERVE_NOFILE, SERVE_NOFILE))

    command = [
        sys.executable, "-m", "otel_blame.cli", "serve", "--grpc-endpoint", "127.0.0.1:0",
        "--http-endpoint", "127.0.0.1:0", "--downstream", downstream, "--wal-dir", str(wal),
        "--quiet-period", "0.2",
    ]  # fmt: skip
    env = {**os.environ, "OTEL_BLAME_RECEIVERS__HTTP_HEADER_TIMEOUT": "120"}  # idle ones stay held
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=lower_limit
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.kill()
        raise AssertionError(f"serve did not start: {process.stderr.read() if process.stderr else ''}")
    return process, json.loads(line)


@pytest.mark.slow
def test_idle_connections_cannot_starve_the_grpc_receiver(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = IDLE_CONNECTIONS + 512
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))
    idle: list[socket.socket] = []
    with RecordingOTLPSink() as sink:
        process, ready = _serve_with_nofile(sink.endpoint, tmp_path / "wal")
        try:
            host, _, port = ready["http"].rpartition(":")
            for _ in range(IDLE_CONNECTIONS):
                idle.append(socket.create_connection((host, int(port)), timeout=30))
            spans = record_agent_run([("A", "a"), ("B", "b")], failed=True)
            exporter = OTLPSpanExporter(endpoint=ready["grpc"], insecure=True, timeout=30)
            assert exporter.export(spans) == SpanExportResult.SUCCESS  # gRPC still served
            exporter.shutdown()
            assert len(sink.wait_for_spans(len(spans), timeout=30)) == len(spans)
            # the receiver held at most half its file limit and closed the others at once
            selector = selectors.DefaultSelector()
            for sock in idle:
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ)
            closed: set[socket.socket] = set()
            deadline = time.monotonic() + 30
            while len(closed) < IDLE_CONNECTIONS - SERVE_NOFILE // 2 and time.monotonic() < deadline:
                for key, _ in selector.select(timeout=0.5):
                    sock = key.fileobj
                    try:
                        if sock.recv(1) == b"":  # type: ignore[union-attr]
                            closed.add(sock)  # type: ignore[arg-type]
                            selector.unregister(sock)
                    except ConnectionResetError:
                        closed.add(sock)  # type: ignore[arg-type]
                        selector.unregister(sock)
            selector.close()
            assert len(closed) >= IDLE_CONNECTIONS - SERVE_NOFILE // 2
            for sock in idle:
                sock.close()
            idle.clear()
            deadline = time.monotonic() + 30
            healthy = False
            while not healthy and time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(f"http://{ready['http']}/healthz", timeout=5) as response:
                        healthy = response.status == 200
                except OSError:
                    time.sleep(0.1)
            assert healthy, "the HTTP receiver did not recover once the idle clients left"
        finally:
            for sock in idle:
                sock.close()
            process.terminate()
            process.wait(30)
    assert process.returncode == 0
