"""The payload codec on its own: round trip, key rotation, pass-through of payloads written before it,
and failure messages encrypted with the rest."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.exceptions import ApplicationError

from messages.allocation import AllocateRequest
from store.secrets import KeyringError, SecretBox, SecretError, load_keyring
from workflows.codec import ENCODING, KEY_ID, CodecError, EncryptionCodec, key_id
from workflows.converter import data_converter

KEY_A, KEY_B = Fernet.generate_key(), Fernet.generate_key()
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ1cH5Q0DHkE1XOhH9yJvuRjXMbFZ8ZfU2vjoxdtkPgW codec-test"
REQUEST = AllocateRequest(allocation_id="al-codec01", connection_id="cn-1", cloud="fake",
                          name="secret-project-name", ssh_public_keys=[SSH_KEY])


async def encoded(keys: list[bytes], value: object) -> Payload:
    [payload] = await data_converter(keys).encode([value])
    return payload


async def test_round_trip_hides_the_request_and_names_the_key() -> None:
    payload = await encoded([KEY_A], REQUEST)
    raw = payload.SerializeToString()
    for clear in (b"secret-project-name", b"AAAAC3NzaC1lZDI1NTE5", b"al-codec01"):
        assert clear not in raw
    assert payload.metadata["encoding"] == ENCODING
    assert payload.metadata[KEY_ID] == key_id(KEY_A).encode()
    assert key_id(KEY_A).encode() not in KEY_A and len(key_id(KEY_A)) == 16
    [back] = await data_converter([KEY_A]).decode([payload], [AllocateRequest])
    assert back == REQUEST


async def test_each_encoding_differs_though_the_value_is_the_same() -> None:
    one, two = await encoded([KEY_A], REQUEST), await encoded([KEY_A], REQUEST)
    assert one.data != two.data  # a fresh nonce each time: equal inputs are not recognisable


async def test_rotation_old_payloads_decode_new_ones_name_the_new_key_a_dropped_key_is_named() -> None:
    old = await encoded([KEY_A], REQUEST)
    ring = [KEY_B, KEY_A]
    [back] = await data_converter(ring).decode([old], [AllocateRequest])
    assert back == REQUEST
    new = await encoded(ring, REQUEST)
    assert new.metadata[KEY_ID] == key_id(KEY_B).encode()

    with pytest.raises(CodecError) as e:
        await EncryptionCodec([KEY_B]).decode([old])
    assert key_id(KEY_A) in str(e.value) and "GPUPROV_PREVIOUS_SECRET_KEYS" in str(e.value)


async def test_altered_payloads_are_refused() -> None:
    payload = await encoded([KEY_A], REQUEST)
    flipped = payload.data[:-1] + bytes([payload.data[-1] ^ 1])
    tampered = Payload(metadata=dict(payload.metadata), data=flipped)
    with pytest.raises(CodecError, match="failed authentication"):
        await EncryptionCodec([KEY_A]).decode([tampered])
    relabelled = Payload(metadata={**payload.metadata, KEY_ID: b"not-an-id"}, data=payload.data)
    with pytest.raises(CodecError, match="without a valid encryption-key-id"):
        await EncryptionCodec([KEY_A]).decode([relabelled])


async def test_payloads_written_before_the_codec_pass_through() -> None:
    [payload] = data_converter([KEY_A]).payload_converter.to_payloads([REQUEST])  # no codec: as before
    assert payload.metadata["encoding"] == b"json/plain"
    assert (await EncryptionCodec([KEY_A]).decode([payload])) == [payload]
    [back] = await data_converter([KEY_A]).decode([payload], [AllocateRequest])
    assert back == REQUEST


async def test_committed_plain_histories_hold_plain_payloads() -> None:
    """What the replay tests rely on: the committed histories were recorded before the codec."""
    text = next((Path(__file__).parent / "histories" / "v3").glob("allocation-*.json")).read_text()
    assert "anNvbi9wbGFpbg" in text  # base64 of "json/plain"


async def test_failure_message_and_stack_trace_are_encrypted() -> None:
    converter = data_converter([KEY_A])
    failure = Failure()
    try:
        raise ApplicationError("machine secret-project-name refused the key", type="CapacityError")
    except ApplicationError as err:
        await converter.encode_failure(err, failure)
    raw = failure.SerializeToString()
    assert b"secret-project-name" not in raw and b"test_codec.py" not in raw
    assert failure.message == "Encoded failure" and failure.stack_trace == ""
    assert failure.encoded_attributes.metadata["encoding"] == ENCODING
    back = await converter.decode_failure(failure)
    assert isinstance(back, ApplicationError)
    assert back.message == "machine secret-project-name refused the key"


# --------------------------------------------------------------------------- the keyring


def test_keyring_current_first_then_file_lines_then_previous_setting(tmp_path: Path) -> None:
    c = Fernet.generate_key()
    (tmp_path / "secret.key").write_text(f"{KEY_B.decode()}\n{KEY_A.decode()}\n\n")
    assert load_keyring(tmp_path) == [KEY_B, KEY_A]
    assert load_keyring(tmp_path, previous=f" {c.decode()} ,{KEY_A.decode()}") == [KEY_B, KEY_A, c]
    # A configured key wins over the file, whose lines are then not read.
    assert load_keyring(tmp_path, configured=c.decode(), previous=KEY_A.decode()) == [c, KEY_A]


def test_keyring_names_a_bad_key_without_showing_it(tmp_path: Path) -> None:
    with pytest.raises(KeyringError) as e:
        load_keyring(tmp_path, configured=KEY_A.decode(), previous="not-a-key-hunter2")
    assert "GPUPROV_PREVIOUS_SECRET_KEYS entry 1" in str(e.value) and "hunter2" not in str(e.value)


def test_keyring_is_created_once_with_one_key(tmp_path: Path) -> None:
    ring = load_keyring(tmp_path / "home")
    assert len(ring) == 1 and load_keyring(tmp_path / "home") == ring


def test_secret_box_opens_with_any_key_of_the_ring_and_seals_with_the_current() -> None:
    old = SecretBox(KEY_A).seal({"api_key": "k1"})
    rotated = SecretBox.from_ring([KEY_B, KEY_A])
    assert rotated.open(old) == {"api_key": "k1"}
    new = rotated.seal({"api_key": "k2"})
    assert SecretBox(KEY_B).open(new) == {"api_key": "k2"}
    assert SecretBox(KEY_B).open(rotated.reseal(old)) == {"api_key": "k1"}
    with pytest.raises(SecretError):
        SecretBox(KEY_B).open(old)
