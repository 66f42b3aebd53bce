"""gRPC health that means something: NOT_SERVING while the database cannot be
reached or the workers stopped, SERVING again once it can. With real servers:
an SQLite file moved away and back, a PostgreSQL server stopped and started."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from m3grpc.api.config import ServiceConfig
from m3grpc.api.server import start_service
from tests.api.conftest import ROOT, ServerProcess, write_config

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
NAMES = ("", "m3.v1.ExecutionService", "m3.v1.ElicitationService")


def _fast_checks(config: Path) -> Path:
    config.write_text("health_check_interval_seconds = 0.2\n" + config.read_text())
    return config


def _statuses(channel: grpc.Channel) -> set[int]:
    stub = health_pb2_grpc.HealthStub(channel)
    return {
        stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status for name in NAMES
    }


def _wait_for(channel: grpc.Channel, status: int, attempts: int = 300) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    for _ in range(attempts):
        if _statuses(channel) == {status}:
            return
        # Watch sends the current status, then every change: wait for the next.
        stream = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=1)
        try:
            for reply in stream:
                if reply.status == status:
                    break
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    raise AssertionError(f"health never became {status}: {_statuses(channel)}")


def test_sqlite_file_gone_is_not_serving_until_it_is_back(tmp_path: Path) -> None:
    database = tmp_path / "m3.sqlite"
    config = _fast_checks(write_config(tmp_path / "m3.toml", database))
    server = ServerProcess(config, tmp_path / "server.log").start()
    channel = grpc.insecure_channel(server.address)
    try:
        assert _statuses(channel) == {SERVING}
        database.rename(tmp_path / "elsewhere.sqlite")
        _wait_for(channel, NOT_SERVING)
        (tmp_path / "elsewhere.sqlite").rename(database)
        _wait_for(channel, SERVING)
    finally:
        channel.close()
        server.stop()
    log = (tmp_path / "server.log").read_text()
    assert "NOT_SERVING: the database is unreachable" in log
    assert "healthy again: SERVING" in log


async def test_stopped_workers_are_not_serving(tmp_path: Path) -> None:
    config = ServiceConfig(
        database=str(tmp_path / "m3.sqlite"),
        listen="127.0.0.1:0",
        health_check_interval_seconds=60,
    )
    service = await start_service(config)
    channel = grpc.aio.insecure_channel(service.address)
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert reply.status == SERVING
        await service.runtime.stop(0)  # the worker pool is gone; the server still answers
        assert service.health_monitor is not None
        await service.health_monitor.update()
        for name in NAMES:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
            assert reply.status == NOT_SERVING
    finally:
        await channel.close()
        await service.stop(0)


# -- PostgreSQL: a server of the test's own, stopped and started again -------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _pg_ctl(data: Path, *args: str) -> None:
    binaries = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    command = [str(binaries[-1]), "-D", str(data), *args]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, check=True, capture_output=True, timeout=120)


@pytest.mark.postgres
def test_postgres_stopped_is_not_serving_until_it_is_back(tmp_path: Path) -> None:
    if not os.environ.get("M3_TEST_POSTGRES_URL"):
        pytest.skip("needs PostgreSQL (M3_TEST_POSTGRES_URL; scripts/start-postgres.sh)")
    port = _free_port()
    # Not under tmp_path: the postgres user must be able to reach the directory.
    data = Path(f"/tmp/m3-health-pg-{port}")
    env = {**os.environ, "M3_PG_PORT": str(port), "M3_PG_DATA": str(data)}
    url = subprocess.run(
        ["bash", str(ROOT / "scripts" / "start-postgres.sh")],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout.strip()
    server = None
    try:
        config = _fast_checks(write_config(tmp_path / "m3.toml", url))
        server = ServerProcess(config, tmp_path / "server.log").start()
        channel = grpc.insecure_channel(server.address)
        try:
            assert _statuses(channel) == {SERVING}
            _pg_ctl(data, "stop", "-m", "fast", "-w")
            _wait_for(channel, NOT_SERVING)
            subprocess.run(
                ["bash", str(ROOT / "scripts" / "start-postgres.sh")],
                env=env,
                check=True,
                capture_output=True,
                timeout=300,
            )
            _wait_for(channel, SERVING)
            # The workers lived through the outage: it was the database that failed.
            log = (tmp_path / "server.log").read_text()
            assert "NOT_SERVING: the database is unreachable" in log
            assert "the worker pool is not running" not in log
        finally:
            channel.close()
    finally:
        if server is not None:
            server.stop()
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            _pg_ctl(data, "stop", "-m", "immediate", "-w")
        shutil.rmtree(data, ignore_errors=True)
