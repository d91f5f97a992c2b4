"""What Temporal stores of a real allocation: no instance name, SSH key or request body in clear —
not in the history a client without the codec reads, not in the dev server's database file — while
the worker's codec and the API's codec endpoint decode them."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import sqlalchemy as sa
from temporalio.api.failure.v1 import Failure
from temporalio.client import Client, WorkflowHistory

from api.app import create_app
from api.deps import AppDeps
from api.routers import codec
from messages.allocation import AllocationInput
from store.secrets import SecretBox
from tests.fakes import FakeCloud
from tests.workflows.conftest import settled, start_allocate, terminate

TOKEN = "codec-history-token"


def failures_in(history: WorkflowHistory) -> list[Failure]:
    """Every failure the history records (activity attempts, workflow task failures, causes)."""
    found: list[Failure] = []
    for event in history.events:
        for _, attrs in event.ListFields():
            for _field, value in getattr(attrs, "ListFields", list)():
                if isinstance(value, Failure):
                    f: Failure | None = value
                    while f is not None and f.ByteSize():
                        found.append(f)
                        f = f.cause if f.HasField("cause") else None
    return found


def stored_bytes(db: Path) -> bytes:
    """The dev server's database as it is on disk (WAL mode: recent pages are in the -wal file)."""
    return b"".join(p.read_bytes() for p in (db, db.with_name(db.name + "-wal")) if p.exists())


async def test_temporal_stores_no_name_key_or_request_in_clear(
        temporal_client: Client, temporal_db: Path, fake_cloud: FakeCloud, make_request: Any,
        db_engine: sa.Engine, secret_box: SecretBox) -> None:
    name = f"codec-name-{uuid.uuid4().hex[:8]}"
    user_key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    key_body = user_key.split()[1].encode()
    fake_cloud.add_fault("create", "capacity", scope="fake/r1")  # a failed attempt: failures in the history
    req = make_request(gpu="a10", name=name, ssh_public_keys=[user_key])
    handle = await start_allocate(temporal_client, req)
    await settled(handle)
    await terminate(temporal_client, req.allocation_id)

    plain = await Client.connect(temporal_client.service_client.config.target_host,
                                 namespace=temporal_client.namespace)  # no codec
    history = await plain.get_workflow_handle(handle.id).fetch_history()
    raw = b"".join(e.SerializeToString() for e in history.events)
    for clear in (name.encode(), key_body, b"ssh_public_keys", b'"allocation_id"'):
        assert clear not in raw, clear
    failures = failures_in(history)
    assert failures and all(f.message == "Encoded failure" and not f.stack_trace for f in failures), \
        [f.message for f in failures]

    on_disk = stored_bytes(temporal_db)
    assert handle.id.encode() in on_disk  # the workflow id is readable by design: this is the right file
    assert name.encode() not in on_disk and key_body not in on_disk

    # The worker's converter (the codec, keys from the secret store) reads them back ...
    started = history.events[0].workflow_execution_started_event_attributes.input.payloads
    [inp] = await temporal_client.data_converter.decode(started, [AllocationInput])
    assert inp.request.name == name and inp.request.ssh_public_keys == [user_key]
    messages = [(await temporal_client.data_converter.decode_failure(f)).message for f in failures[:1]]
    assert messages and messages[0] != "Encoded failure"

    # ... and so does the codec endpoint, for a caller with the API's token and nobody else.
    deps = AppDeps(engine=db_engine, box=secret_box, api_token=TOKEN, installation_id="wftest01",
                   workflows=None)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(deps)),
                                 base_url="http://api") as api:
        body = codec.from_protos(started)
        r = await api.post("/codec/decode", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200, r.text
        assert name.encode() in base64.b64decode(r.json()["payloads"][0]["data"])
        r = await api.post("/codec/decode", json=body)
        assert r.status_code == 401 and name not in r.text
