"""Encryption at rest for credentials and SSH private keys (Fernet: AES-128-CBC + HMAC).

The key comes from GPUPROV_SECRET_KEY, or from `$GPUPROV_HOME/secret.key`, generated on
first use with mode 0600. Plaintext secrets exist only in memory, inside activities.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

from settings import home_value


class SecretError(Exception):
    """The ciphertext cannot be decrypted with this key (wrong key or corrupted)."""


def load_or_create_key(home: Path, configured: str | None = None) -> bytes:
    if configured:
        return configured.encode()
    return home_value(home, "secret.key", lambda: Fernet.generate_key().decode()).encode()


class SecretBox:
    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)
        # A separate key for digests, derived from the secret key: the same on every replica.
        self._mac_key = hashlib.sha256(b"gpuprov-digest\0" + key).digest()

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
            raise SecretError("secret cannot be decrypted with the configured key") from e
        return result

    def seal_text(self, text: str) -> bytes:
        return self._fernet.encrypt(text.encode())

    def open_text(self, token: bytes) -> str:
        try:
            return self._fernet.decrypt(token).decode()
        except InvalidToken as e:
            raise SecretError("secret cannot be decrypted with the configured key") from e


def default_box() -> SecretBox:
    from settings import get_settings

    s = get_settings()
    return SecretBox(load_or_create_key(s.home, s.secret_key))
