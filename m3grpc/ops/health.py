"""`m3grpc health --server HOST:PORT`: one grpc.health.v1 Check, for container health
checks. Prints the status; exit 0 only when it is SERVING.

A server with TLS is checked with the remote verbs' environment: `M3_TLS_CA` (or
`M3_TLS=1` for the system roots), `M3_TLS_CERT`/`M3_TLS_KEY` for mutual TLS,
`M3_TLS_SERVER_NAME`, and `M3_TOKEN` when the server has `auth.require_for_health`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check_health(server: str, *, service: str = "", timeout: float = 5.0) -> str:
    """The serving status name of `service` on `server`; grpc.RpcError when unreachable."""
    with _channel(server, os.environ) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        token = os.environ.get("M3_TOKEN")
        metadata = (("authorization", f"Bearer {token}"),) if token else None
        response = stub.Check(
            health_pb2.HealthCheckRequest(service=service), timeout=timeout, metadata=metadata
        )
    name: str = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    return name


def _channel(server: str, env: Mapping[str, str]) -> grpc.Channel:
    ca, cert, key = env.get("M3_TLS_CA"), env.get("M3_TLS_CERT"), env.get("M3_TLS_KEY")
    name = env.get("M3_TLS_SERVER_NAME")
    if not (ca or cert or key or name or env.get("M3_TLS") == "1"):
        return grpc.insecure_channel(server)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=Path(ca).read_bytes() if ca else None,
        private_key=Path(key).read_bytes() if key else None,
        certificate_chain=Path(cert).read_bytes() if cert else None,
    )
    options = [("grpc.ssl_target_name_override", name)] if name else []
    return grpc.secure_channel(server, credentials, options=options)


def run_health(server: str, *, service: str = "", timeout: float = 5.0) -> int:
    try:
        status = check_health(server, service=service, timeout=timeout)
    except grpc.RpcError as exc:
        code = exc.code().name if isinstance(exc, grpc.Call) else "UNKNOWN"
        print(f"m3grpc: health check of {server} failed: {code}", file=sys.stderr)
        return 1
    except OSError as exc:  # a TLS file in the environment that cannot be read
        problem = f"cannot read {exc.filename}: {exc.strerror}"
        print(f"m3grpc: health check of {server}: {problem}", file=sys.stderr)
        return 1
    print(status)
    return 0 if status == "SERVING" else 1
