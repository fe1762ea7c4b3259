"""TLS and mutual TLS on both receivers and on both exporter protocols, with real certificates."""

from __future__ import annotations

import http.client
import ssl
import subprocess
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_blame.conventions import sdk_spans_to_proto
from otel_blame.processor import BlameProcessor, load_config

from .conftest import processor_overrides
from .spans import record_agent_run


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=otel-blame test CA", cwd=d)  # fmt: skip
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.pem", "-days", "2", "-extfile", "san.cnf", cwd=d)  # fmt: skip
    return d


def _start(sink_endpoint: str, wal: Path, **sections: dict) -> BlameProcessor:
    return BlameProcessor(
        load_config(overrides=processor_overrides(sink_endpoint, wal, **sections), environ={})
    ).start()


def test_mtls_receivers_and_tls_exporters(sink, tmp_path: Path, pki: Path) -> None:  # noqa: ANN001
    server_tls = {"cert_file": str(pki / "server.pem"), "key_file": str(pki / "server.key"),
                  "client_ca_file": str(pki / "ca.pem")}  # fmt: skip
    client_tls = {"ca_file": str(pki / "ca.pem"), "cert_file": str(pki / "client.pem"),
                  "key_file": str(pki / "client.key")}  # fmt: skip
    secure = _start(sink.endpoint, tmp_path / "b", receivers={"tls": server_tls})
    via_grpc = _start(secure.grpc_endpoint, tmp_path / "a1", exporter={"tls": client_tls})
    via_http = _start(
        f"https://{secure.http_endpoint}", tmp_path / "a2", exporter={"tls": client_tls, "protocol": "http"}
    )
    try:
        sent = 0
        # the SDK's own exporter, with a client certificate
        credentials = grpc.ssl_channel_credentials(
            (pki / "ca.pem").read_bytes(),
            (pki / "client.key").read_bytes(),
            (pki / "client.pem").read_bytes(),
        )
        spans = record_agent_run([("A", "x")], failed=False)
        direct = OTLPSpanExporter(endpoint=secure.grpc_endpoint, credentials=credentials)
        assert direct.export(spans) == SpanExportResult.SUCCESS
        direct.shutdown()
        sent += len(spans)
        # without a client certificate the handshake fails
        anonymous = OTLPSpanExporter(
            endpoint=secure.grpc_endpoint,
            credentials=grpc.ssl_channel_credentials((pki / "ca.pem").read_bytes()),
            timeout=2,
        )
        assert anonymous.export(record_agent_run([("A", "x")], failed=False)) == SpanExportResult.FAILURE
        anonymous.shutdown()
        # OTLP/HTTP over TLS: with a client certificate accepted, without it refused
        spans = record_agent_run([("B", "y")], failed=True)
        body = ExportTraceServiceRequest(resource_spans=sdk_spans_to_proto(spans)).SerializeToString()
        host, _, port = secure.http_endpoint.rpartition(":")
        with_cert = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        with_cert.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
        connection = http.client.HTTPSConnection(host, int(port), context=with_cert, timeout=10)
        connection.request(
            "POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"}
        )
        assert connection.getresponse().status == 200
        connection.close()
        sent += len(spans)
        without_cert = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        connection = http.client.HTTPSConnection(host, int(port), context=without_cert, timeout=10)
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            connection.request(
                "POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"}
            )
            connection.getresponse()
        connection.close()
        # processor -> processor over TLS, by gRPC and by HTTP
        for upstream in (via_grpc, via_http):
            spans = record_agent_run([("C", "z")], failed=True)
            plain = OTLPSpanExporter(endpoint=upstream.grpc_endpoint, insecure=True)
            assert plain.export(spans) == SpanExportResult.SUCCESS
            plain.shutdown()
            sent += len(spans)
        assert len(sink.wait_for_spans(sent, timeout=15)) == sent
    finally:
        for processor in (via_grpc, via_http, secure):
            processor.stop(timeout=5)
