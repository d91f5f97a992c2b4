"""The one data converter every client, worker and replayer uses: pydantic models as JSON payloads,
encrypted by the payload codec, failure messages and stack traces included.

Keys come from the secret store (`store.secrets.load_keyring`, current first); the worker and the
API read the same store, so each decodes what the other wrote. This module takes them as an
argument: workflow code may not import the store."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes

from workflows.codec import EncryptionCodec


def data_converter(keys: Sequence[bytes]) -> DataConverter:
    """Pydantic payloads, encrypted with `keys[0]`, decrypted with any of `keys`."""
    return dataclasses.replace(pydantic_data_converter, payload_codec=EncryptionCodec(keys),
                               failure_converter_class=DefaultFailureConverterWithEncodedAttributes)


async def connect_client(address: str, namespace: str = "default", *, keys: Sequence[bytes]) -> Client:
    """A Temporal client that speaks gpuprov's (encrypted) payloads."""
    return await Client.connect(address, namespace=namespace, data_converter=data_converter(keys))
