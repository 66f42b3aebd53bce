"""compose.yaml: PostgreSQL, a one-shot `db upgrade`, two replicas on one database.

Without Docker, the file's own settings are run here through docker/entrypoint.sh:
its configuration (pointed at a fresh database on the test PostgreSQL instead of
the `postgres` service) migrates once, then two replicas serve it side by side.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from m3grpc.api.config import ServiceConfig
from m3grpc.storage.schema_version import HEAD_REVISION
from tests.docker.conftest import ROOT, EntrypointServer, entrypoint_env, run_entrypoint
from tests.storage.conftest import POSTGRES_URL
from tests.storage.conftest import postgres_database as fresh_postgres_database

COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
REPLICAS = ("m3-a", "m3-b")


def test_two_replicas_start_after_the_migration_on_one_database() -> None:
    migrate = SERVICES["migrate"]
    assert migrate["command"] == ["db", "upgrade"] and migrate["build"] == "."
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    configs = set()
    for name in REPLICAS:
        replica = SERVICES[name]
        assert replica["image"] == migrate["image"]
        assert replica["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
        configs.add(replica["environment"]["M3_CONFIG_TOML"])
    assert len(configs) == 1  # the same configuration, so the same database
    config = ServiceConfig.model_validate(tomllib.loads(configs.pop()))
    url = sa.make_url(config.database)
    postgres = SERVICES["postgres"]["environment"]
    assert (url.drivername, url.host) == ("postgresql+psycopg", "postgres")
    assert (url.username, url.password, url.database) == (
        postgres["POSTGRES_USER"],
        postgres["POSTGRES_PASSWORD"],
        postgres["POSTGRES_DB"],
    )
    # Distinct host ports for the two replicas, both to the container's 50051.
    ports = [SERVICES[name]["ports"][0] for name in REPLICAS]
    assert len(set(ports)) == 2 and all(port.endswith(":50051") for port in ports)


@pytest.fixture
def postgres_database() -> Iterator[str]:
    if POSTGRES_URL is None:
        pytest.skip("M3_TEST_POSTGRES_URL not set")
    yield from fresh_postgres_database("m3_compose")


@pytest.mark.postgres
def test_the_compose_configuration_runs_two_replicas(
    tmp_path: Path, postgres_database: str
) -> None:
    environment = dict(SERVICES["m3-a"]["environment"])
    compose_url = ServiceConfig.model_validate(
        tomllib.loads(environment["M3_CONFIG_TOML"])
    ).database
    environment["M3_CONFIG_TOML"] = environment["M3_CONFIG_TOML"].replace(
        compose_url, postgres_database
    )
    migrated = run_entrypoint(
        *SERVICES["migrate"]["command"], env=entrypoint_env(tmp_path / "migrate", **environment)
    )
    assert migrated.returncode == 0, migrated.stderr
    assert f"-> schema at revision {HEAD_REVISION} (current)" in migrated.stdout

    servers = []
    try:
        for name in REPLICAS:
            env = entrypoint_env(tmp_path / name, M3_LISTEN="127.0.0.1:0", **environment)
            servers.append(EntrypointServer(env, tmp_path / f"{name}.log").start())
        for server in servers:
            health = run_entrypoint("health", "--server", server.address, env=env)
            assert (health.returncode, health.stdout.strip()) == (0, "SERVING"), health.stderr
    finally:
        codes = [server.stop() for server in servers]
    assert codes == [0, 0]
