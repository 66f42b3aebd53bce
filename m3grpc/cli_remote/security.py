"""How the remote verbs reach a service with TLS or bearer tokens: the environment.

    M3_TOKEN             a bearer token (sent as `authorization: Bearer ...`)
    M3_TLS_CA            connect with TLS, verifying the server with this CA (PEM file);
                         set M3_TLS=1 instead to use the system's roots
    M3_TLS_CERT, M3_TLS_KEY   a client certificate and key (mutual TLS)
    M3_TLS_SERVER_NAME   the name to verify the server's certificate against

The environment rather than flags: a token on a command line shows in `ps` and
in shell history.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from m3grpc.client import TlsOptions
from m3grpc.client.calls import Connection


def tls_from_env(env: Mapping[str, str] = os.environ) -> TlsOptions | None:
    ca, cert, key = env.get("M3_TLS_CA"), env.get("M3_TLS_CERT"), env.get("M3_TLS_KEY")
    name = env.get("M3_TLS_SERVER_NAME")
    if not (ca or cert or key or name or env.get("M3_TLS") == "1"):
        return None
    return TlsOptions(
        root_ca=ca or None, client_cert=cert or None, client_key=key or None, server_name=name
    )


def token_from_env(env: Mapping[str, str] = os.environ) -> str | None:
    return env.get("M3_TOKEN") or None


def connection_from_env(env: Mapping[str, str] = os.environ) -> Connection:
    return Connection.of(tls_from_env(env), token_from_env(env), None)
