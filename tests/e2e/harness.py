"""Run the real Collector, Jaeger and `otel-blame serve` as child processes for end-to-end tests.

Everything binds to 127.0.0.1 on free ports, every wait is bounded, and every process started
through a `ProcessGroup` is stopped (SIGTERM, then SIGKILL) when the group closes, also on failure.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.ports import reserve_port

REPO = Path(__file__).resolve().parents[2]
COLLECTOR_CONFIG_DIR = REPO / "collector_config"
# Where deploy/build_components.sh puts the binaries: $OTEL_BLAME_E2E_CACHE/bin (the script's cache root,
# ~/.cache/otel-blame-e2e by default), or OTEL_BLAME_E2E_BIN for binaries kept elsewhere.
E2E_BIN_DIR = Path(
    os.environ.get("OTEL_BLAME_E2E_BIN")
    or Path(os.environ.get("OTEL_BLAME_E2E_CACHE") or Path.home() / ".cache" / "otel-blame-e2e") / "bin"
)
COLLECTOR_BIN = E2E_BIN_DIR / "otelcol-blame"
JAEGER_BIN = E2E_BIN_DIR / "jaeger"
OTEL_BLAME_BIN = Path(sys.executable).parent / "otel-blame"
BUILD_HINT = "build it with `make e2e-components` (deploy/build_components.sh)"

T = TypeVar("T")


def missing_binary_reason(path: Path) -> str | None:
    """Why a test needing ``path`` cannot run, or None when the binary is there."""
    if path.is_file() and os.access(path, os.X_OK):
        return None
    return f"{path} is not built; {BUILD_HINT}"


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_until(check: Callable[[], T], *, timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll ``check`` until it returns something truthy; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - the condition is "not yet"; keep the last cause
            last_error = exc
        if time.monotonic() >= deadline:
            cause = f" (last error: {last_error!r})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{cause}")
        time.sleep(interval)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback only
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def http_ok(url: str) -> bool:
    try:
        status, _ = http_get(url, timeout=2.0)
    except OSError:
        return False
    return 200 <= status < 300


class ManagedProcess:
    """A child process with its output in a log file; `stop` and `kill` are idempotent."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: Mapping[str, str] | None = None):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = dict(os.environ if env is None else env)
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        finally:
            log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} was never started"
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            code = None if self.popen is None else self.popen.returncode
            raise RuntimeError(f"{self.name} exited (code {code}); log tail:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL, as a crash would: no chance to flush."""
        if self.alive():
            assert self.popen is not None
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> None:
        if not self.alive():
            return
        assert self.popen is not None
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        except ProcessLookupError:
            pass


class ProcessGroup:
    """Owns the processes of one test; closing it stops them in reverse start order."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.processes: list[ManagedProcess] = []

    def start(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> ManagedProcess:
        proc = ManagedProcess(name, argv, self.log_dir / f"{name}.log", env).start()
        self.processes.append(proc)
        return proc

    def close(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"----- {p.name} ({p.log_path}) -----\n{p.log_tail()}" for p in self.processes)


def wait_ready(proc: ManagedProcess, url: str, timeout: float = 60.0) -> None:
    """Wait until ``url`` answers 2xx, failing at once if the process died."""

    def ready() -> bool:
        proc.check_alive()
        return http_ok(url)

    try:
        wait_until(ready, timeout=timeout, what=f"{proc.name} at {url}")
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; log tail:\n{proc.log_tail()}") from None


# --- the OpenTelemetry Collector ----------------------------------------------------------------


class Collector:
    """The Collector built by deploy/build_components.sh, running one collector_config/ file."""

    def __init__(
        self,
        group: ProcessGroup,
        config: Path,
        name: str,
        env: Mapping[str, str],
        wrapper: Sequence[str] = (),
    ):
        """``wrapper``: argv that runs the Collector (``exec "$@"``), e.g. in a private mount namespace."""
        self.grpc_port = reserve_port()
        self.http_port = reserve_port()
        self.health_port = reserve_port()
        self.telemetry_port = reserve_port()
        self.metrics_port = reserve_port()
        self.env = {
            **os.environ,
            "OTELCOL_LISTEN_HOST": "127.0.0.1",
            "OTELCOL_OTLP_GRPC_PORT": str(self.grpc_port),
            "OTELCOL_OTLP_HTTP_PORT": str(self.http_port),
            "OTELCOL_HEALTH_PORT": str(self.health_port),
            "OTELCOL_TELEMETRY_PORT": str(self.telemetry_port),
            "OTELCOL_METRICS_PORT": str(self.metrics_port),
            **env,
        }
        self.proc = group.start(name, [*wrapper, str(COLLECTOR_BIN), "--config", str(config)], self.env)
        wait_ready(self.proc, f"http://127.0.0.1:{self.health_port}/")

    @property
    def otlp_grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"


def validate_collector_config(
    config: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """The real Collector's `validate` command on one configuration file."""
    return subprocess.run(
        [str(COLLECTOR_BIN), "validate", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


# --- Jaeger v2 ------------------------------------------------------------------------------------


def jaeger_config(otlp_grpc_port: int, query_http_port: int, query_grpc_port: int, health_port: int) -> dict:
    """Jaeger v2 all-in-one (memory storage) with every listener on loopback."""
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query", "healthcheckv2"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch"],
                    "exporters": ["jaeger_storage_exporter"],
                }
            },
            "telemetry": {
                "metrics": {"level": "none"},
                "traces": {"level": "none"},
                "logs": {"level": "info"},
            },
        },
        "extensions": {
            "healthcheckv2": {"use_v2": True, "http": {"endpoint": f"127.0.0.1:{health_port}"}},
            "jaeger_query": {
                "storage": {"traces": "memstore"},
                # no self-tracing: it would export to the default localhost:4317 and stall shutdown
                "enable_tracing": False,
                "http": {"endpoint": f"127.0.0.1:{query_http_port}"},
                "grpc": {"endpoint": f"127.0.0.1:{query_grpc_port}"},
            },
            "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 100000}}}},
        },
        "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": f"127.0.0.1:{otlp_grpc_port}"}}}},
        "processors": {"batch": {"timeout": "200ms"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
    }


class Jaeger:
    """Jaeger v2 built by deploy/build_components.sh, with in-memory storage, queried over HTTP."""

    def __init__(self, group: ProcessGroup, name: str = "jaeger"):
        self.otlp_grpc_port = reserve_port()
        self.query_port = reserve_port()
        health_port = reserve_port()
        config_path = group.log_dir / f"{name}.yaml"
        config_path.write_text(
            yaml.safe_dump(jaeger_config(self.otlp_grpc_port, self.query_port, reserve_port(), health_port))
        )
        self.proc = group.start(name, [str(JAEGER_BIN), "--config", str(config_path)])
        wait_ready(self.proc, f"http://127.0.0.1:{health_port}/status")
        wait_ready(self.proc, f"{self.base_url}/api/services")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.query_port}"

    @property
    def otlp_grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.otlp_grpc_port}"

    def _api(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        status, body = http_get(f"{self.base_url}{path}{query}")
        if status != 200:
            raise RuntimeError(f"Jaeger {path} answered {status}: {body[:300]!r}")
        return json.loads(body)

    def services(self) -> list[str]:
        return self._api("/api/services")["data"] or []

    def find_traces(
        self, service: str, tags: Mapping[str, str] | None = None, limit: int = 1000
    ) -> list[dict]:
        params = {"service": service, "limit": str(limit), "lookback": "1h"}
        if tags:
            params["tags"] = json.dumps(dict(tags))
        return self._api("/api/traces", params)["data"] or []

    def trace(self, trace_id: str) -> dict | None:
        status, body = http_get(f"{self.base_url}/api/traces/{trace_id}")
        if status == 404:
            return None
        if status != 200:
            raise RuntimeError(f"Jaeger /api/traces/{trace_id} answered {status}: {body[:300]!r}")
        data = json.loads(body)["data"]
        return data[0] if data else None


def jaeger_tags(span: Mapping[str, Any]) -> dict[str, Any]:
    """A Jaeger API span's tags as a dict (values keep their JSON types)."""
    return {tag["key"]: tag["value"] for tag in span.get("tags", [])}


# --- otel-blame serve ---------------------------------------------------------------------------


class BlameServer:
    """`otel-blame serve` as a subprocess with its write-ahead log in ``wal_dir``."""

    def __init__(
        self,
        group: ProcessGroup,
        name: str,
        downstream: str,
        wal_dir: Path,
        extra_env: Mapping[str, str] | None = None,
        grpc_port: int | None = None,
        http_port: int | None = None,
        quiet_period: float = 0.5,
        grpc_host: str = "127.0.0.1",
        method: str = "heuristic",
    ):
        self.group = group
        self.method = method
        self.grpc_host = grpc_host
        self.quiet_period = quiet_period
        self.name = name
        self.downstream = downstream
        self.wal_dir = wal_dir
        self.grpc_port = grpc_port or reserve_port()
        self.http_port = http_port or reserve_port()
        self.env = {**os.environ, **(extra_env or {})}
        self.proc = self._start()

    def _start(self) -> ManagedProcess:
        argv = [
            str(OTEL_BLAME_BIN),
            "serve",
            "--grpc-endpoint",
            f"{self._grpc_host_literal}:{self.grpc_port}",
            "--http-endpoint",
            f"127.0.0.1:{self.http_port}",
            "--downstream",
            self.downstream,
            "--wal-dir",
            str(self.wal_dir),
            "--method",
            self.method,
            "--quiet-period",
            str(self.quiet_period),
        ]
        proc = self.group.start(self.name, argv, self.env)
        wait_ready(proc, f"http://127.0.0.1:{self.http_port}/readyz")
        return proc

    def restart(self) -> None:
        """Start again on the same ports and write-ahead log (after a kill or stop)."""
        self.proc.stop()
        self.proc = self._start()

    @property
    def _grpc_host_literal(self) -> str:
        return f"[{self.grpc_host}]" if ":" in self.grpc_host else self.grpc_host

    @property
    def otlp_grpc_endpoint(self) -> str:
        return f"{self._grpc_host_literal}:{self.grpc_port}"


def iter_spans(trace: Mapping[str, Any]) -> Iterator[dict]:
    yield from trace.get("spans", [])


def run_verdict(
    http_port: int, trace_id: str, *, failed: bool = True, expected_output: str | None = None
) -> subprocess.CompletedProcess:
    """The real `otel-blame verdict` CLI against a processor's HTTP port (output captured)."""
    argv = [str(OTEL_BLAME_BIN), "verdict", trace_id, "--failed" if failed else "--succeeded"]
    if expected_output is not None:
        argv += ["--expected-output", expected_output]
    argv += ["--endpoint", f"http://127.0.0.1:{http_port}", "--timeout", "60"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)


def jaeger_references(span: Mapping[str, Any]) -> list[dict]:
    """A Jaeger API span's references (its parent and, from OTLP links, FOLLOWS_FROM)."""
    return list(span.get("references") or [])


# --- Prometheus and Alertmanager (Debian packages, `make system-packages`) -----------------------

PROMETHEUS_BIN = Path(os.environ.get("OTEL_BLAME_PROMETHEUS_BIN", "/usr/bin/prometheus"))
PROMTOOL_BIN = Path(os.environ.get("OTEL_BLAME_PROMTOOL_BIN", "/usr/bin/promtool"))
ALERTMANAGER_BIN = Path(os.environ.get("OTEL_BLAME_ALERTMANAGER_BIN", "/usr/bin/prometheus-alertmanager"))
SYSTEM_PACKAGES_HINT = "install them with `make system-packages` (Debian prometheus, prometheus-alertmanager)"


def missing_system_binary_reason(*paths: Path) -> str | None:
    """Why a test needing these system binaries cannot run, or None when all are there."""
    missing = [str(p) for p in paths if not (p.is_file() and os.access(p, os.X_OK))]
    if not missing:
        return None
    return f"{', '.join(missing)} not installed; {SYSTEM_PACKAGES_HINT}"


class Alertmanager:
    """Real Alertmanager on loopback with its storage in the group's log directory."""

    def __init__(self, group: ProcessGroup, config: Mapping[str, Any], name: str = "alertmanager"):
        self.port = reserve_port()
        config_path = group.log_dir / f"{name}.yml"
        config_path.write_text(yaml.safe_dump(dict(config)))
        argv = [
            str(ALERTMANAGER_BIN),
            f"--config.file={config_path}",
            f"--storage.path={group.log_dir / f'{name}-data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",  # no gossip port: a single instance
            "--log.level=info",
        ]
        self.proc = group.start(name, argv)
        wait_ready(self.proc, f"{self.base_url}/-/ready")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alerts(self) -> list[dict]:
        status, body = http_get(f"{self.base_url}/api/v2/alerts")
        if status != 200:
            raise RuntimeError(f"Alertmanager /api/v2/alerts answered {status}: {body[:300]!r}")
        return json.loads(body)


class Prometheus:
    """Real Prometheus on loopback (temporary TSDB in the group's log directory)."""

    def __init__(
        self,
        group: ProcessGroup,
        config: Mapping[str, Any],
        rule_files: Mapping[str, str] = {},  # noqa: B006 - read only
        name: str = "prometheus",
    ):
        self.port = reserve_port()
        for file_name, text in rule_files.items():
            (group.log_dir / file_name).write_text(text)
        config_path = group.log_dir / f"{name}.yml"
        config_path.write_text(yaml.safe_dump(dict(config)))
        argv = [
            str(PROMETHEUS_BIN),
            f"--config.file={config_path}",
            f"--storage.tsdb.path={group.log_dir / f'{name}-data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=info",
        ]
        self.proc = group.start(name, argv)
        wait_ready(self.proc, f"{self.base_url}/-/ready")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _api(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        status, body = http_get(f"{self.base_url}{path}{query}")
        if status != 200:
            raise RuntimeError(f"Prometheus {path} answered {status}: {body[:300]!r}")
        return json.loads(body)["data"]

    def query(self, expr: str) -> list[dict]:
        return self._api("/api/v1/query", {"query": expr})["result"]

    def alerts(self) -> list[dict]:
        return self._api("/api/v1/alerts")["alerts"]

    def targets(self) -> list[dict]:
        return self._api("/api/v1/targets")["activeTargets"]


class WebhookRecorder:
    """A loopback HTTP server that records every JSON body POSTed to it (Alertmanager, otel-blame)."""

    def __init__(self) -> None:
        recorder = self
        self._lock = threading.Lock()
        self._bodies: list[tuple[str, Any]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                with recorder._lock:
                    recorder._bodies.append((self.path, body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                return None

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook", daemon=True)
        self._thread.start()

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def received(self, path: str | None = None) -> list[Any]:
        """The bodies received so far (only those POSTed to ``path`` when given)."""
        with self._lock:
            return [body for p, body in self._bodies if path is None or p == path]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
