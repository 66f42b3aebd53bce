"""`m3grpc db upgrade|status|rotate-key [--config FILE | --database URL]`.

`upgrade` runs the packaged Alembic migrations (m3grpc/storage/migrate.py): an
empty database gets every revision, an older one what it lacks, tables from
before migrations are adopted when they match. `status` only reads. Exit 0: the
schema is (now) current; 1: it is not, or the database cannot be reached;
2: the configuration cannot be read.

`rotate-key` seals every stored response with the first configured encryption
key (m3grpc/storage/sealed_rows.py); on SQLite it then rebuilds the file
(VACUUM) and empties the WAL, so no page keeps an older copy. Exit 1 when a
stored value does not open with the listed keys, 2 when no key is configured.
"""

from __future__ import annotations

import os
import sys

from m3grpc.api.config import ConfigError, load_config
from m3grpc.api.preflight import describe_cause, redact_url
from m3grpc.errors import EncryptionKeyError
from m3grpc.runtime import (
    SchemaState,
    SchemaVersionError,
    faults_reported_by_caller,
    inspect_database,
    sqlite_location_problem,
)


def resolve_database(config: str | None, database: str | None) -> str:
    """The database named by --database, else by the config (--config, else $M3_CONFIG,
    else the built-in defaults). ConfigError when the config cannot be read."""
    if database:
        return database
    return load_config(config or os.environ.get("M3_CONFIG") or None).database


def run_db(command: str, *, config: str | None, database: str | None) -> int:
    try:
        target = resolve_database(config, database)
    except ConfigError as exc:
        print(f"m3grpc: {exc}", file=sys.stderr)
        return 2
    shown = redact_url(target)
    if (problem := sqlite_location_problem(target)) is not None:
        print(f"m3grpc: database {shown}: {problem}", file=sys.stderr)
        return 1
    try:
        with faults_reported_by_caller():  # a fault ends the command in its one line
            return _run(command, target, shown, config)
    except (SchemaVersionError, EncryptionKeyError) as exc:
        print(f"m3grpc: database {shown}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # stdout's reader went away, not the database: `m3grpc` ends quietly
    except Exception as exc:  # driver, network, auth, filesystem
        print(f"m3grpc: database {shown}: {describe_cause(exc)}", file=sys.stderr)
        return 1


def _run(command: str, target: str, shown: str, config: str | None) -> int:
    if command == "rotate-key":
        return _rotate_key(target, shown, config)
    if command == "status":
        status = inspect_database(target)
        print(f"database {shown}: {status.describe()}")
        return 0 if status.state is SchemaState.CURRENT else 1
    return _upgrade(target, shown)


def _upgrade(target: str, shown: str) -> int:
    # Alembic is imported only by this command.
    from m3grpc.storage.engine import dispose_engine, open_engine
    from m3grpc.storage.migrate import upgrade_database

    engine = open_engine(target)
    try:
        result = upgrade_database(engine)
    finally:
        dispose_engine(engine)
    if result.before == result.after:
        print(f"database {shown}: {result.after.describe()}; nothing to do")
    else:
        print(f"database {shown}: {result.before.describe()} -> {result.after.describe()}")
    return 0


def _rotate_key(target: str, shown: str, config: str | None) -> int:
    from m3grpc.storage.encryption import KEYS_ENV, load_cipher
    from m3grpc.storage.engine import dispose_engine, open_engine
    from m3grpc.storage.sealed_rows import compact, rotate_responses

    config_path = config or os.environ.get("M3_CONFIG") or None
    cipher = load_cipher(load_config(config_path).encryption.key_file)
    if cipher is None:
        print(
            f"m3grpc: no encryption key: set {KEYS_ENV} or [encryption] key_file in --config",
            file=sys.stderr,
        )
        return 2
    engine = open_engine(target)
    try:
        rotation = rotate_responses(engine, cipher)
        compact(engine)
    finally:
        dispose_engine(engine)
    print(
        f"database {shown}: {rotation.rewritten} responses re-encrypted with key "
        f"{rotation.key_id!r}, {rotation.current} already were"
    )
    return 0
