"""CLI tests drive the real commands against the real app (TestClient transport), with the
API tests' FakeCloud and a FakeWorkflows that plays the workflows' record writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlmodel import Session

import cli.client
from api.deps import AppDeps
from messages import workflows as wf
from messages.workflows import UpdateRef
from providers import registry
from store import instances
from store.models import Attempt, Instance
from store.secrets import SecretBox
from tests import migrated
from tests.api.conftest import FakeCloud, FakeWorkflows, app_serving

TOKEN = "cli-test-token"


class FakeInstantWorkflows(FakeWorkflows):
    """Allocate makes the machine ready at once (after one capacity failover), writing its row as
    the workflow's own record does; terminate ends it."""

    async def started(self, workflow: str, arg: BaseModel, workflow_id: str) -> None:
        if workflow != wf.ALLOCATION.name:
            return
        req = arg.request  # type: ignore[attr-defined]
        iid = req.allocation_id
        with Session(self.engine) as s:
            instances.insert_instance_if_absent(s, Instance(
                id=iid, project=req.project, name=req.name, provider=req.cloud,
                connection_id=req.connection_id, workflow_id=workflow_id, note="; ".join(req.notes) or None))
            for seq, outcome, reason in [(1, "capacity", "sold out in r1"), (2, "created", None)]:
                instances.record_attempt(s, Attempt(instance_id=iid, seq=seq, provider="fakecloud",
                                                    instance_type="gpu.a10", region=f"r{seq}",
                                                    price_per_hour=0.75, outcome=outcome, reason=reason))
            instances.update_instance(s, iid, status="ready", phase="ready", ssh_host="127.0.0.1",
                                      ssh_port=2201, ssh_user="ubuntu", instance_type="gpu.a10",
                                      offer_region="r2", price_per_hour=0.75,
                                      gpus_found=[{"index": 0, "name": "NVIDIA A10"}])

    async def request_update(self, workflow_id: str, update: UpdateRef[Any]) -> bool:
        """The allocation's `terminate` update: the machine is gone at once."""
        accepted = await super().request_update(workflow_id, update)
        if accepted and update == wf.ALLOCATION.terminate:
            with Session(self.engine) as s:
                iid = workflow_id.removeprefix("allocation-")
                instances.update_instance(s, iid, status="terminated", phase="terminated")
            self.closed.add(workflow_id)
        return accepted


@pytest.fixture
def engine(tmp_path: Any) -> Any:
    eng = migrated.sqlite_engine(tmp_path / "cli.db")
    yield eng
    eng.dispose()


@pytest.fixture
def workflows(engine: sa.Engine) -> FakeInstantWorkflows:
    return FakeInstantWorkflows(engine=engine, box=SecretBox(Fernet.generate_key()))


@pytest.fixture(autouse=True)
def api(monkeypatch: pytest.MonkeyPatch, engine: sa.Engine,
        workflows: FakeInstantWorkflows) -> Iterator[TestClient]:
    registry.register_for_tests(FakeCloud)
    FakeCloud.FAIL = None
    deps = AppDeps(engine=engine, box=workflows.box, api_token=TOKEN, installation_id="inst0001",
                   workflows=workflows)
    app = app_serving(deps)

    def http_client(base_url: str, token: str) -> TestClient:
        return TestClient(app, base_url=base_url, headers={"Authorization": f"Bearer {token}"})

    monkeypatch.setattr(cli.client, "http_client", http_client)
    monkeypatch.setenv("GPUPROV_TOKEN", TOKEN)
    monkeypatch.setenv("GPUPROV_POLL_INTERVAL", "0.01")
    yield TestClient(app)
    registry.unregister_for_tests(FakeCloud.id)


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    """A public key file, as `gpuprov up --ssh-key` reads one."""
    path = tmp_path / "id_ed25519.pub"
    path.write_text(asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode())
    return path
