"""A fault-injection campaign: a clean baseline run, then N runs with one planted fault each, every
run's trace sent through the blame processor and its verdict compared with the planted fault.

The app runs in a worker process (:mod:`.worker`) so a run that hangs is ended at its timeout (the
worker is killed and a fresh one serves the next run) and a run that raises is a finding, not a
crash. Verdicts come from the real processor path: an in-process
:class:`~otel_blame.processor.BlameProcessor` (its attribution listener), or a running
``otel-blame serve`` (OTLP/HTTP in, ``GET /api/runs/{trace_id}`` back).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Listener
from pathlib import Path
from typing import Any

import yaml

from otel_blame.attribution.known_answer import same_agent
from otel_blame.inject.faults import FAULT_KINDS, FaultKind, applies
from otel_blame.inject.injector import SeenMessage, situations
from otel_blame.inject.report import Baseline, Fault, Prediction, RunRecord, RunStatus
from otel_blame.inject.worker import WORKER_AUTHKEY_VARIABLE, WorkerSetup, worker_main

SERVICE_NAME = "otel-blame-inject"
STARTUP_TIMEOUT = 120.0


class CampaignError(Exception):
    """The campaign cannot run at all (the app does not import, the processor does not start)."""


@dataclass(frozen=True)
class CampaignSettings:
    app: str = "demo"
    runs: int = 20
    seed: int = 0
    faults: tuple[FaultKind, ...] | None = None  # None: the kinds the app declares (its FAULTS), else all
    agent: str | None = None
    step: int | None = None
    run_timeout: float = 60.0
    blame_timeout: float = 30.0
    clean_fraction: float = 0.0  # share of extra runs without a fault (passing runs for cross-run evidence)
    endpoint: str | None = None  # a running `otel-blame serve` (http://HOST:4318); None = in-process
    token: str | None = None
    processor_config: Path | None = None  # YAML passed to the in-process processor
    method: str | None = None  # attribution.method for the in-process processor
    quiet_period: float = 0.3
    log_path: Path | None = None
    python: str | None = None  # the app process's interpreter (None: this one; zoo apps: their environment's)


def resolve_app(app: str) -> tuple[str, str | None]:
    """``--app`` -> (``module:function`` the worker imports, the interpreter to run it with)."""
    from otel_blame.inject import zoo

    if not zoo.is_zoo_reference(app):
        return app, None
    try:
        entry = zoo.get_app(app)
    except zoo.UnknownApp as error:
        raise CampaignError(str(error.args[0])) from None
    if not zoo.module_present(entry):
        raise CampaignError(f"--app {app}: its module {entry.module} is not in this installation")
    python = zoo.interpreter_for(entry)
    if python is None:
        variable, folder = zoo.ENVIRONMENTS.get(entry.environment, ("", ""))
        raise CampaignError(
            f"--app {app} runs in the {entry.environment!r} environment: create {folder} "
            f"(make test-crewai does) or set {variable} to its python"
        )
    return entry.reference, python


@dataclass
class Target:
    agent: str
    step: int


@dataclass
class Plan:
    """Which targets each fault kind can hit, read from the clean baseline run."""

    targets: dict[FaultKind, list[Target]] = field(default_factory=dict)
    tools: tuple[str, ...] = ()  # the tools the clean run called

    @classmethod
    def from_seen(
        cls, seen: Sequence[Sequence[Any]], faults: Sequence[FaultKind], agent: str | None, step: int | None
    ) -> Plan:
        messages = [SeenMessage(*m) for m in seen]
        where = situations(messages)
        tools = where[-1].tools if where else ()
        indexed = [(m, s) for m, s in zip(messages, where, strict=True) if m.step is not None]
        last = max((m.step for m, _ in indexed if m.step is not None), default=-1)
        targets: dict[FaultKind, list[Target]] = {}
        for kind in faults:
            found = [
                Target(m.agent, m.step)
                for m, situation in indexed
                if m.step is not None
                and (agent is None or same_agent(m.agent, agent))
                and (step is None or m.step == step)
                and applies(
                    kind,
                    m.text,
                    m.kind,
                    last=m.step == last,
                    tool_name=m.tool_name,
                    tools=tools,
                    after_error=situation.after_error,
                )
            ]
            if found:
                targets[kind] = found
        return cls(targets, tools)

    def draw(self, rng: random.Random, kind: FaultKind | None = None) -> tuple[FaultKind, Target] | None:
        """A fault kind and a target for it; ``kind`` when this plan has targets for it."""
        if not self.targets:
            return None
        if kind is None or kind not in self.targets:
            kind = rng.choice(sorted(self.targets))
        return kind, rng.choice(self.targets[kind])


# --- the worker -------------------------------------------------------------------------------------


class WorkerGone(Exception):
    """The app process exited in the middle of a run."""


class RunTimedOut(Exception):
    """The run did not answer within the per-run timeout; its process was killed."""


class Worker:
    """One app process; ``run`` answers within ``timeout`` or the process is killed.

    With ``python`` (another environment's interpreter, e.g. CrewAI's virtualenv) the process is that
    interpreter running :mod:`otel_blame.inject.worker`, connected back over an authenticated
    loopback socket; otherwise a ``spawn`` child of this interpreter. Both speak the same pipe
    protocol.
    """

    def __init__(self, setup: WorkerSetup, python: str | None = None) -> None:
        self._process: Any
        if python and python != sys.executable:
            self._connection = self._start_external(setup, python)
        else:
            context = multiprocessing.get_context("spawn")
            self._connection, child = context.Pipe()
            # not a daemon: an app may start processes of its own; stop() and kill() end it in every case
            self._process = context.Process(target=worker_main, args=(child, setup), daemon=False)
            self._process.start()
            child.close()
        if not self._connection.poll(STARTUP_TIMEOUT):
            self.kill()
            raise CampaignError(f"the app process did not start within {STARTUP_TIMEOUT:g} s")
        try:
            hello = self._connection.recv()
        except EOFError:
            self.kill()
            code = self.exitcode
            raise CampaignError(f"the app process exited while starting (exit code {code})") from None
        if not hello.get("ready"):
            self.kill()
            raise CampaignError(hello.get("error") or "the app process could not start")
        self.pass_seed = bool(hello.get("pass_seed"))
        self.faults = tuple(FaultKind(kind) for kind in hello.get("faults") or () if kind in FAULT_KINDS)

    def _start_external(self, setup: WorkerSetup, python: str) -> Any:
        authkey = secrets.token_bytes(16)
        listener = Listener(("127.0.0.1", 0), authkey=authkey)
        host, port = listener.address
        import otel_blame

        source_root = str(Path(otel_blame.__file__).resolve().parents[1])
        environ = {**os.environ, WORKER_AUTHKEY_VARIABLE: authkey.hex()}
        environ["PYTHONPATH"] = os.pathsep.join(p for p in (source_root, environ.get("PYTHONPATH")) if p)
        try:
            self._process = subprocess.Popen(
                [python, "-m", "otel_blame.inject.worker", f"{host}:{port}"],
                env=environ,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError as error:
            listener.close()
            raise CampaignError(f"cannot start {python}: {error}") from None
        accepted: list[Any] = []
        thread = threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True)
        thread.start()
        thread.join(STARTUP_TIMEOUT)
        listener.close()
        if not accepted:
            self._process.kill()
            raise CampaignError(f"the app process ({python}) did not connect within {STARTUP_TIMEOUT:g} s")
        connection = accepted[0]
        connection.send(setup)
        return connection

    @property
    def exitcode(self) -> int | None:
        process = self._process
        return process.exitcode if hasattr(process, "exitcode") else process.poll()

    def _alive(self) -> bool:
        process = self._process
        return process.is_alive() if hasattr(process, "is_alive") else process.poll() is None

    def _join(self, timeout: float) -> None:
        process = self._process
        if hasattr(process, "join"):
            process.join(timeout)
        else:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout)

    def run(self, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
        try:
            self._connection.send({**spec, "pass_seed": self.pass_seed})
            answered = self._connection.poll(timeout)
            if answered:
                return self._connection.recv()
        except (EOFError, OSError) as error:
            self.kill()
            raise WorkerGone(f"the app process died (exit code {self.exitcode})") from error
        self.kill()
        raise RunTimedOut

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._connection.send(None)
        self._join(10)
        self.kill()

    def kill(self) -> None:
        if self._alive():
            self._process.kill()
            self._join(5)
        self._connection.close()


# --- where verdicts come from ----------------------------------------------------------------------


class VerdictSource:
    """Where the app's spans go (``endpoint``) and where each failed trace's attribution comes back."""

    endpoint: str

    def wait(self, trace_ids: Sequence[str], timeout: float) -> dict[str, Prediction]:
        raise NotImplementedError

    def close(self) -> None:
        return None


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


class InProcessProcessor(VerdictSource):
    """A BlameProcessor in this process; its attribution listener hands over each verdict."""

    def __init__(self, settings: CampaignSettings) -> None:
        from otel_blame.demo.span_recorder import RecordingOTLPSink
        from otel_blame.processor import BlameProcessor, load_config
        from otel_blame.processor.config import ConfigError

        self._stack = contextlib.ExitStack()
        self._verdicts: dict[str, Prediction] = {}
        self._cond = threading.Condition()
        try:
            from_file: dict[str, Any] = {}
            if settings.processor_config is not None:
                loaded = yaml.safe_load(settings.processor_config.read_text(encoding="utf-8")) or {}
                if not isinstance(loaded, dict):
                    raise CampaignError(f"{settings.processor_config}: expected a YAML mapping of sections")
                from_file = loaded
            sink = self._stack.enter_context(RecordingOTLPSink())
            wal_dir = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="otel-blame-inject-wal-"))
            ours: dict[str, Any] = {
                "receivers": {"grpc_endpoint": "127.0.0.1:0", "http_endpoint": None},
                "wal": {"dir": wal_dir},
                "exporter": {"endpoint": sink.endpoint},
                "assembly": {"quiet_period": settings.quiet_period},
            }
            if settings.method:
                ours["attribution"] = {"method": settings.method}
            for section in ("store", "ui"):  # `serve`'s sections: this in-process processor keeps no store
                from_file.pop(section, None)
            config = load_config(environ={}, overrides=_deep_merge(from_file, ours))
            processor = BlameProcessor(config, listeners=[self._listen])
            processor.start()
        except ConfigError as error:
            self._stack.close()
            raise CampaignError(f"processor configuration: {error}") from None
        except (OSError, yaml.YAMLError) as error:
            self._stack.close()
            raise CampaignError(f"processor: {error}") from None
        self._stack.callback(processor.stop)
        self.processor = processor
        self.method = config.attribution.method
        self.endpoint = str(processor.grpc_endpoint)

    def _listen(self, finished: Any) -> None:
        attribution = finished.attribution
        with self._cond:
            self._verdicts[finished.trace_id] = Prediction(
                agent=attribution.agent,
                step=attribution.step,
                confidence=attribution.confidence,
                method=attribution.method,
                reason=attribution.reason,
                llm_calls=attribution.cost.llm_calls,
                input_tokens=attribution.cost.input_tokens,
                output_tokens=attribution.cost.output_tokens,
                seconds=attribution.cost.seconds,
            )
            self._cond.notify_all()

    def wait(self, trace_ids: Sequence[str], timeout: float) -> dict[str, Prediction]:
        deadline = time.monotonic() + timeout
        wanted = set(trace_ids)
        with self._cond:
            while not wanted <= self._verdicts.keys():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return {t: self._verdicts[t] for t in wanted if t in self._verdicts}

    def close(self) -> None:
        self._stack.close()


class RemoteProcessor(VerdictSource):
    """A running ``otel-blame serve``: spans over OTLP/HTTP, verdicts from its blame store's API."""

    def __init__(self, settings: CampaignSettings) -> None:
        assert settings.endpoint is not None
        self.endpoint = settings.endpoint.rstrip("/")
        if not self.endpoint.startswith(("http://", "https://")):
            raise CampaignError(
                f"--endpoint {settings.endpoint}: expected the processor's HTTP URL, e.g. http://127.0.0.1:4318"
            )
        self._token = settings.token
        self.method = ""  # as configured there: named by the verdicts that come back
        try:
            self._get("/healthz")
        except (OSError, ValueError) as error:
            raise CampaignError(
                f"--endpoint {self.endpoint}: the processor does not answer ({error})"
            ) from None

    def _get(self, path: str) -> Any:
        request = urllib.request.Request(f"{self.endpoint}{path}")
        if self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        with urllib.request.urlopen(request, timeout=5.0) as response:  # noqa: S310 - the user's processor
            body = response.read()
        return json.loads(body) if body.strip().startswith((b"{", b"[")) else body

    def wait(self, trace_ids: Sequence[str], timeout: float) -> dict[str, Prediction]:
        deadline = time.monotonic() + timeout
        found: dict[str, Prediction] = {}
        while True:
            for trace_id in trace_ids:
                if trace_id in found:
                    continue
                try:
                    run = self._get(f"/api/runs/{trace_id}")
                except urllib.error.HTTPError as error:
                    if error.code != 404:
                        raise CampaignError(f"{self.endpoint}/api/runs: HTTP {error.code}") from None
                    continue
                except (OSError, ValueError):
                    continue
                cost = run.get("cost") or {}
                found[trace_id] = Prediction(
                    agent=run["agent"],
                    step=run["step"],
                    confidence=run["confidence"],
                    method=run["method"],
                    reason=run.get("reason", ""),
                    llm_calls=cost.get("llm_calls", 0),
                    input_tokens=cost.get("input_tokens", 0),
                    output_tokens=cost.get("output_tokens", 0),
                    seconds=cost.get("seconds", 0.0),
                )
            if len(found) == len(set(trace_ids)) or time.monotonic() >= deadline:
                return found
            time.sleep(0.3)


# --- the campaign -----------------------------------------------------------------------------------


@dataclass
class CampaignResult:
    settings: CampaignSettings
    method: str
    baseline: Baseline
    records: list[RunRecord]
    trajectories: dict[int, dict[str, Any]]  # run index -> the trajectory the app recorded
    questions: dict[int, tuple[str | None, str | None]] = field(default_factory=dict)


class Campaign:
    def __init__(
        self, settings: CampaignSettings, progress: Callable[[RunRecord], None] | None = None
    ) -> None:
        self.settings = settings
        self.progress = progress

    @contextlib.contextmanager
    def _workers(self, setup: WorkerSetup, python: str | None) -> Iterator[Callable[[], Worker]]:
        current: list[Worker] = []

        def get() -> Worker:
            if not current:
                current.append(Worker(setup, python))
            return current[0]

        def drop() -> None:
            current.clear()

        get.drop = drop  # type: ignore[attr-defined]
        try:
            yield get
        finally:
            for worker in current:
                worker.stop()

    def _run(self, get: Callable[[], Worker], spec: dict[str, Any]) -> dict[str, Any]:
        worker = get()
        try:
            return worker.run(spec, self.settings.run_timeout)
        except RunTimedOut:
            get.drop()  # type: ignore[attr-defined]
            return {"timeout": True}
        except WorkerGone as error:
            get.drop()  # type: ignore[attr-defined]
            return {"error": str(error)}

    def run(self) -> CampaignResult:
        settings = self.settings
        reference, python = resolve_app(settings.app)
        source: VerdictSource = (
            RemoteProcessor(settings) if settings.endpoint else InProcessProcessor(settings)
        )
        try:
            setup = WorkerSetup(
                app=reference,
                endpoint=source.endpoint,
                service_name=SERVICE_NAME,
                log_path=str(settings.log_path) if settings.log_path else None,
                token=settings.token,
            )
            with self._workers(setup, settings.python or python) as get:
                return self._campaign(get, source)
        finally:
            source.close()

    def _campaign(self, get: Callable[[], Worker], source: VerdictSource) -> CampaignResult:
        settings = self.settings
        clean = self._run(get, {"index": -1, "app_seed": settings.seed, "fault": None})
        status = _status_of(clean, planted=False, clean=True)
        baseline = Baseline(
            status=RunStatus.CLEAN_FAILED if status is RunStatus.FAILED else status,
            outcome=clean.get("outcome"),
            error=clean.get("error") or ("timed out" if clean.get("timeout") else None),
            steps=_recorded_steps(clean),
        )
        records: list[RunRecord] = []
        trajectories: dict[int, dict[str, Any]] = {}
        faults = settings.faults or get().faults or FAULT_KINDS
        plan = Plan.from_seen(clean.get("seen", []), faults, settings.agent, settings.step)
        baseline.eligible = {kind.value: len(targets) for kind, targets in plan.targets.items()}
        if baseline.status in (RunStatus.TIMEOUT, RunStatus.APP_ERROR):
            return CampaignResult(settings, getattr(source, "method", ""), baseline, records, trajectories)
        rng = random.Random(settings.seed)
        for index in range(settings.runs):
            app_seed = rng.randrange(1 << 31)
            clean_run = settings.clean_fraction > 0 and rng.random() < settings.clean_fraction
            drawn = None if clean_run else plan.draw(rng)
            fault_seed = rng.randrange(1 << 31)
            if not clean_run and drawn is None:
                record = RunRecord(index=index, app_seed=app_seed, status=RunStatus.NO_TARGET)
                records.append(record)
                self._report(record)
                continue
            spec: dict[str, Any] = {"index": index, "app_seed": app_seed, "fault": None}
            planned = None
            if drawn is not None:
                kind, target = drawn
                planned = Fault(kind=kind.value, agent=target.agent, step=target.step)
                spec["fault"] = {
                    "kind": kind.value,
                    "agent": target.agent,
                    "step": target.step,
                    "seed": fault_seed,
                    "exact": settings.step is not None,  # --step fixes the step; else the first fit
                    "tools": list(plan.tools),
                }
            answer = self._run(get, spec)
            if drawn is not None and _missed(answer):
                # the run took another path than the baseline (a routing app sent the case to another
                # specialist): plan from this run's own path, and run the same seed again
                own = Plan.from_seen(answer.get("seen", []), faults, settings.agent, settings.step)
                again = own.draw(rng, kind=drawn[0])
                if again is not None:
                    kind, target = again
                    planned = Fault(kind=kind.value, agent=target.agent, step=target.step)
                    tools = sorted({*plan.tools, *own.tools})
                    where = {"kind": kind.value, "agent": target.agent, "step": target.step, "tools": tools}
                    spec["fault"] = {**spec["fault"], **where}
                    answer = self._run(get, spec)
            planted = answer.get("planted")
            record = RunRecord(
                index=index,
                app_seed=app_seed,
                status=_status_of(answer, planted=planted is not None, clean=clean_run),
                planned=planned,
                fault=_truth(planted, answer.get("declared")),
                trace_id=answer.get("trace_id"),
                outcome=answer.get("outcome"),
                error=answer.get("error")
                or (f"timed out after {settings.run_timeout:g} s" if answer.get("timeout") else None),
            )
            if answer.get("trajectory"):
                trajectories[index] = answer["trajectory"]
            records.append(record)
            self._report(record)
        waiting = [r.trace_id for r in records if r.status is RunStatus.FAILED and r.trace_id]
        verdicts = source.wait(waiting, settings.blame_timeout) if waiting else {}
        for record in records:
            if record.status is not RunStatus.FAILED or record.trace_id is None:
                continue
            prediction = verdicts.get(record.trace_id)
            if prediction is None:
                record.status = RunStatus.NO_BLAME
                continue
            score_record(record, prediction)
        methods = Counter(r.prediction.method for r in records if r.prediction is not None)
        method = getattr(source, "method", "") or (methods.most_common(1)[0][0] if methods else "unknown")
        return CampaignResult(settings, method, baseline, records, trajectories)

    def _report(self, record: RunRecord) -> None:
        if self.progress is not None:
            self.progress(record)


def score_record(record: RunRecord, prediction: Prediction) -> None:
    """The verdict against the truth: the agent and the step are judged each on its own (a right agent
    at a wrong step is a right agent)."""
    record.prediction = prediction
    record.status = RunStatus.ATTRIBUTED
    if record.fault is not None:
        record.agent_correct = same_agent(prediction.agent, record.fault.agent)
        record.step_correct = prediction.step == record.fault.step


def _missed(answer: Mapping[str, Any]) -> bool:
    """The planned fault found no message to go into, in a run that otherwise ended normally."""
    return not answer.get("planted") and not answer.get("timeout") and not answer.get("error")


def _truth(planted: Mapping[str, Any] | None, declared: Mapping[str, Any] | None) -> Fault | None:
    """The run's ground truth: the planted fault, else a dependency failure the app declared."""
    if planted:
        return Fault(**{k: planted[k] for k in ("kind", "agent", "step", "description")})
    if declared:
        return Fault(**{k: declared[k] for k in ("kind", "agent", "step", "description", "dependency")})
    return None


def _recorded_steps(answer: Mapping[str, Any]) -> list[list[Any]]:
    """[agent, step, kind] of every step the run recorded (what the processor attributes)."""
    trajectory = answer.get("trajectory") or {}
    return [[step["agent"], step["index"], step["kind"]] for step in trajectory.get("steps", [])]


def _status_of(answer: Mapping[str, Any], *, planted: bool, clean: bool = False) -> RunStatus:
    if answer.get("timeout"):
        return RunStatus.TIMEOUT
    if answer.get("error"):
        return RunStatus.APP_ERROR
    if answer.get("trace_id") is None:
        return RunStatus.NO_TRACE
    failed = answer.get("outcome") == "failure"
    if failed and answer.get("declared"):  # the app's flaky dependency failed the run
        return RunStatus.CONFOUNDED if planted else RunStatus.FAILED
    if clean:
        return RunStatus.CLEAN_FAILED if failed else RunStatus.CLEAN_PASSED
    if not planted:
        return RunStatus.NOT_INJECTED if not failed else RunStatus.CLEAN_FAILED
    return RunStatus.FAILED if failed else RunStatus.MASKED
