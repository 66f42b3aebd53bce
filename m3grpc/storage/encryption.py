"""Encryption at rest of the responses a round stores (the human's answers).

AES-256-GCM (the `cryptography` package) with a random 96-bit nonce per value;
the associated data binds a ciphertext to its round ID, so a value copied into
another round's row does not decrypt. A stored value is a JSON envelope in the
same `responses` column, with the key ID beside the ciphertext:

    {"_m3_sealed": {"v": 1, "kid": "2026-11", "nonce": "<base64>", "data": "<base64>"}}

Keys are `KEY_ID:BASE64` (32 bytes each), the first listed encrypts and every
listed key decrypts. Rows written before a key was configured stay plaintext
and are read as before; `m3grpc db rotate-key` rewrites every row with the
first key. Without keys nothing is encrypted.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from m3grpc.errors import EncryptionKeyError

ENVELOPE = "_m3_sealed"
KEYS_ENV = "M3_ENCRYPTION_KEYS"
_VERSION = 1
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_AAD_PREFIX = b"m3grpc responses v1\x00"


@dataclass(frozen=True)
class EncryptionKey:
    key_id: str
    secret: bytes

    def __repr__(self) -> str:  # a key never reaches a log through its repr
        return f"EncryptionKey(key_id={self.key_id!r}, secret=***)"


class ResponseCipher:
    """Seals and opens a round's responses document with the configured keys."""

    def __init__(self, keys: list[EncryptionKey]) -> None:
        if not keys:
            raise EncryptionKeyError("no encryption key given")
        ids = [key.key_id for key in keys]
        if len(set(ids)) != len(ids):
            raise EncryptionKeyError(f"encryption key IDs must be unique: {', '.join(ids)}")
        self._current = keys[0]
        self._keys = {key.key_id: AESGCM(key.secret) for key in keys}

    @property
    def current_key_id(self) -> str:
        return self._current.key_id

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._keys)

    def __repr__(self) -> str:
        return f"ResponseCipher(key_ids={list(self._keys)!r})"

    def seal(self, document: Mapping[str, Any], round_id: str) -> dict[str, Any]:
        nonce = os.urandom(12)
        plaintext = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
        data = self._keys[self._current.key_id].encrypt(nonce, plaintext, _aad(round_id))
        return {
            ENVELOPE: {
                "v": _VERSION,
                "kid": self._current.key_id,
                "nonce": base64.b64encode(nonce).decode(),
                "data": base64.b64encode(data).decode(),
            }
        }

    def open(self, stored: Mapping[str, Any], round_id: str) -> dict[str, Any]:
        """The plaintext document of a sealed value (EncryptionKeyError if it cannot be)."""
        envelope = stored[ENVELOPE]
        key_id = str(envelope.get("kid"))
        aead = self._keys.get(key_id)
        if aead is None:
            raise missing_key_error(key_id, round_id)
        try:
            plaintext = aead.decrypt(
                base64.b64decode(envelope["nonce"]),
                base64.b64decode(envelope["data"]),
                _aad(round_id),
            )
        except (InvalidTag, KeyError, ValueError, binascii.Error):
            raise EncryptionKeyError(
                f"the responses of round {round_id} do not decrypt with key {key_id!r}: "
                "a wrong key under that ID, or a value moved from another round",
                metadata={"round_id": round_id, "key_id": key_id},
            ) from None
        document: dict[str, Any] = json.loads(plaintext)
        return document


def is_sealed(stored: object) -> bool:
    return isinstance(stored, Mapping) and ENVELOPE in stored


def sealed_key_id(stored: object) -> str | None:
    """The key ID of a sealed value; None for a plaintext one."""
    if not is_sealed(stored):
        return None
    assert isinstance(stored, Mapping)
    return str(stored[ENVELOPE].get("kid"))


def open_responses(
    stored: Mapping[str, Any] | None, round_id: str, cipher: ResponseCipher | None
) -> Mapping[str, Any] | None:
    """A stored responses value as its plaintext document (plaintext rows as they are)."""
    if stored is None or not is_sealed(stored):
        return stored
    if cipher is None:
        raise missing_key_error(sealed_key_id(stored) or "", round_id)
    return cipher.open(stored, round_id)


def missing_key_error(key_id: str, round_id: str | None = None) -> EncryptionKeyError:
    where = f"round {round_id}'s responses are" if round_id else "stored responses are"
    return EncryptionKeyError(
        f"{where} encrypted with key {key_id!r}, which is not configured "
        f"(set {KEYS_ENV} or [encryption] key_file)",
        metadata={"key_id": key_id, **({"round_id": round_id} if round_id else {})},
    )


def parse_keys(text: str, *, source: str) -> ResponseCipher:
    """Keys from `KEY_ID:BASE64` entries separated by commas, spaces or lines
    (`#` starts a comment line). The message of an error never shows a key."""
    entries = [
        entry
        for line in text.splitlines()
        if not line.lstrip().startswith("#")
        for entry in re.split(r"[,\s]+", line)
        if entry
    ]
    keys = []
    for number, entry in enumerate(entries, start=1):
        key_id, colon, encoded = entry.partition(":")
        if not colon or not _KEY_ID.fullmatch(key_id):
            raise EncryptionKeyError(
                f"{source}: entry {number} is not KEY_ID:BASE64 (a key ID of letters, "
                "digits, '.', '_' or '-')"
            )
        try:
            secret = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            secret = b""
        if len(secret) != 32:
            raise EncryptionKeyError(
                f"{source}: key {key_id!r} must be 32 bytes, base64-encoded "
                "(e.g. `openssl rand -base64 32`)"
            )
        keys.append(EncryptionKey(key_id, secret))
    if not keys:
        raise EncryptionKeyError(f"{source}: no encryption key")
    return ResponseCipher(keys)


def load_cipher(
    key_file: str | os.PathLike[str] | None, env: Mapping[str, str] = os.environ
) -> ResponseCipher | None:
    """The configured keys: $M3_ENCRYPTION_KEYS when set, else the key file; None
    when neither is set (responses are stored in plaintext)."""
    text = env.get(KEYS_ENV, "").strip()
    if text:
        return parse_keys(text, source=KEYS_ENV)
    if key_file is None:
        return None
    try:
        content = Path(key_file).read_text(encoding="utf-8")
    except OSError as exc:
        raise EncryptionKeyError(
            f"cannot read the encryption key file {os.fspath(key_file)}: {exc.strerror}"
        ) from None
    return parse_keys(content, source=os.fspath(key_file))


def _aad(round_id: str) -> bytes:
    return _AAD_PREFIX + round_id.encode()
