"""The receivers: where OTLP enters the chain (gRPC on grpcio, HTTP on Starlette served by uvicorn)."""

from otel_blame.processor.receivers.grpc import GRPCReceiver
from otel_blame.processor.receivers.http import HTTPReceiver

__all__ = ["GRPCReceiver", "HTTPReceiver"]
