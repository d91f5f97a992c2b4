"""Encryption at rest for credentials and SSH private keys (Fernet: AES-128-CBC + HMAC), and the
keyring that the Temporal payload codec derives its keys from.

The keyring is the current key, then older ones still accepted for decryption:
- current: GPUPROV_SECRET_KEY, else the first line of `$GPUPROV_HOME/secret.key` (generated on
  first use with mode 0600);
- older: further lines of `secret.key` (only when the key comes from that file), then
  GPUPROV_PREVIOUS_SECRET_KEYS (comma-separated).
Everything new is sealed with the current key; anything sealed with a key of the ring opens.
Plaintext secrets exist only in memory, inside activities.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from settings import home_value

KEY_FILE = "secret.key"


class SecretError(Exception):
    """The ciphertext cannot be decrypted with this key (wrong key or corrupted)."""


class KeyringError(Exception):
    """A configured key is not a Fernet key (the message names where it came from, never its value)."""


def load_keyring(home: Path, configured: str | None = None, previous: str | None = None) -> list[bytes]:
    """The keys, current first: `configured` (GPUPROV_SECRET_KEY) or the lines of home/secret.key,
    then `previous` (GPUPROV_PREVIOUS_SECRET_KEYS, comma-separated). Duplicates are dropped."""
    if configured:
        sourced = [(configured.strip(), "GPUPROV_SECRET_KEY")]
    else:
        text = home_value(home, KEY_FILE, lambda: Fernet.generate_key().decode())
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        sourced = [(line, f"{home / KEY_FILE} line {i + 1}") for i, line in enumerate(lines)]
    older = [k.strip() for k in (previous or "").split(",") if k.strip()]
    sourced += [(k, f"GPUPROV_PREVIOUS_SECRET_KEYS entry {i + 1}") for i, k in enumerate(older)]
    keys: list[bytes] = []
    for key, where in sourced:
        try:
            Fernet(key.encode())
        except ValueError:
            raise KeyringError(f"{where} is not a Fernet key (32 url-safe base64-encoded bytes)") from None
        if key.encode() not in keys:
            keys.append(key.encode())
    return keys


def load_or_create_key(home: Path, configured: str | None = None) -> bytes:
    """The current key (creating home/secret.key if nothing is configured)."""
    return load_keyring(home, configured)[0]


class SecretBox:
    """Seals with the first key, opens with any key of the ring."""

    def __init__(self, key: bytes, previous: Sequence[bytes] = ()) -> None:
        self.keys: tuple[bytes, ...] = (key, *[k for k in previous if k != key])
        self._fernet = MultiFernet([Fernet(k) for k in self.keys])
        # A separate key for digests, derived from the current key: the same on every replica.
        self._mac_key = hashlib.sha256(b"gpuprov-digest\0" + key).digest()

    @classmethod
    def from_ring(cls, keys: Sequence[bytes]) -> SecretBox:
        return cls(keys[0], keys[1:])

    def digest(self, data: bytes) -> str:
        """A keyed digest (HMAC-SHA256) of `data`: compares requests that hold secrets without
        storing anything a guess could be checked against."""
        return hmac.new(self._mac_key, data, hashlib.sha256).hexdigest()

    def seal(self, data: dict[str, Any]) -> bytes:
        return self._fernet.encrypt(json.dumps(data, sort_keys=True).encode())

    def open(self, token: bytes) -> dict[str, Any]:
        try:
            result: dict[str, Any] = json.loads(self._fernet.decrypt(token))
        except InvalidToken as e:
            raise SecretError("secret cannot be decrypted with any configured key") from e
        return result

    def seal_text(self, text: str) -> bytes:
        return self._fernet.encrypt(text.encode())

    def open_text(self, token: bytes) -> str:
        try:
            return self._fernet.decrypt(token).decode()
        except InvalidToken as e:
            raise SecretError("secret cannot be decrypted with any configured key") from e

    def reseal(self, token: bytes) -> bytes:
        """`token` sealed again with the current key (for re-encrypting rows after a rotation)."""
        try:
            return self._fernet.rotate(token)
        except InvalidToken as e:
            raise SecretError("secret cannot be decrypted with any configured key") from e


def default_box() -> SecretBox:
    from settings import get_settings

    s = get_settings()
    return SecretBox.from_ring(load_keyring(s.home, s.secret_key, s.previous_secret_keys))
