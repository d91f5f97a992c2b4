"""The payload codec: every workflow and activity payload (and, through the failure converter, every
failure message and stack trace) is AES-256-GCM encrypted before it reaches Temporal.

Keys are derived (HKDF-SHA256) from the installation's secret keys, current first. Each encrypted
payload names the key it was sealed with (`encryption-key-id`, a digest of the key, not the key),
so after a rotation the previous keys decode month-old histories while new payloads use the
current one. Payloads that are not encrypted (histories from before the codec) pass through.

Runs in clients, workers and the API's codec endpoint; never inside the workflow sandbox.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
NONCE_BYTES = 12
_KEY_ID_SHAPE = re.compile(r"[0-9a-f]{16}")
# Distinct HKDF `info`s: the AES key and the public key id are independent derivations, and neither
# is the Fernet key that encrypts database secrets.
_AES_INFO = b"gpuprov temporal payload codec: aes-256-gcm key v1"
_ID_INFO = b"gpuprov temporal payload codec: key id v1"


class CodecError(Exception):
    """A payload cannot be decrypted: its key is not in the ring, or it was altered."""


def _derive(secret_key: bytes, info: bytes, length: int) -> bytes:
    # A Fernet key is 32 url-safe base64 bytes; HKDF takes the raw bytes.
    raw = base64.urlsafe_b64decode(secret_key)
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(raw)


def key_id(secret_key: bytes) -> str:
    """The id an encrypted payload carries: 16 hex digits, derived from the key, revealing nothing of it."""
    return _derive(secret_key, _ID_INFO, 8).hex()


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over the serialized payload; the key id is authenticated too (associated data)."""

    def __init__(self, secret_keys: Sequence[bytes]) -> None:
        if not secret_keys:
            raise ValueError("the payload codec needs at least one key")
        self._keys = {key_id(k): AESGCM(_derive(k, _AES_INFO, 32)) for k in secret_keys}
        self.current_key_id = key_id(secret_keys[0])

    @property
    def key_ids(self) -> list[str]:
        return list(self._keys)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        kid = self.current_key_id
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._keys[kid].encrypt(nonce, payload.SerializeToString(), kid.encode())
        return Payload(metadata={"encoding": ENCODING, KEY_ID: kid.encode()}, data=nonce + sealed)

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # never encrypted (written before the codec): as it is
        kid = payload.metadata.get(KEY_ID, b"").decode(errors="replace")
        aes = self._keys.get(kid)
        if aes is None and not _KEY_ID_SHAPE.fullmatch(kid):
            raise CodecError("encrypted payload without a valid encryption-key-id")
        if aes is None:
            raise CodecError(f"payload encrypted with key id {kid}, which is not in the keyring "
                             f"(known: {', '.join(self._keys)}); add the key it was written with to "
                             "GPUPROV_PREVIOUS_SECRET_KEYS")
        try:
            plain = aes.decrypt(payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:], kid.encode())
        except InvalidTag:
            raise CodecError(f"payload with key id {kid} failed authentication (altered or truncated)"
                             ) from None
        decoded = Payload()
        decoded.ParseFromString(plain)
        return decoded
