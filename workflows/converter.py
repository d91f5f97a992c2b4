"""The one data converter every client and worker uses (pydantic models as JSON payloads)."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter

DATA_CONVERTER: DataConverter = pydantic_data_converter


async def connect_client(address: str, namespace: str = "default") -> Client:
    """A Temporal client that speaks gpuprov's payloads."""
    return await Client.connect(address, namespace=namespace, data_converter=DATA_CONVERTER)
