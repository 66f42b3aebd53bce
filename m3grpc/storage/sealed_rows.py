"""The stored responses as a whole, for encryption at rest: which keys sealed
them (checked when a store opens) and re-encryption with the current key
(`m3grpc db rotate-key`)."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from m3grpc.storage.encryption import (
    ENVELOPE,
    ResponseCipher,
    missing_key_error,
    open_responses,
    sealed_key_id,
)
from m3grpc.storage.engine import read_transaction, write_transaction
from m3grpc.storage.schema import rounds

_BATCH = 200


def stored_key_ids(engine: Engine) -> set[str]:
    """The key IDs of every sealed responses value in the database."""
    key_id = rounds.c.responses[ENVELOPE]["kid"].as_string()
    with read_transaction(engine) as conn:
        return set(conn.execute(sa.select(key_id).where(key_id.is_not(None)).distinct()).scalars())


def check_keys(engine: Engine, cipher: ResponseCipher | None) -> None:
    """EncryptionKeyError, naming the key ID, when a stored value was sealed with
    a key that is not configured: the store refuses to open rather than fail
    rounds one by one later."""
    available = set(cipher.key_ids) if cipher is not None else set()
    missing = sorted(stored_key_ids(engine) - available)
    if missing:
        raise missing_key_error(", ".join(missing))


@dataclass(frozen=True)
class Rotation:
    key_id: str
    rewritten: int  # plaintext or sealed with an older key, now sealed with key_id
    current: int  # already sealed with key_id


def rotate_responses(engine: Engine, cipher: ResponseCipher) -> Rotation:
    """Seal every stored responses value with the cipher's current key, in
    batches of short transactions. Every value must open with the listed keys
    (EncryptionKeyError otherwise, with the batch that failed left as it was).
    Re-running it is harmless; a value written concurrently is sealed already."""
    rewritten = current = 0
    after = ""
    while True:
        with write_transaction(engine) as conn:
            batch = conn.execute(
                sa.select(rounds.c.round_id, rounds.c.responses)
                .where(rounds.c.responses.is_not(None))
                .where(rounds.c.round_id > after)
                .order_by(rounds.c.round_id)
                .limit(_BATCH)
                .with_for_update()
            ).all()
            if not batch:
                return Rotation(cipher.current_key_id, rewritten, current)
            for round_id, stored in batch:
                after = round_id
                if stored is None:  # JSON null
                    continue
                if sealed_key_id(stored) == cipher.current_key_id:
                    current += 1
                    continue
                document = open_responses(stored, round_id, cipher)
                assert document is not None
                conn.execute(
                    rounds.update()
                    .where(rounds.c.round_id == round_id)
                    .values(responses=cipher.seal(document, round_id))
                )
                rewritten += 1


def compact(engine: Engine) -> None:
    """SQLite: rebuild the file and empty the WAL, so freed pages keep no older
    (plaintext or old-key) copy of a rewritten value. PostgreSQL keeps dead row
    versions until VACUUM; run `VACUUM FULL m3_managed_input_rounds` for the same."""
    if engine.dialect.name != "sqlite":
        return
    raw = engine.raw_connection()  # VACUUM cannot run inside a transaction
    try:
        cursor = raw.cursor()
        cursor.execute("VACUUM")
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        cursor.close()
    finally:
        raw.close()
