"""The processor's configuration: one validated pydantic model per component, YAML + environment.

Layering is pydantic-settings' job: explicit overrides (CLI flags) <- environment <- YAML file,
merged section by section, then validated once. Every key can be set in YAML
(``section: {key: value}``) and overridden by an environment variable
``OTEL_BLAME_<SECTION>__<KEY>`` (nested models continue with ``__``), e.g.
``OTEL_BLAME_ASSEMBLY__QUIET_PERIOD=0.5`` or ``OTEL_BLAME_EXPORTER__TLS__CA_FILE=/ca.pem``.
Values are read as YAML scalars (``true``, ``3``, ``0.5``, ``null``). Other ``OTEL_BLAME_*``
variables without ``__`` (used by the instrumentation and the LLM client) are left alone; a
variable with ``__`` whose section is unknown (a misspelt ``OTEL_BLAME_RECIEVERS__AUTH_TOKEN``)
stops the start, as does an unknown key anywhere, a boolean given for a number, or an empty
auth token.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from otel_blame import semconv as sc
from otel_blame.alerting.patterns import NewPatternRule, PatternSurgeRule
from otel_blame.alerting.repeated import RepeatedCulpritRule
from otel_blame.alerting.webhook import WebhookSettings
from otel_blame.attribution.llm_client import LLMSettings
from otel_blame.attribution.registry import DEFAULT_ESCALATION, Escalation

ENV_PREFIX = "OTEL_BLAME_"
MiB = 1024 * 1024


class ConfigError(ValueError):
    """The configuration is invalid; the message names each bad key."""


def _check_endpoint(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return value


def _numeric_fields(model: type[BaseModel]) -> set[str]:
    return {
        name
        for name, info in model.model_fields.items()
        if info.annotation in (int, float, int | None, float | None)
    }


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        """``max_traces: true`` is a mistake, not 1 (pydantic's lax mode would take it)."""
        if isinstance(data, Mapping):
            for name in _numeric_fields(cls):
                if isinstance(data.get(name), bool):
                    raise ValueError(f"{name}: expected a number, got {data[name]!r}")
        return data


class ServerTLSConfig(_Section):
    """TLS for a receiver; with ``client_ca_file`` clients must present a certificate (mTLS)."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None


class ClientTLSConfig(_Section):
    """TLS toward the downstream; ``cert_file``/``key_file`` for mTLS."""

    ca_file: Path | None = Field(default=None, description="trust this CA; None = system roots")
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = Field(default=None, description="override the name checked in the certificate")


class ReceiversConfig(_Section):
    grpc_endpoint: str | None = Field(default="127.0.0.1:4317", description="OTLP/gRPC; null disables")
    http_endpoint: str | None = Field(default="127.0.0.1:4318", description="OTLP/HTTP + health + verdicts")
    max_request_bytes: int = Field(default=16 * MiB, gt=0, description="larger requests are refused")
    auth_token: SecretStr | None = Field(default=None, description="require 'Authorization: Bearer <token>'")
    tls: ServerTLSConfig | None = None
    grpc_workers: int = Field(default=16, ge=1, description="concurrent gRPC requests")
    grpc_processes: int = Field(
        default=1,
        ge=0,
        le=64,
        description="processes of their own that receive OTLP/gRPC on the one port (SO_REUSEPORT), each "
        "with its own log under wal.dir; 0 = in the processor's process",
    )
    http_max_connections: int = Field(
        default=512,
        ge=1,
        description="open HTTP connections; more are closed at once (at most half the open-file limit)",
    )
    http_header_timeout: float = Field(
        default=10.0, gt=0, description="seconds to receive a request's headers (idle time included)"
    )
    http_body_timeout: float = Field(default=30.0, gt=0, description="seconds to receive a request's body")
    http_keep_alive: float = Field(default=30.0, gt=0, description="idle seconds before a kept-alive close")
    max_json_depth: int = Field(default=64, ge=8, le=256, description="deeper JSON bodies get 400")

    _endpoints = field_validator("grpc_endpoint", "http_endpoint")(_check_endpoint)

    @field_validator("auth_token")
    @classmethod
    def _token_not_empty(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("empty token: set a token, or remove the key to run without authentication")
        return value


class WALConfig(_Section):
    dir: Path = Field(default=Path("otel-blame-wal"), description="where the SQLite log lives")
    max_bytes: int = Field(default=1024 * MiB, gt=0, description="past this, receivers answer 'retry later'")
    retry_after_seconds: int = Field(default=5, ge=1, description="the retry hint sent when full")
    reserve_bytes: int = Field(
        default=4 * MiB,
        ge=0,
        description="free disk kept back so deletes and checkpoints work on a full disk",
    )


class AssemblyConfig(_Section):
    quiet_period: float = Field(default=2.0, ge=0, description="root ended + this long without spans")
    max_wait: float = Field(default=60.0, gt=0, description="release a trace this long after its first span")
    max_traces: int = Field(default=10_000, ge=1, description="buffered traces; more are forwarded as is")
    max_spans_per_trace: int = Field(default=20_000, ge=1, description="a bigger trace is forwarded as is")
    forward_non_agent_immediately: bool = Field(default=True, description="no agent spans: no waiting")
    released_memory: int = Field(default=200_000, ge=1, description="trace ids remembered as released")
    tick_seconds: float = Field(
        default=0.02, gt=0, le=1.0, description="how often complete traces are looked for"
    )


class DetectionConfig(_Section):
    """Which signals make a trace failed; any one is enough."""

    root_error: bool = Field(default=True, description="root span status ERROR")
    outcome_attribute: bool = Field(default=True, description=f"{sc.TASK_OUTCOME} = failure")
    root_exception_event: bool = Field(default=True, description="an exception event on the root span")
    evaluation_score_attribute: str = sc.GEN_AI_EVALUATION_SCORE_VALUE
    evaluation_score_threshold: float | None = Field(
        default=None, description="scores below it (root attribute or evaluation event) mean failure"
    )


class AttributionConfig(_Section):
    method: str = Field(default="heuristic", description="see `otel-blame attribute --help` for names")
    fallback_method: str = Field(default="heuristic", description="used when the method errs or times out")
    escalation: Escalation = Field(
        default=DEFAULT_ESCALATION,
        description="with an LLM endpoint configured, which verdicts of an offline method go to the LLM "
        "(guided_check, judging only the offline candidates): never, undecided (decided verdicts spend no "
        "tokens) or always; without an endpoint, undecided does nothing and always stops the start",
    )
    workers: int | None = Field(
        default=None,
        ge=1,
        description="analysis worker processes (parse, trajectory, attribution); null = one a core",
    )
    worker_niceness: int = Field(
        default=10,
        ge=0,
        le=19,
        description="added to the analysis workers' nice value, so receiving, logging and exporting get "
        "the CPU first when both want it (the blame waits, the spans do not); 0 = same priority",
    )
    forward_first_backlog: int = Field(
        default=64,
        ge=0,
        description="failed traces waiting for analysis beyond which a failed trace is forwarded at once "
        "and its blame follows as a late 'blame {agent}' span (0 = always)",
    )
    timeout: float = Field(default=120.0, gt=0, description="per trace, seconds")
    redact: bool = Field(default=True, description="redact content before it goes to an LLM")
    llm: LLMSettings | None = Field(default=None, description="null = OPENAI_BASE_URL / OPENAI_API_KEY env")
    calibration: Path | None = Field(
        default=None,
        description="a calibration file (otel-blame inject --calibration-out) for the method's confidence",
    )


class CrossRunConfig(_Section):
    """Cross-run (spectrum) evidence: per-workflow counts of passing and failing runs, combined with
    each failed trace's own step scores (docs/methods.md#cross-run-evidence)."""

    enabled: bool = Field(
        default=False,
        description="keep the counts and use them in attribution (off: measured not to help on the zoo, "
        "docs/benchmarks.md#cross-run-evidence-on-the-zoo)",
    )
    path: Path | None = Field(default=None, description="SQLite file; null = cross_run.sqlite in wal.dir")
    max_workflows: int = Field(default=10_000, ge=1, description="least recently seen evicted first")
    max_agents_per_workflow: int = Field(default=50, ge=1, description="least recently seen evicted first")
    max_components_per_agent: int = Field(default=64, ge=1, description="tools and kinds of step per agent")
    workflow_key: Literal["service", "service_and_task"] = Field(
        default="service_and_task", description="which runs count as the same workflow"
    )
    weight: float = Field(
        default=0.5, ge=0, le=10, description="how much the evidence counts; 0 = only record"
    )
    prior_runs: int = Field(
        default=10, ge=0, description="the evidence counts F/(F+prior_runs) of its weight"
    )
    min_failing_runs: int = Field(default=5, ge=1, description="failing runs seen before it is used")
    observe_successes: bool = Field(default=True, description="build and count successful traces too")
    count_undecided: bool = Field(
        default=False,
        description="count an undecided verdict's step as blamed too (default: a failing run is counted, "
        "its blamed step only when the verdict is decided)",
    )
    success_backlog: int = Field(
        default=32,
        ge=0,
        description="a successful trace is counted only while fewer traces than this wait for analysis: "
        "under load the failures' blame comes first and successes are skipped (counted)",
    )


class PatternsConfig(_Section):
    """Failure patterns: each blamed trace's cause grouped with the causes of earlier failures
    (``blame.pattern``; docs/processor.md#failure-patterns)."""

    enabled: bool = Field(default=True, description="group blames into patterns and write blame.pattern")
    similarity: float = Field(
        default=90.0,
        gt=0,
        le=100,
        description="how alike two reasons' gists must be (rapidfuzz token_sort_ratio, 0..100) to be one "
        "pattern; every replica and `otel-blame patterns` must use the same",
    )
    max_per_signature: int = Field(
        default=100,
        ge=1,
        description="patterns per signature; past it, new reasons go to the signature's 'other reasons'",
    )
    path: Path | None = Field(
        default=None,
        description="SQLite file; null = patterns.sqlite in wal.dir (a blame store keeps them instead)",
    )
    max_series: int = Field(
        default=200,
        ge=1,
        description="distinct (service, workflow, pattern) on otel_blame_failure_patterns_total; more are "
        "counted as pattern=other",
    )


class VerdictsConfig(_Section):
    retention: float = Field(default=3600.0, ge=0, description="seconds a completed trace stays available")
    max_traces: int = Field(default=10_000, ge=0)
    max_bytes: int = Field(default=256 * MiB, ge=0)


class ExporterConfig(_Section):
    endpoint: str | None = Field(default=None, description="downstream HOST:PORT (gRPC) or URL (http)")
    protocol: Literal["grpc", "http"] = "grpc"
    tls: ClientTLSConfig | None = None
    headers: dict[str, SecretStr] = Field(default_factory=dict, description="sent with every export")
    timeout: float = Field(default=10.0, gt=0)
    initial_backoff: float = Field(default=0.5, gt=0)
    max_backoff: float = Field(default=30.0, gt=0)
    workers: int = Field(default=2, ge=1)
    max_batch_bytes: int = Field(default=1 * MiB, gt=0, description="payloads joined into one export")

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value and "://" not in value:
            return _check_endpoint(value)
        return value or None


class EnrichmentConfig(_Section):
    """What the enricher writes besides the ``blame.*`` attributes."""

    evaluation_log_records: bool = Field(
        default=True,
        description="also send gen_ai.evaluation.result as an OTLP log record parented to the culprit span, "
        "the event as the GenAI conventions define it (a downstream that takes no OTLP logs, such as "
        "Jaeger, costs one refused request; docs/processor.md)",
    )


class AlertingConfig(_Section):
    """Webhook alerts: an agent blamed ``threshold`` times in a window (repeated culprit), a new failure
    pattern seen ``threshold`` times in its first hour, a pattern whose rate doubles against its day."""

    webhook: WebhookSettings | None = Field(default=None, description="null = no webhook alerts")
    repeated_culprit: RepeatedCulpritRule = Field(default_factory=RepeatedCulpritRule)
    new_pattern: NewPatternRule = Field(default_factory=NewPatternRule)
    pattern_surge: PatternSurgeRule = Field(default_factory=PatternSurgeRule)
    count_undecided: bool = Field(
        default=False,
        description="count undecided verdicts (blame.decided=false) as blames on the culprit counters, "
        "the repeated-culprit alert, the culprits page and `otel-blame top` (default: decided only)",
    )


class ProcessorConfig(_Section):
    receivers: ReceiversConfig = Field(default_factory=ReceiversConfig)
    wal: WALConfig = Field(default_factory=WALConfig)
    assembly: AssemblyConfig = Field(default_factory=AssemblyConfig)
    detection: DetectionConfig = Field(default_factory=DetectionConfig)
    attribution: AttributionConfig = Field(default_factory=AttributionConfig)
    verdicts: VerdictsConfig = Field(default_factory=VerdictsConfig)
    cross_run: CrossRunConfig = Field(default_factory=CrossRunConfig)
    patterns: PatternsConfig = Field(default_factory=PatternsConfig)
    enrichment: EnrichmentConfig = Field(default_factory=EnrichmentConfig)
    exporter: ExporterConfig = Field(default_factory=ExporterConfig)
    alerting: AlertingConfig = Field(default_factory=AlertingConfig)
    shutdown_timeout: float = Field(default=10.0, ge=0, description="seconds to flush on stop")


# keys whose values stay strings even when they look like numbers
_STRING_KEYS = {
    "auth_token", "api_key", "bearer_token", "endpoint", "grpc_endpoint", "http_endpoint",
    "method", "model", "url",
}  # fmt: skip


def _env_tree(environ: Mapping[str, str], sections: set[str]) -> dict[str, Any]:
    """Nested dict from ``OTEL_BLAME_<SECTION>__<KEY>`` variables (and ``OTEL_BLAME_SHUTDOWN_TIMEOUT``)."""
    tree: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
        if len(path) == 1:
            if path[0] != "shutdown_timeout":
                continue  # the instrumentation's and the LLM client's own variables
        elif path[0] not in sections:
            raise ConfigError(
                f"{name}: unknown section {path[0]!r} (sections: {', '.join(sorted(sections))})"
            )
        try:
            value = yaml.safe_load(raw) if raw != "" else None
        except yaml.YAMLError:
            value = raw
        if isinstance(value, dict | list) or (path[-1] in _STRING_KEYS and value is not None):
            value = raw
        if path[-1] == "auth_token" and raw == "":
            value = ""  # an empty token is refused, not read as "no token"
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{name}: conflicts with another variable")
        node[path[-1]] = value
    return tree


def _read_yaml(path: str | Path) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"cannot read configuration {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"configuration {path} is not valid YAML: {error}") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"configuration {path}: expected a mapping at the top level")
    return loaded or {}


class _TreeSource(PydanticBaseSettingsSource):
    """One layer (YAML file or environment) as an already nested dict."""

    def __init__(self, settings_cls: type[BaseSettings], tree: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._tree = tree

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._tree.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._tree)


def _layered(schema: type[ProcessorConfig]) -> type[BaseSettings]:
    """``schema`` read through pydantic-settings: init (flags) <- environment <- YAML."""
    cached = _LAYERED.get(schema)
    if cached is not None:
        return cached

    class Layered(BaseSettings, schema):  # type: ignore[valid-type, misc]
        model_config = SettingsConfigDict(
            extra="forbid", validate_assignment=True, nested_model_default_partial_update=True
        )

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            layers = _LAYERS.get()
            file_layer, env_layer = _TreeSource(settings_cls, layers[1]), _TreeSource(settings_cls, layers[0])
            return (init_settings, env_layer, file_layer)

    Layered.__name__ = Layered.__qualname__ = f"Layered{schema.__name__}"
    _LAYERED[schema] = Layered
    return Layered


_LAYERED: dict[type[ProcessorConfig], type[BaseSettings]] = {}
_LAYERS: contextvars.ContextVar[tuple[dict[str, Any], dict[str, Any]]] = contextvars.ContextVar("layers")


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"{key}: {message}")
    return "invalid configuration: " + "; ".join(lines)


def load_config(
    path: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    schema: type[ProcessorConfig] = ProcessorConfig,
) -> ProcessorConfig:
    """YAML file (optional) <- environment <- explicit overrides (CLI flags), then validate.

    ``schema``: the processor's sections, or a subclass adding the sections of what a command
    plugs in (``otel-blame serve`` adds the blame store and the web UI)."""
    from_file = _read_yaml(path) if path is not None else {}
    from_env = _env_tree(os.environ if environ is None else environ, set(schema.model_fields))
    token = _LAYERS.set((from_env, from_file))
    try:
        return _layered(schema)(**dict(overrides or {}))
    except ValidationError as error:
        raise ConfigError(_describe(error)) from None
    finally:
        _LAYERS.reset(token)
