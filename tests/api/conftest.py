"""API tests: the real app over an ASGI transport, a temp SQLite store, an in-memory
FakeCloud adapter and a FakeWorkflows recorder in place of Temporal."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import asyncssh
import httpx
import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from fastapi import FastAPI
from pydantic import BaseModel
from sqlmodel import Session

from api.app import create_app
from api.deps import AppDeps
from api.temporal import OpenRun, WorkflowFailed, WorkflowUnavailable
from messages import workflows as wf
from messages.connection import ConnectRequest, ConnectResult
from messages.workflows import QueryRef, SignalRef, UpdateRef, WorkflowRef
from providers import registry
from providers.base import (
    AuthError,
    Capabilities,
    CloudProvider,
    GpuSpec,
    InstanceRef,
    InstanceStatus,
    LaunchSpec,
    Offer,
    OfferQuery,
    ProviderError,
    rank_offers,
)
from providers.credentials import ApiKeyCredentials
from store import connections
from store.secrets import SecretBox
from tests import migrated

TOKEN = "test-token-123"
GOOD_KEY = "fake-good-api-key-0001"
OTHER_KEY = "fake-good-api-key-0002"  # verifies as another account
ACCOUNTS = {GOOD_KEY: "fake-account-7", OTHER_KEY: "fake-account-8"}  # key -> the identity verify() gives


class FakeCloud(CloudProvider):
    """In-memory cloud: the keys of ACCOUNTS verify; offers come from OFFERS unless FAIL is set."""

    id = "fakecloud"
    api_hosts = ("fake.example",)  # its "documented" API host: endpoints there need no setting
    capabilities = Capabilities(display_name="Fake Cloud", regions=["r1", "r2"], spot=False, ports=False,
                                ports_reason="--port needs a firewall API; Fake Cloud has none")
    credentials_model = ApiKeyCredentials
    OFFERS: ClassVar[list[Offer]] = [
        Offer(provider="fakecloud", instance_type="gpu.h100", gpu=GpuSpec(name="H100", count=1), vcpus=8,
              memory_gib=64, region="r2", price_per_hour=2.5),
        Offer(provider="fakecloud", instance_type="gpu.a10", gpu=GpuSpec(name="A10", count=1), vcpus=4,
              memory_gib=32, region="r1", price_per_hour=0.75),
    ]
    FAIL: ClassVar[ProviderError | None] = None

    async def verify(self) -> str:
        account = ACCOUNTS.get(self.credentials.reveal()["api_key"])
        if account is None:
            raise AuthError("Fake Cloud refused the API key")
        return account

    async def offers(self, query: OfferQuery) -> list[Offer]:
        if self.FAIL is not None:
            raise self.FAIL
        return rank_offers(self.OFFERS, query)

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        raise NotImplementedError

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        raise NotImplementedError

    async def terminate(self, ref: InstanceRef) -> None:
        raise NotImplementedError

    async def list_owned(self) -> list[InstanceRef]:
        return []


@dataclass
class Start:
    workflow: str
    arg: BaseModel
    workflow_id: str
    use_existing: bool
    once: bool


@dataclass
class FakeSchedule:
    """A Schedule as the FAKE gateway keeps it (no run is ever started)."""

    workflow: str
    arg: BaseModel
    workflow_id: str
    every_s: float | None
    cron: str | None
    paused: bool
    note: str


@dataclass
class FakeWorkflows:
    """A recording fake in place of Temporal: it records every call (`starts`, `executes`,
    `updates`; `runs` holds the runs actually started) and runs no workflow. Temporal's id rules in
    memory: a start of an id that is running fails, or joins it (use_existing/once); an id whose run
    closed starts again, unless `once`. ConnectWorkflow is simulated like its activity: decrypt,
    verify, record the outcome on the row."""

    engine: sa.Engine
    box: SecretBox
    starts: list[Start] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)  # workflow ids, one per run started
    executes: list[tuple[str, BaseModel, str]] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)  # ConnectWorkflow answers, by workflow id
    updates: list[tuple[str, str]] = field(default_factory=list)
    closed: set[str] = field(default_factory=set)  # workflow ids whose run has ended
    fail_with: Exception | None = None
    allowed_endpoints: tuple[str, ...] = ()  # the worker's GPUPROV_ALLOWED_ENDPOINTS
    schedules: dict[str, FakeSchedule] = field(default_factory=dict)  # FAKE Temporal Schedules, by id
    open: list[OpenRun] = field(default_factory=list)  # runs a test says are open (open_runs reads them)
    answers: dict[str, Any] = field(default_factory=dict)  # query answers a test gives, by workflow id
    signals: list[tuple[str, str, BaseModel]] = field(default_factory=list)

    async def start(self, ref: WorkflowRef[Any, Any], arg: BaseModel, *, workflow_id: str,
                    use_existing: bool = False, once: bool = False) -> bool:
        if self.fail_with is not None:
            raise self.fail_with
        assert isinstance(arg, ref.input), f"{ref.name} takes {ref.input.__name__}"
        workflow = ref.name
        self.starts.append(Start(workflow, arg, workflow_id, use_existing, once))
        if workflow_id in self.runs:
            if workflow_id in self.closed:
                if once:
                    return False
            elif use_existing or once:
                return True
            else:
                raise RuntimeError(f"workflow {workflow_id} is already running")
        self.runs.append(workflow_id)
        self.closed.discard(workflow_id)
        await self.started(workflow, arg, workflow_id)
        return True

    async def started(self, workflow: str, arg: BaseModel, workflow_id: str) -> None:
        """A run began (subclasses play what its first activities write)."""

    def starts_of(self, workflow: str) -> list[Start]:
        return [s for s in self.starts if s.workflow == workflow]

    async def request_update(self, workflow_id: str, update: UpdateRef[Any]) -> bool:
        if self.fail_with is not None:
            raise self.fail_with
        self.updates.append((workflow_id, update.name))
        return workflow_id not in self.closed

    async def is_open(self, workflow_id: str) -> bool | None:
        if self.fail_with is not None:
            raise self.fail_with
        return workflow_id not in self.closed if workflow_id in self.runs else None

    async def query(self, workflow_id: str, query: QueryRef[Any]) -> Any:
        if self.fail_with is not None:
            raise self.fail_with
        return self.answers.get(workflow_id) if workflow_id in self.runs else None

    async def signal(self, workflow_id: str, signal: SignalRef[Any], arg: BaseModel) -> bool:
        if self.fail_with is not None:
            raise self.fail_with
        self.signals.append((workflow_id, signal.name, arg))
        return workflow_id in self.runs and workflow_id not in self.closed

    async def execute(self, ref: WorkflowRef[Any, Any], arg: BaseModel, *, workflow_id: str,
                      execution_timeout_s: float, attach: bool = False) -> Any:
        self.executes.append((ref.name, arg, workflow_id))
        if self.fail_with is not None:
            raise self.fail_with
        assert ref == wf.CONNECT and isinstance(arg, ConnectRequest)
        if attach and workflow_id in self.results and workflow_id not in self.closed:
            return self.results[workflow_id]  # a run still open (a test put it there): joined
        self.runs.append(workflow_id)
        # Like the real workflow: open the sealed credentials, verify, save only if they work.
        try:
            cloud = registry.build(arg.provider, self.box.open(arg.sealed_credentials.encode()),
                                   options=arg.options, installation_id="inst0001",
                                   allowed_endpoints=self.allowed_endpoints)
            account = await cloud.verify()
        except ProviderError as e:
            result = ConnectResult(connection_id=arg.connection_id, ok=False, reason=e.message)
        else:
            await asyncio.to_thread(self._save, arg, account)
            result = ConnectResult(connection_id=arg.connection_id, ok=True, account=account)
        self.results[workflow_id] = result
        self.closed.add(workflow_id)
        return result

    async def put_schedule(self, schedule_id: str, ref: WorkflowRef[Any, Any], arg: BaseModel, *,
                           workflow_id: str, every_s: float | None = None, cron: str | None = None,
                           paused: bool = False, note: str = "", run_timeout_s: float = 300.0) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        every = every_s if cron is None else None
        self.schedules[schedule_id] = FakeSchedule(ref.name, arg, workflow_id, every, cron, paused, note)

    async def open_runs(self, types: Sequence[str]) -> list[OpenRun]:
        if self.fail_with is not None:
            raise self.fail_with
        return [r for r in self.open if r.workflow_type in types]

    async def delete_schedule(self, schedule_id: str) -> bool:
        if self.fail_with is not None:
            raise self.fail_with
        return self.schedules.pop(schedule_id, None) is not None

    def _save(self, req: ConnectRequest, account: str) -> None:
        with Session(self.engine) as session:
            connections.save_connection(session, connection_id=req.connection_id, provider=req.provider,
                                        name=req.name, secret=req.sealed_credentials.encode(),
                                        endpoint=req.options.endpoint, ca_bundle=req.options.ca_bundle,
                                        account=account, project=req.project)


@pytest.fixture(autouse=True)
def fake_cloud(monkeypatch: pytest.MonkeyPatch) -> Any:
    registry.register_for_tests(FakeCloud)
    FakeCloud.FAIL = None
    yield FakeCloud
    registry.unregister_for_tests(FakeCloud.id)


@pytest.fixture
def engine(tmp_path: Any) -> Any:
    eng = migrated.sqlite_engine(tmp_path / "api.db")
    yield eng
    eng.dispose()


@pytest.fixture
def box() -> SecretBox:
    return SecretBox(Fernet.generate_key())


@pytest.fixture
def workflows(engine: sa.Engine, box: SecretBox) -> FakeWorkflows:
    return FakeWorkflows(engine=engine, box=box)


_app: FastAPI | None = None


def app_serving(deps: AppDeps) -> FastAPI:
    """This test process's app, now serving `deps`: everything in the app reads `app.state.deps`
    per request (api/app.py). An app builds every route's dependencies on its first request, ~0.1 s
    of CPU, which each of 550 API and CLI tests used to pay. Its OpenAPI document is made anew on
    first use, as a new app's is: the clouds registered then are in it. One test, one app: a test
    that wants two at once makes the other with create_app."""
    global _app
    if _app is None:
        _app = create_app(deps)
    _app.state.deps = deps
    _app.openapi_schema = None
    return _app


@asynccontextmanager
async def compute_client(engine: sa.Engine, box: SecretBox, token: str) -> AsyncIterator[httpx.AsyncClient]:
    """The API on `engine` (no Temporal), its /api/compute routes asked with `token`."""
    deps = AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="inst0001",
                   workflows=FakeWorkflows(engine=engine, box=box))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app_serving(deps)),
                                 base_url="http://api/api/compute",
                                 headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


@pytest.fixture
async def client(engine: sa.Engine, box: SecretBox,
                 workflows: FakeWorkflows) -> AsyncIterator[httpx.AsyncClient]:
    deps = AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="inst0001", workflows=workflows)
    transport = httpx.ASGITransport(app=app_serving(deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://api",
                                 headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


@pytest.fixture
def ssh_key() -> str:
    return asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


async def connect_fake(client: httpx.AsyncClient, project: str | None = None,
                       key: str = GOOD_KEY) -> dict[str, Any]:
    """Connect the fake cloud with `key` (in `project`: the admin token's X-Project; default:
    `default`)."""
    headers = {"X-Project": project} if project else {}
    r = await client.post("/api/compute/connections", headers=headers,
                          json={"provider": "fakecloud", "credentials": {"api_key": key}})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


@contextmanager
def statements(engine: sa.Engine) -> Iterator[list[tuple[str, Any]]]:
    """Every SQL statement run on `engine` meanwhile, with its parameters."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        seen.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


async def make_project(client: httpx.AsyncClient, project: str) -> str:
    """Create `project` with the admin token; a new token of it."""
    r = await client.post("/api/projects", json={"id": project})
    assert r.status_code == 201, r.text
    r = await client.post(f"/api/projects/{project}/tokens", json={"label": "test"})
    assert r.status_code == 201, r.text
    token: str = r.json()["token"]
    return token


async def all_items(client: httpx.AsyncClient, url: str, **params: Any) -> list[dict[str, Any]]:
    """Every item of a paginated list, following next_cursor."""
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        r = await client.get(url, params={**params, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        items += r.json()["items"]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return items


__all__ = ["FakeCloud", "FakeWorkflows", "Start", "WorkflowFailed", "WorkflowUnavailable", "all_items",
           "connect_fake"]


def make_unloadable(monkeypatch: pytest.MonkeyPatch, cloud: str, module: str) -> None:
    """`cloud`'s adapter cannot load here, as when its SDK (`module`) is not installed."""
    real = registry.adapter_class

    def adapter_class(name: str) -> Any:
        if name == cloud:
            raise ImportError(f"No module named '{module}'")
        return real(name)

    monkeypatch.setattr(registry, "adapter_class", adapter_class)
