"""The deployment files agree with each other and with collector_config/, and the manifests are valid.

Docker does not run here, so the compose file is checked for what can be checked statically: the
services exist, the published ports are the ones the Collector configurations listen on, every
mounted file exists, and every service-to-service address names a service and a port it serves.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from otel_blame.alerting import metrics as culprit_metrics
from otel_blame.processor.config import load_config

from .harness import COLLECTOR_CONFIG_DIR, REPO

DEPLOY = REPO / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
KUBERNETES = DEPLOY / "kubernetes"
KUBERNETES_VERSION = "1.34.0"  # the schemas kubernetes-validate ships for this version (offline)
COMPOSE_VARIABLE = re.compile(r"\$\{(?P<name>[A-Z0-9_]+):-(?P<default>[^}]*)\}")
ENV_DEFAULT = re.compile(r"\$\{env:(?P<name>[A-Z0-9_]+):-(?P<default>[^}]*)\}")


def env_defaults(path: Path) -> dict[str, str]:
    """``${env:NAME:-default}`` references in a Collector configuration -> {NAME: default}."""
    found: dict[str, str] = {}
    for match in ENV_DEFAULT.finditer(path.read_text()):
        previous = found.setdefault(match["name"], match["default"])
        assert previous == match["default"], f"{path.name}: {match['name']} has two defaults"
    return found


def with_defaults(value: str) -> str:
    """A Collector config value with every ``${env:NAME:-default}`` replaced by its default."""
    return ENV_DEFAULT.sub(lambda match: match["default"], value)


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE)


@pytest.fixture(scope="module")
def blame_config():
    return load_config(DEPLOY / "otel-blame.yaml", environ={})


def published(service: dict[str, Any]) -> dict[int, int]:
    """container port -> host port for ``ports: ["HOST:CONTAINER"]``."""
    mapping = {}
    for entry in service.get("ports", []):
        host, _, container = str(entry).partition(":")
        mapping[int(container)] = int(host)
    return mapping


def served_ports(service_name: str, compose: dict[str, Any]) -> set[int]:
    service = compose["services"][service_name]
    return {int(p) for p in service.get("expose", [])} | set(published(service))


def mounts(service: dict[str, Any]) -> dict[str, Path]:
    """container path -> host path, for bind mounts (relative to the compose file)."""
    out = {}
    for entry in service.get("volumes", []):
        source, target = entry.split(":")[:2]
        if source.startswith((".", "/")):
            out[target] = (COMPOSE.parent / source).resolve()
    return out


def test_compose_has_the_whole_stack(compose):
    assert set(compose["services"]) >= {
        "otel-blame",
        "otelcol",
        "jaeger",
        "prometheus",
        "alertmanager",
        "grafana",
        "tempo",
    }
    assert "contrib" in compose["services"]["otelcol"]["image"]


def test_compose_bind_mounts_exist(compose):
    for name, service in compose["services"].items():
        for target, source in mounts(service).items():
            assert source.exists(), f"{name}: {source} (mounted at {target}) does not exist"


def test_compose_collector_runs_single_yaml_on_its_published_ports(compose, blame_config):
    otelcol = compose["services"]["otelcol"]
    mounted = mounts(otelcol)
    config_arg = next(arg for arg in otelcol["command"] if arg.startswith("--config="))
    config_path = config_arg.split("=", 1)[1]
    assert mounted[config_path] == (COLLECTOR_CONFIG_DIR / "single.yaml").resolve()

    defaults = env_defaults(COLLECTOR_CONFIG_DIR / "single.yaml")
    ports = published(otelcol)
    for variable in ("OTELCOL_OTLP_GRPC_PORT", "OTELCOL_OTLP_HTTP_PORT", "OTELCOL_HEALTH_PORT"):
        assert int(defaults[variable]) in ports, f"otelcol does not publish {variable}={defaults[variable]}"
    assert defaults["OTELCOL_LISTEN_HOST"] == "0.0.0.0", "inside a container the Collector must listen on all"

    # The Collector forwards to otel-blame's OTLP/gRPC receiver.
    target = otelcol["environment"].get("OTEL_BLAME_ENDPOINT", defaults["OTEL_BLAME_ENDPOINT"])
    host, port = host_port(target)
    assert host == "otel-blame"
    assert port == host_port(blame_config.receivers.grpc_endpoint)[1]
    assert port in served_ports("otel-blame", compose)


def test_compose_processor_config_is_mounted_and_exports_to_jaeger(compose, blame_config):
    service = compose["services"]["otel-blame"]
    config_path = service["command"][service["command"].index("--config") + 1]
    assert mounts(service)[config_path] == (DEPLOY / "otel-blame.yaml").resolve()
    downstream = service["environment"].get("OTEL_BLAME_EXPORTER__ENDPOINT", blame_config.exporter.endpoint)
    # ${OTEL_BLAME_DOWNSTREAM:-jaeger:4317}: Jaeger unless the user picks Tempo
    choice = COMPOSE_VARIABLE.fullmatch(downstream)
    assert choice is not None and choice["name"] == "OTEL_BLAME_DOWNSTREAM", downstream
    host, port = host_port(choice["default"])
    assert host == "jaeger" and port == 4317
    assert port in served_ports("jaeger", compose)
    assert "tempo" in service["depends_on"] and "jaeger" in service["depends_on"]
    wal_mounts = [entry for entry in service["volumes"] if entry.split(":")[1] == str(blame_config.wal.dir)]
    assert wal_mounts, f"the write-ahead log {blame_config.wal.dir} must be a volume"
    assert wal_mounts[0].split(":")[0] in compose["volumes"]


def test_prometheus_scrapes_what_the_services_serve(compose, blame_config):
    config = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    defaults = env_defaults(COLLECTOR_CONFIG_DIR / "single.yaml")
    expected = {
        f"otel-blame:{host_port(blame_config.receivers.http_endpoint)[1]}",
        f"otelcol:{defaults['OTELCOL_METRICS_PORT']}",
        f"otelcol:{defaults['OTELCOL_TELEMETRY_PORT']}",
    }
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    assert targets == expected
    for target in targets | set(config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]):
        host, port = host_port(target)
        assert port in served_ports(host, compose), f"{target}: service {host} does not serve port {port}"
    rule_files = config["rule_files"]
    prometheus_mounts = mounts(compose["services"]["prometheus"])
    for rule_file in rule_files:
        assert rule_file in prometheus_mounts, f"{rule_file} is not mounted into prometheus"


def test_compose_tempo_runs_the_shipped_config_on_the_ports_it_serves(compose):
    """Tempo reads deploy/tempo/tempo.yaml (the file the end-to-end test runs), receives OTLP/gRPC
    from otel-blame on the port it listens on, keeps its data in a volume, and publishes its API."""
    tempo = compose["services"]["tempo"]
    config_arg = next(arg for arg in tempo["command"] if arg.startswith("-config.file="))
    config_path = config_arg.split("=", 1)[1]
    assert mounts(tempo)[config_path] == (DEPLOY / "tempo" / "tempo.yaml").resolve()
    config = load_yaml(DEPLOY / "tempo" / "tempo.yaml")
    otlp_host, otlp_port = host_port(
        config["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    )
    assert otlp_host == "0.0.0.0" and otlp_port in served_ports("tempo", compose)
    assert config["server"]["http_listen_address"] == "0.0.0.0"
    assert config["server"]["http_listen_port"] in published(tempo)
    assert config["storage"]["trace"]["backend"] == "local"
    data_volume = next(entry for entry in tempo["volumes"] if not entry.startswith((".", "/")))
    volume, target = data_volume.split(":")[:2]
    assert volume in compose["volumes"]
    for path in (config["storage"]["trace"]["wal"]["path"], config["storage"]["trace"]["local"]["path"]):
        assert Path(path).is_relative_to(target), f"{path} is not in the volume mounted at {target}"
    assert config["usage_report"]["reporting_enabled"] is False


def test_alert_rules_use_the_processor_metric_names():
    rules = load_yaml(DEPLOY / "prometheus" / "otel-blame-rules.yml")
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    known = {
        culprit_metrics.ATTRIBUTIONS_TOTAL,
        culprit_metrics.FALLBACKS_TOTAL,
        culprit_metrics.TRACES_TOTAL,
        culprit_metrics.LLM_TOKENS_TOTAL,
        culprit_metrics.PATTERNS_TOTAL,
        culprit_metrics.PATTERN_FIRST_SEEN,
    }
    used = {name for expr in exprs for name in re.findall(r"\b(otel_blame_[a-z_]+)\b", expr)}
    assert used and used <= known, f"rules use unknown metrics: {used - known}"
    alerts = {rule.get("alert") for group in rules["groups"] for rule in group["rules"]}
    assert {"RepeatedCulpritAgent", "NewFailurePattern", "FailurePatternSurge"} <= alerts


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)"
)
def test_alert_rules_pass_promtool():
    result = subprocess.run(
        ["promtool", "check", "rules", str(DEPLOY / "prometheus" / "otel-blame-rules.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)"
)
def test_prometheus_config_passes_promtool(tmp_path: Path):
    """The compose Prometheus configuration, with its rule file at the path it is mounted to."""
    config = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    config["rule_files"] = [str(DEPLOY / "prometheus" / "otel-blame-rules.yml")]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        ["promtool", "check", "config", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_grafana_is_provisioned_with_the_data_sources_and_the_dashboard(compose):
    grafana = mounts(compose["services"]["grafana"])
    provisioning = grafana["/etc/grafana/provisioning"]
    sources = load_yaml(provisioning / "datasources" / "datasources.yml")["datasources"]
    assert {s["type"] for s in sources} == {"prometheus", "jaeger", "tempo"}
    for source in sources:
        host, port = host_port(source["url"].split("//", 1)[1])
        assert port in served_ports(host, compose), f"{source['name']}: {host} does not serve {port}"
    providers = load_yaml(provisioning / "dashboards" / "dashboards.yml")["providers"]
    dashboard_dir = grafana[providers[0]["options"]["path"]]
    dashboards = list(dashboard_dir.glob("*.json"))
    assert dashboards
    text = dashboards[0].read_text()
    assert culprit_metrics.ATTRIBUTIONS_TOTAL in text
    uids = {s["uid"] for s in sources}
    assert set(re.findall(r'"uid": "([a-z-]+)"', text)) - {"otel-blame-culprits"} <= uids


def test_dockerfile_is_slim_non_root_and_health_checked():
    text = (DEPLOY / "Dockerfile").read_text()
    base_images = re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE)
    assert base_images and all(image.endswith("-slim") for image in base_images)
    users = re.findall(r"^USER (\S+)", text, flags=re.MULTILINE)
    assert users and not users[-1].startswith(("root", "0"))
    assert re.search(r"^HEALTHCHECK .*readyz", text, flags=re.MULTILINE | re.DOTALL)
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", text, flags=re.MULTILINE)
    for line in copied:
        for source in line.split():
            assert (REPO / source).exists(), f"Dockerfile copies missing {source}"


def kubernetes_documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return docs


@pytest.mark.parametrize(
    "name,doc", kubernetes_documents(), ids=lambda value: value if isinstance(value, str) else ""
)
def test_kubernetes_manifest_validates(name, doc):
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def by_kind() -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for _, doc in kubernetes_documents():
        out.setdefault(doc["kind"], []).append(doc)
    return out


def test_kubernetes_layout_is_consistent(blame_config):
    kinds = by_kind()
    (statefulset,) = kinds["StatefulSet"]
    services = {s["metadata"]["name"]: s for s in kinds["Service"]}
    headless = services[statefulset["spec"]["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None"
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert headless["spec"]["selector"].items() <= labels.items()

    # The write-ahead log lives on a per-replica volume at the configured directory.
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    claim = statefulset["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
    wal_mount = next(m for m in container["volumeMounts"] if m["name"] == claim)
    assert wal_mount["mountPath"] == str(blame_config.wal.dir)

    # Every StatefulSet and Deployment has a PodDisruptionBudget selecting it.
    budgets = kinds["PodDisruptionBudget"]
    for workload in kinds["StatefulSet"] + kinds["Deployment"]:
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert any(b["spec"]["selector"]["matchLabels"].items() <= pod_labels.items() for b in budgets)

    # The load-balancing tier resolves the headless Service by DNS on otel-blame's gRPC port.
    (balancer,) = kinds["Deployment"]
    env = {e["name"]: e["value"] for e in balancer["spec"]["template"]["spec"]["containers"][0]["env"]}
    namespace = headless["metadata"]["namespace"]
    assert (
        env["OTEL_BLAME_REPLICAS_DNS_NAME"] == f"{headless['metadata']['name']}.{namespace}.svc.cluster.local"
    )
    dns = load_yaml(COLLECTOR_CONFIG_DIR / "scaled-dns.yaml")["exporters"]["loadbalancing"]["resolver"]["dns"]
    port = int(with_defaults(str(dns["port"])))
    assert port == host_port(blame_config.receivers.grpc_endpoint)[1]
    assert port in {p["port"] for p in headless["spec"]["ports"]}


def test_kubernetes_configmaps_carry_the_current_files():
    spec = importlib.util.spec_from_file_location("render_configmaps", KUBERNETES / "render_configmaps.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (KUBERNETES / "configmaps.yaml").read_text() == module.render(), (
        "deploy/kubernetes/configmaps.yaml is stale: run python deploy/kubernetes/render_configmaps.py"
    )
    mounted = {
        v["configMap"]["name"]
        for kind in ("StatefulSet", "Deployment")
        for workload in by_kind()[kind]
        for v in workload["spec"]["template"]["spec"]["volumes"]
        if "configMap" in v
    }
    assert mounted == {cm["metadata"]["name"] for cm in by_kind()["ConfigMap"]}


def test_processor_container_config_is_valid(blame_config):
    assert blame_config.attribution.method == "heuristic"
    assert host_port(blame_config.receivers.grpc_endpoint) == ("0.0.0.0", 4317)
