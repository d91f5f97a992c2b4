"""What activities need from the outside world, injectable for tests: the database, the
secret box, this installation's id, and (for TerminateWorkflow) a Temporal client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import asyncssh
import sqlalchemy as sa
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.errors import provider_errors
from activities.io import CloudTarget
from providers import registry
from providers.base import CloudProvider
from store.db import session_scope
from store.identity import ssh_identity
from store.models import Connection
from store.secrets import SecretBox, SecretError

T = TypeVar("T")


@dataclass
class ActivityDeps:
    engine: sa.Engine
    box: SecretBox
    installation_id: str
    client: Client | None = None  # set by run_worker
    _ssh_key: asyncssh.SSHKey | None = field(default=None, repr=False)
    _public_key: str | None = field(default=None, repr=False)
    # Database reads/writes and decryption run here, never on the event loop. Sized apart from
    # asyncio's small default pool so 200 concurrent activities do not queue behind 6 threads.
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=32, thread_name_prefix="gpuprov-db"),
        repr=False)

    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking call (SQL, decryption) on the executor."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, partial(fn, *args, **kwargs))

    @classmethod
    def from_settings(cls) -> ActivityDeps:
        from settings import get_settings
        from store.db import default_engine
        from store.identity import installation_id
        from store.secrets import default_box

        s = get_settings()
        return cls(engine=default_engine(), box=default_box(),
                   installation_id=installation_id(s.home, s.installation_id))

    def load_connection(self, connection_id: str) -> Connection:
        with session_scope(self.engine) as session:
            row = session.get(Connection, connection_id)
        if row is None:
            raise ApplicationError(f"connection {connection_id!r} not found", type="ConnectionNotFound",
                                   non_retryable=True)
        return row

    @asynccontextmanager
    async def provider(self, target: CloudTarget) -> AsyncIterator[CloudProvider]:
        """The adapter for `target`, built with decrypted credentials (never logged, never
        returned); the connection is read on a thread so the event loop never blocks on SQL."""
        # Heartbeat while waiting: under load the connection read can queue for a while.
        adapter = await heartbeating(self.blocking(self.build_provider, target), 1.0, "loading connection")
        async with adapter:
            yield adapter

    def build_provider(self, target: CloudTarget) -> CloudProvider:
        conn = self.load_connection(target.connection_id)
        if conn.provider != target.cloud:
            raise ApplicationError(
                f"connection {conn.id!r} is for {conn.provider!r}, not {target.cloud!r}",
                type="InvalidRequest", non_retryable=True)
        try:
            credentials = self.box.open(conn.secret)
        except SecretError as e:
            raise ApplicationError(str(e), type="SecretError", non_retryable=True) from None
        with provider_errors():
            return registry.build(target.cloud, credentials, endpoint=conn.endpoint,
                                  installation_id=self.installation_id)

    def public_key(self) -> str:
        if self._public_key is None:
            with session_scope(self.engine) as session:
                self._public_key, _ = ssh_identity(session, self.box)
        return self._public_key

    def private_key(self) -> asyncssh.SSHKey:
        if self._ssh_key is None:
            with session_scope(self.engine) as session:
                _, private = ssh_identity(session, self.box)
            self._ssh_key = asyncssh.import_private_key(private)
        return self._ssh_key


async def heartbeating(aw: Awaitable[T], every_s: float, detail: str) -> T:
    """Await `aw`, heartbeating meanwhile, so a dead worker is noticed and a cancel arrives."""
    task = asyncio.ensure_future(aw)
    try:
        while True:
            activity.heartbeat(detail)
            done, _ = await asyncio.wait({task}, timeout=every_s)
            if done:
                return task.result()
    finally:
        if not task.done():
            task.cancel()
