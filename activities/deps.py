"""What activities need from the outside world, injectable for tests: the database, the
secret box, this installation's id, and (for TerminateWorkflow) a Temporal client."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

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

    def provider(self, target: CloudTarget) -> CloudProvider:
        """The adapter for `target`, built with decrypted credentials (never logged, never returned)."""
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
        with session_scope(self.engine) as session:
            public, _ = ssh_identity(session, self.box)
        return public

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
