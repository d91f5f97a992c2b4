"""The one data converter every client, worker and replayer uses: pydantic models as JSON payloads,
encrypted by the payload codec, failure messages and stack traces included.

Keys come from the secret store (`store.secrets.load_keyring`, current first); the worker and the
API read the same store, so each decodes what the other wrote. This module takes them as an
argument: workflow code may not import the store."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

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


def exit_after_client(code: int = 0) -> NoReturn:
    """End a process that made a Temporal client once its work is done, without the interpreter's
    teardown. The SDK's Rust threads outlive the event loop and may call into Python while the
    interpreter tears down, which aborts the process ("Fatal Python error: PyGILState_Release",
    exit 134) after a clean shutdown (temporalio/sdk-python#300; here 1 of 30 SIGTERMs of an idle
    worker.py, 4 of 20 of the bench's bare worker). Nothing is left to tear down by then but the
    logs and the standard streams: they are flushed, then os._exit ends the process with `code`."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # closed, or a pipe whose reader has gone
            stream.flush()
    os._exit(code)
