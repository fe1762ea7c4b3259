"""Server-side TLS for both receivers, from one config section."""

from __future__ import annotations

import ssl

import grpc

from otel_blame.processor.config import ServerTLSConfig


def grpc_server_credentials(tls: ServerTLSConfig) -> grpc.ServerCredentials:
    """TLS; with a client CA every client must present a certificate it signed (mTLS)."""
    return grpc.ssl_server_credentials(
        [(tls.key_file.read_bytes(), tls.cert_file.read_bytes())],
        root_certificates=tls.client_ca_file.read_bytes() if tls.client_ca_file else None,
        require_client_auth=tls.client_ca_file is not None,
    )


def http_server_context(tls: ServerTLSConfig) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    if tls.client_ca_file is not None:
        context.load_verify_locations(cafile=str(tls.client_ca_file))
        context.verify_mode = ssl.CERT_REQUIRED
    return context
