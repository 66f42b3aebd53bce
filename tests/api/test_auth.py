"""Authentication and transport, against real `m3grpc serve` subprocesses over
loopback: TLS, mutual TLS, bearer tokens (UNAUTHENTICATED with ErrorInfo), open
health checking, and the refusal to serve beyond loopback without them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from m3grpc.api.auth import token_hash
from m3grpc.client import RemoteMCPTestKit, TlsOptions
from m3grpc.errors import UnauthenticatedError
from m3grpc.wire.status import RemoteCallError
from tests.api.conftest import ROOT, ServerProcess, write_config
from tests.api.test_startup import refused
from tests.support.certs import Authority, Pair

ALICE = "alice-secret-token-7f3a"
SERVE_CLI = (sys.executable, "-m", "m3grpc.cli")
ROOT_TOKEN = "root-secret-token-91c2"


@dataclass
class Pki:
    ca: Authority
    server: Pair
    client: Pair  # common name "ci-bot"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    ca = Authority.create(tmp_path_factory.mktemp("pki"))
    return Pki(ca, ca.server(), ca.client("ci-bot"))


def tokens_toml() -> str:
    return (
        "[[auth.tokens]]\n"
        f'principal = "alice"\nhash = "{token_hash(ALICE)}"\n'
        "[[auth.tokens]]\n"
        f'principal = "root"\nrole = "admin"\nhash = "{token_hash(ROOT_TOKEN)}"\n'
    )


def secure_config(tmp: Path, pki: Pki, *, mtls: bool = False, extra: str = "") -> Path:
    path = write_config(tmp / "m3.toml", tmp / "m3.sqlite")
    tls = f'[tls]\ncert = "{pki.server.cert}"\nkey = "{pki.server.key}"\n'
    if mtls:
        tls += f'client_ca = "{pki.ca.cert}"\n'
    path.write_text(path.read_text() + tls + extra)
    return path


def serve(config: Path) -> ServerProcess:
    return ServerProcess(config, config.with_suffix(".log")).start()


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ServerProcess]:
    server = serve(secure_config(tmp_path_factory.mktemp("tokens"), pki, extra=tokens_toml()))
    try:
        yield server
    finally:
        server.terminate()


def kit(server: ServerProcess, pki: Pki, token: str | None = None) -> RemoteMCPTestKit:
    return RemoteMCPTestKit(server.address, tls=TlsOptions(root_ca=pki.ca.cert), token=token)


def test_a_valid_token_over_tls_is_served(token_server: ServerProcess, pki: Pki) -> None:
    with kit(token_server, pki, ALICE) as client:
        assert "shipping" in {server.name for server in client.list_servers()}


def test_a_call_without_a_token_is_unauthenticated(token_server: ServerProcess, pki: Pki) -> None:
    with kit(token_server, pki) as client, pytest.raises(UnauthenticatedError) as caught:
        client.list_servers()
    assert caught.value.code == "UNAUTHENTICATED"
    assert caught.value.metadata == {"credentials": "missing"}


@pytest.mark.parametrize("token", ["not-a-configured-token", ALICE + "x", ALICE[:-1]])
def test_an_unknown_token_is_unauthenticated(
    token_server: ServerProcess, pki: Pki, token: str
) -> None:
    with kit(token_server, pki, token) as client, pytest.raises(UnauthenticatedError) as caught:
        client.handle("exe_missing").snapshot()
    assert caught.value.metadata == {"credentials": "invalid"}
    assert token not in str(caught.value)


def test_an_authorization_that_is_not_bearer_is_unauthenticated(
    token_server: ServerProcess, pki: Pki
) -> None:
    options = TlsOptions(root_ca=pki.ca.cert)
    metadata = {"authorization": f"Basic {ALICE}"}
    with (
        RemoteMCPTestKit(token_server.address, tls=options, metadata=metadata) as client,
        pytest.raises(UnauthenticatedError) as caught,
    ):
        client.list_servers()
    assert caught.value.metadata == {"credentials": "invalid"}


def test_a_refused_watch_is_unauthenticated(token_server: ServerProcess, pki: Pki) -> None:
    with kit(token_server, pki) as client, pytest.raises(UnauthenticatedError):
        next(iter(client.watch_pending()))


def test_health_and_reflection_answer_without_a_token(
    token_server: ServerProcess, pki: Pki
) -> None:
    credentials = grpc.ssl_channel_credentials(root_certificates=pki.ca.cert.read_bytes())
    with grpc.secure_channel(token_server.address, credentials) as channel:
        health = health_pb2_grpc.HealthStub(channel)  # type: ignore[no-untyped-call]
        reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=30)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_a_plaintext_client_cannot_talk_to_a_tls_server(token_server: ServerProcess) -> None:
    with (
        RemoteMCPTestKit(token_server.address, token=ALICE, timeout=10) as client,
        pytest.raises(RemoteCallError) as caught,
    ):
        client.list_servers()
    assert caught.value.code == "UNAVAILABLE"


def test_tokens_never_reach_the_log(token_server: ServerProcess, pki: Pki) -> None:
    for token in (ALICE, "wrong-" + ALICE):
        with kit(token_server, pki, token) as client, contextlib.suppress(UnauthenticatedError):
            client.list_servers()
    log = token_server.log
    assert log is not None
    text = log.read_text()
    assert "ListServers" in text  # the calls were logged (at info) ...
    assert ALICE not in text  # ... without their credentials


def test_health_can_require_credentials(tmp_path: Path, pki: Pki) -> None:
    extra = tokens_toml().replace(
        "[[auth.tokens]]", "[auth]\nrequire_for_health = true\n[[auth.tokens]]", 1
    )
    server = serve(secure_config(tmp_path, pki, extra=extra))
    try:
        credentials = grpc.ssl_channel_credentials(root_certificates=pki.ca.cert.read_bytes())
        with grpc.secure_channel(server.address, credentials) as channel:
            health = health_pb2_grpc.HealthStub(channel)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.RpcError) as caught:
                health.Check(health_pb2.HealthCheckRequest(service=""), timeout=30)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            reply = health.Check(
                health_pb2.HealthCheckRequest(service=""),
                timeout=30,
                metadata=(("authorization", f"Bearer {ALICE}"),),
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        server.terminate()


def test_mutual_tls_admits_a_client_certificate_and_refuses_none(tmp_path: Path, pki: Pki) -> None:
    server = serve(secure_config(tmp_path, pki, mtls=True))
    try:
        with_cert = TlsOptions(
            root_ca=pki.ca.cert, client_cert=pki.client.cert, client_key=pki.client.key
        )
        with RemoteMCPTestKit(server.address, tls=with_cert) as client:
            assert client.list_servers()
        # Another CA's client certificate is refused in the handshake.
        stranger = Authority.create(tmp_path / "stranger", "stranger").client("intruder")
        foreign = TlsOptions(
            root_ca=pki.ca.cert, client_cert=stranger.cert, client_key=stranger.key
        )
        for options in (TlsOptions(root_ca=pki.ca.cert), foreign):
            with (
                RemoteMCPTestKit(server.address, tls=options, timeout=10) as client,
                pytest.raises(RemoteCallError) as caught,
            ):
                client.list_servers()
            assert caught.value.code == "UNAVAILABLE"
    finally:
        server.terminate()


def test_server_name_override_verifies_another_name(tmp_path: Path, pki: Pki) -> None:
    # The certificate names localhost; a target spelled differently is verified as it.
    server = serve(secure_config(tmp_path, pki, extra=tokens_toml()))
    try:
        port = server.address.rpartition(":")[2]
        options = TlsOptions(root_ca=pki.ca.cert, server_name="localhost")
        with RemoteMCPTestKit(f"127.0.0.1:{port}", tls=options, token=ALICE) as client:
            assert client.list_servers()
    finally:
        server.terminate()


# -- refusals at startup ---------------------------------------------------------------


def test_serving_beyond_loopback_without_auth_is_refused(tmp_path: Path, pki: Pki) -> None:
    config = write_config(tmp_path / "m3.toml", tmp_path / "m3.sqlite")
    line = refused("--config", str(config), "--listen", "0.0.0.0:0")
    assert "0.0.0.0:0" in line and "allow_insecure" in line, line
    # TLS alone authenticates nobody: still refused.
    line = refused("--config", str(secure_config(tmp_path, pki)), "--listen", "[::]:0")
    assert "authentication" in line and "TLS" not in line.split("without")[1].split(":")[0]
    assert not (tmp_path / "m3.sqlite").exists()


def test_allow_insecure_is_the_explicit_opt_out() -> None:
    from m3grpc.api.config import ServiceConfig
    from m3grpc.api.server import InsecureListenError, _check_exposure

    with pytest.raises(InsecureListenError):
        _check_exposure(ServiceConfig(), "0.0.0.0:50051", None)
    _check_exposure(ServiceConfig(allow_insecure=True), "0.0.0.0:50051", None)
    for loopback in ("127.0.0.1:1", "127.8.0.1:1", "[::1]:1", "localhost:1", "LOCALHOST:1"):
        _check_exposure(ServiceConfig(), loopback, None)
        _check_exposure(ServiceConfig(), "127.0.0.1:2", loopback)  # a loopback inbox
    for beyond in ("10.0.0.1:1", "[::]:1", "example.internal:1"):
        with pytest.raises(InsecureListenError):
            _check_exposure(ServiceConfig(), beyond, None)
        # The web inbox has no authentication of its own: beyond loopback it is
        # refused even when the gRPC API itself stays on loopback.
        with pytest.raises(InsecureListenError, match="web inbox"):
            _check_exposure(ServiceConfig(), "127.0.0.1:2", beyond)
        _check_exposure(ServiceConfig(allow_insecure=True), "127.0.0.1:2", beyond)


def test_an_inbox_beyond_loopback_is_refused_at_startup(tmp_path: Path) -> None:
    config = write_config(tmp_path / "m3.toml", tmp_path / "m3.sqlite")
    line = refused("--config", str(config), "--inbox-listen", "0.0.0.0:0")
    assert "web inbox" in line and "allow_insecure" in line, line
    assert not (tmp_path / "m3.sqlite").exists()


def test_unreadable_tls_files_are_refused(tmp_path: Path, pki: Pki) -> None:
    config = write_config(tmp_path / "m3.toml", tmp_path / "m3.sqlite")
    config.write_text(
        config.read_text()
        + f'[tls]\ncert = "{tmp_path / "missing.crt"}"\nkey = "{pki.server.key}"\n'
    )
    line = refused("--config", str(config))
    assert "missing.crt" in line and "TLS certificate" in line, line


def test_a_plaintext_token_in_the_config_is_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path / "m3.toml", tmp_path / "m3.sqlite")
    config.write_text(
        config.read_text() + f'[[auth.tokens]]\nprincipal = "alice"\nhash = "{ALICE}"\n'
    )
    line = refused("--config", str(config))
    assert "auth.tokens.0.hash" in line and ALICE not in line, line


def test_hash_token_prints_the_configured_form() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "m3grpc.cli", "hash-token"],
        input=ALICE + "\n",
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == token_hash(ALICE)


def test_the_remote_verbs_take_tls_and_the_token_from_the_environment(
    token_server: ServerProcess, pki: Pki
) -> None:
    def rounds_list(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*SERVE_CLI, "rounds", "list", "--server", token_server.address, "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "M3_TLS_CA": str(pki.ca.cert), **env},
        )

    done = rounds_list(M3_TOKEN=ALICE)
    assert done.returncode == 0, done.stderr
    refused_call = rounds_list()
    assert refused_call.returncode == 2, refused_call.stderr
    assert refused_call.stderr.startswith("m3grpc: UNAUTHENTICATED: "), refused_call.stderr


def test_the_health_command_checks_a_tls_server(token_server: ServerProcess, pki: Pki) -> None:
    done = subprocess.run(
        [*SERVE_CLI, "health", "--server", token_server.address],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "M3_TLS_CA": str(pki.ca.cert)},
    )
    assert (done.returncode, done.stdout.strip()) == (0, "SERVING"), done.stderr


def test_a_client_certificate_is_its_common_name_and_role() -> None:
    from m3grpc.api.auth import Authenticator, Principal
    from m3grpc.api.config import Auth

    with_certificates = Authenticator(Auth(admin_certificates=("ops",)), certificates=True)
    assert with_certificates.authenticate([], {"x509_common_name": [b"ci-bot"]}) == Principal(
        "ci-bot", "user"
    )
    assert with_certificates.authenticate([], {"x509_common_name": [b"ops"]}).is_admin
    with pytest.raises(UnauthenticatedError):
        with_certificates.authenticate([], {})
    # Certificates count only when the service verifies them (a client CA).
    without = Authenticator(Auth(admin_certificates=("ops",)), certificates=False)
    with pytest.raises(UnauthenticatedError):
        without.authenticate([], {"x509_common_name": [b"ops"]})
