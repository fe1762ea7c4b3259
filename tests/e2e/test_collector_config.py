"""Every collector_config/ file passes the real Collector's `validate` command.

The Collector is the one deploy/build_components.sh builds (`make test` builds it first); without
it these tests skip and say how to build it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from .harness import COLLECTOR_BIN, COLLECTOR_CONFIG_DIR, missing_binary_reason, validate_collector_config

CONFIGS = sorted(COLLECTOR_CONFIG_DIR.glob("*.yaml"))
LOOPBACK_ENV = {
    "OTELCOL_LISTEN_HOST": "127.0.0.1",
    "OTELCOL_OTLP_GRPC_PORT": "14317",
    "OTEL_BLAME_ENDPOINT": "127.0.0.1:24317",
    "OTEL_BLAME_REPLICA_0": "127.0.0.1:24317",
    "OTEL_BLAME_REPLICA_1": "127.0.0.1:24318",
}

pytestmark = pytest.mark.skipif(
    missing_binary_reason(COLLECTOR_BIN) is not None, reason=str(missing_binary_reason(COLLECTOR_BIN))
)


def test_the_expected_configurations_exist():
    names = {path.name for path in CONFIGS}
    assert {"single.yaml", "scaled.yaml", "tail_sampling.yaml", "scaled-dns.yaml", "scaled-k8s.yaml"} <= names


# The k8s resolver builds its Kubernetes client when the pipeline is built (which `validate`
# does); outside a cluster it needs a client configuration. This one is never contacted.
FAKE_KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "validate-only", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [{"name": "validate-only", "user": {"token": "validate-only"}}],
    "contexts": [{"name": "validate-only", "context": {"cluster": "validate-only", "user": "validate-only"}}],
    "current-context": "validate-only",
}


@pytest.fixture
def kube_env(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(FAKE_KUBECONFIG))
    return {"KUBECONFIG": str(path)}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.name)
def test_config_validates_with_defaults(config: Path, kube_env: dict[str, str]):
    result = validate_collector_config(config, kube_env)
    assert result.returncode == 0, f"{config.name}:\n{result.stdout}\n{result.stderr}"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.name)
def test_config_validates_with_loopback_overrides(config: Path, kube_env: dict[str, str]):
    result = validate_collector_config(config, {**LOOPBACK_ENV, **kube_env})
    assert result.returncode == 0, f"{config.name}:\n{result.stdout}\n{result.stderr}"


def test_validate_rejects_a_broken_config(tmp_path: Path):
    """The check has teeth: an unknown key in the loadbalancing exporter is an error."""
    config = yaml.safe_load((COLLECTOR_CONFIG_DIR / "scaled.yaml").read_text())
    config["exporters"]["loadbalancing"]["routing_keyz"] = "traceID"
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(config))
    result = validate_collector_config(broken)
    assert result.returncode != 0
    assert "routing_keyz" in result.stdout + result.stderr


def test_scaled_routes_by_trace_id_and_tail_sampling_keeps_blamed_traces():
    scaled = yaml.safe_load((COLLECTOR_CONFIG_DIR / "scaled.yaml").read_text())
    assert scaled["exporters"]["loadbalancing"]["routing_key"] == "traceID"
    for pipeline in scaled["service"]["pipelines"].values():
        assert pipeline["exporters"] == ["loadbalancing"]
    sampling = yaml.safe_load((COLLECTOR_CONFIG_DIR / "tail_sampling.yaml").read_text())
    policies = {p["type"]: p for p in sampling["processors"]["tail_sampling"]["policies"]}
    assert policies["boolean_attribute"]["boolean_attribute"] == {"key": "blame.culprit", "value": True}
    assert policies["status_code"]["status_code"]["status_codes"] == ["ERROR"]
