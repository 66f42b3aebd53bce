"""`m3grpc health --server HOST:PORT`: one grpc.health.v1 Check, for container health
checks. Prints the status; exit 0 only when it is SERVING."""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check_health(server: str, *, service: str = "", timeout: float = 5.0) -> str:
    """The serving status name of `service` on `server`; grpc.RpcError when unreachable."""
    with grpc.insecure_channel(server) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    name: str = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    return name


def run_health(server: str, *, service: str = "", timeout: float = 5.0) -> int:
    try:
        status = check_health(server, service=service, timeout=timeout)
    except grpc.RpcError as exc:
        code = exc.code().name if isinstance(exc, grpc.Call) else "UNKNOWN"
        print(f"m3grpc: health check of {server} failed: {code}", file=sys.stderr)
        return 1
    print(status)
    return 0 if status == "SERVING" else 1
