"""Encryption at rest of stored responses, over SQLite and PostgreSQL: with a key
a raw read of the database (SQLite: the file and its WAL) holds no answer, the
store still returns it, keys rotate, and a missing or wrong key is one typed
error."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from m3grpc.api.config import ConfigError, load_config
from m3grpc.devtools.serve_process import ROOT
from m3grpc.errors import EncryptionKeyError, ManagedInputConflict
from m3grpc.storage import SqlExecutionStore
from m3grpc.storage.encryption import (
    ENVELOPE,
    KEYS_ENV,
    ResponseCipher,
    load_cipher,
    parse_keys,
)
from m3grpc.storage.engine import open_engine
from m3grpc.storage.schema import rounds
from m3grpc.storage.sealed_rows import compact, rotate_responses, stored_key_ids
from m3grpc.types import ElicitationResponse
from tests.storage.conftest import ManualClock, make_lease, make_round, new_execution

CANARY = "canary-7f3e9b21-at-rest"


def _key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def _cipher(*entries: tuple[str, str]) -> ResponseCipher:
    return parse_keys(",".join(f"{kid}:{key}" for kid, key in entries), source="test")


def _answer(street: str = CANARY) -> dict[str, ElicitationResponse]:
    return {
        "shipping_address": ElicitationResponse(
            action="accept", content={"street": street, "city": "Pune"}
        )
    }


def _answered_round(store: SqlExecutionStore, clock: ManualClock, key: str = "k-1") -> str:
    execution_id = new_execution(store)
    pending = make_round(execution_id, clock)
    store.managed_input_store.create_round(pending, lease=make_lease(clock))
    store.managed_input_store.submit_responses(pending.round_id, _answer(), idempotency_key=key)
    return pending.round_id


def _raw_responses(database: str) -> list[str]:
    """Every stored responses value as the database's own text."""
    engine = sa.create_engine(
        database if "://" in database else f"sqlite:///{database}", poolclass=sa.pool.NullPool
    )
    try:
        with engine.connect() as conn:
            return [
                str(value)
                for value in conn.execute(
                    sa.text("SELECT CAST(responses AS TEXT) FROM m3_managed_input_rounds")
                ).scalars()
            ]
    finally:
        engine.dispose()


def _sqlite_bytes(database: str) -> bytes:
    files = [Path(database), Path(database + "-wal")]
    return b"".join(path.read_bytes() for path in files if path.exists())


def test_sealed_at_rest_and_read_back(database: str, clock: ManualClock) -> None:
    cipher = _cipher(("k1", _key()))
    store = SqlExecutionStore(database, clock=clock, cipher=cipher)
    try:
        round_id = _answered_round(store, clock)
        record = store.managed_input_store.get_round(round_id)
        assert record.responses == _answer()
        # Replaying the same answer is recognised; another answer under the key is not.
        replay = store.managed_input_store.submit_responses_detailed(
            round_id, _answer(), idempotency_key="k-1"
        )
        assert replay.replayed and replay.record.responses == _answer()
        with pytest.raises(ManagedInputConflict):
            store.managed_input_store.submit_responses(
                round_id, _answer("elsewhere"), idempotency_key="k-1"
            )
        [listed] = store.managed_input_store.list_rounds()
        assert listed.responses == _answer()
        [raw] = _raw_responses(database)
        assert CANARY not in raw and ENVELOPE in raw and '"k1"' in raw
        if "://" not in database:
            assert CANARY.encode() not in _sqlite_bytes(database)
    finally:
        store.close()


def test_rotation_to_a_new_key(database: str, clock: ManualClock) -> None:
    old, new = ("old", _key()), ("new", _key())
    plain = SqlExecutionStore(database, clock=clock)  # written before any key existed
    first = _answered_round(plain, clock)
    plain.close()
    assert any(CANARY in raw for raw in _raw_responses(database))  # the check can fail
    store = SqlExecutionStore(database, clock=clock, cipher=_cipher(old))
    second = _answered_round(store, clock)
    # A plaintext row stays readable once a key is configured.
    assert store.managed_input_store.get_round(first).responses == _answer()
    store.close()

    both = _cipher(new, old)  # the first listed key encrypts
    rotation = rotate_responses(_engine_of(database), both)
    assert (rotation.key_id, rotation.rewritten, rotation.current) == ("new", 2, 0)
    assert rotate_responses(_engine_of(database), both).rewritten == 0  # idempotent
    assert stored_key_ids(_engine_of(database)) == {"new"}
    if "://" not in database:
        compact(_engine_of(database))
        assert CANARY.encode() not in _sqlite_bytes(database)
    assert all(CANARY not in raw for raw in _raw_responses(database))

    only_new = SqlExecutionStore(database, clock=clock, cipher=_cipher(new))
    try:
        for round_id in (first, second):
            assert only_new.managed_input_store.get_round(round_id).responses == _answer()
    finally:
        only_new.close()
    # The retired key alone no longer opens the store.
    with pytest.raises(EncryptionKeyError, match="'new'") as raised:
        SqlExecutionStore(database, clock=clock, cipher=_cipher(old))
    assert raised.value.metadata["key_id"] == "new"


def test_missing_or_wrong_key_is_one_typed_error(database: str, clock: ManualClock) -> None:
    key = ("k1", _key())
    store = SqlExecutionStore(database, clock=clock, cipher=_cipher(key))
    round_id = _answered_round(store, clock)
    store.close()
    # No key at all: the store refuses to open, naming the key ID, never a key.
    with pytest.raises(EncryptionKeyError) as raised:
        SqlExecutionStore(database, clock=clock)
    assert "'k1'" in str(raised.value) and KEYS_ENV in str(raised.value)
    assert key[1] not in str(raised.value)
    # Another key under the same ID: the value does not authenticate.
    wrong = SqlExecutionStore(database, clock=clock, cipher=_cipher(("k1", _key())))
    try:
        with pytest.raises(EncryptionKeyError, match="do not decrypt") as raised:
            wrong.managed_input_store.get_round(round_id)
        assert raised.value.metadata == {"round_id": round_id, "key_id": "k1"}
    finally:
        wrong.close()


def test_a_value_moved_to_another_round_does_not_open(database: str, clock: ManualClock) -> None:
    # The round ID is the associated data: swapping ciphertexts between rows fails.
    store = SqlExecutionStore(database, clock=clock, cipher=_cipher(("k1", _key())))
    try:
        first = _answered_round(store, clock, key="a")
        second = _answered_round(store, clock, key="b")
        engine = store.managed_input_store.engine
        with engine.begin() as conn:
            sealed = conn.execute(
                sa.select(rounds.c.responses).where(rounds.c.round_id == first)
            ).scalar_one()
            conn.execute(
                rounds.update().where(rounds.c.round_id == second).values(responses=sealed)
            )
        with pytest.raises(EncryptionKeyError, match="moved from another round"):
            store.managed_input_store.get_round(second)
        assert store.managed_input_store.get_round(first).responses == _answer()
    finally:
        store.close()


def test_key_parsing_never_shows_a_key(tmp_path: Path) -> None:
    secret = _key()
    cipher = parse_keys(f"# current first\nb:{secret}\n a:{_key()} ", source="f")
    assert (cipher.current_key_id, cipher.key_ids) == ("b", ("b", "a"))
    assert secret not in repr(cipher)
    short = base64.b64encode(b"x" * 16).decode()
    for text, message in (
        (f"k1:{short}", "must be 32 bytes"),
        ("k1", "not KEY_ID:BASE64"),
        (f"bad id:{secret}", "not KEY_ID:BASE64"),
        (f"k1:{secret},k1:{_key()}", "unique"),
        ("# nothing", "no encryption key"),
    ):
        with pytest.raises(EncryptionKeyError, match=message) as raised:
            parse_keys(text, source="f")
        assert secret not in str(raised.value) and short not in str(raised.value)
    # The environment wins over the key file; neither: no encryption.
    key_file = tmp_path / "m3.keys"
    key_file.write_text(f"file:{_key()}\n")
    assert load_cipher(None, {}) is None
    assert load_cipher(key_file, {}).current_key_id == "file"  # type: ignore[union-attr]
    env = {KEYS_ENV: f"env:{_key()}"}
    assert load_cipher(key_file, env).current_key_id == "env"  # type: ignore[union-attr]
    with pytest.raises(EncryptionKeyError, match="cannot read"):
        load_cipher(tmp_path / "missing.keys", {})


def test_keys_are_not_accepted_inline_in_the_config(tmp_path: Path) -> None:
    config = tmp_path / "m3.toml"
    config.write_text(f'[encryption]\nkeys = ["k1:{_key()}"]\n')
    with pytest.raises(ConfigError, match="encryption: keys are not read from the configuration"):
        load_config(config)
    config.write_text('[encryption]\nkey_file = "m3.keys"\n')
    assert load_config(config).encryption.key_file == "m3.keys"


def test_rotate_key_command(tmp_path: Path, clock: ManualClock) -> None:
    database = str(tmp_path / "m3.sqlite")
    old, new = ("old", _key()), ("new", _key())
    store = SqlExecutionStore(database, clock=clock, cipher=_cipher(old))
    _answered_round(store, clock)
    store.close()
    key_file = tmp_path / "m3.keys"
    key_file.write_text(f"{new[0]}:{new[1]}\n{old[0]}:{old[1]}\n")
    config = tmp_path / "m3.toml"
    config.write_text(f'database = "{database}"\n[encryption]\nkey_file = "{key_file}"\n')
    env = {k: v for k, v in os.environ.items() if k != KEYS_ENV}

    def rotate(*args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "m3grpc", "db", "rotate-key", *args],
            cwd=ROOT,
            env={**env, **(extra or {})},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    done = rotate("--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "1 responses re-encrypted with key 'new'" in done.stdout
    assert stored_key_ids(_engine_of(database)) == {"new"}
    for output in (done.stdout, done.stderr):
        assert new[1] not in output and old[1] not in output
    # No key anywhere: exit 2, one line.
    done = rotate("--database", database)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    # A key list without the one the rows use: exit 1, naming the key ID.
    done = rotate("--database", database, extra={KEYS_ENV: f"other:{_key()}"})
    assert done.returncode == 1 and "'new'" in done.stderr, done.stderr


_ENGINES: dict[str, sa.Engine] = {}


def _engine_of(database: str) -> sa.Engine:
    if database not in _ENGINES:
        _ENGINES[database] = open_engine(database)
    return _ENGINES[database]


@pytest.fixture(autouse=True)
def _dispose_engines() -> Iterator[None]:
    yield
    while _ENGINES:
        _ENGINES.popitem()[1].dispose()


def test_check_config_names_key_ids_never_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from m3grpc.api.preflight import preflight

    def line() -> str:
        [found] = [
            line
            for line in preflight(load_config(None), None, check_database=False).lines()
            if "encryption" in line
        ]
        return found

    monkeypatch.delenv(KEYS_ENV, raising=False)
    assert line() == "ok    encryption: off: answers are stored in plaintext"
    new, old = _key(), _key()
    monkeypatch.setenv(KEYS_ENV, f"new:{new},old:{old}")
    assert line() == "ok    encryption: answers sealed with key 'new'; readable with 'new', 'old'"
    monkeypatch.setenv(KEYS_ENV, f"new:{new[:-4]}")
    assert line().startswith("error encryption: ") and new[:-4] not in line()
