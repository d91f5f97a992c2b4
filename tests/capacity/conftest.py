"""Capacity memory tests: the API's fixtures (tests/api/conftest.py: a migrated SQLite store per test,
the real app), the in-memory fake cloud for planning, and the simulated Lambda for a real refusal."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from activities.deps import ActivityDeps
from fakeclouds.server import FakeCloudServer
from providers import registry
from store import connections
from store.secrets import SecretBox
from tests import simclouds
from tests.api.conftest import box, client, engine, fake_cloud, workflows  # noqa: F401 — fixtures
from tests.fakes import FakeInMemoryProvider
from tests.lambda_.conftest import lambda_sim  # noqa: F401 — the simulated Lambda, as tests/lambda_ has it


@pytest.fixture
def fake_registered() -> Iterator[None]:
    """The in-memory `fake` cloud (tests/fakes.py) is known to the registry for the test."""
    registry.register_for_tests(FakeInMemoryProvider)
    yield
    registry.unregister_for_tests(FakeInMemoryProvider.id)


@pytest.fixture
def deps(engine: sa.Engine, box: SecretBox) -> Iterator[ActivityDeps]:  # noqa: F811 — the fixtures
    d = ActivityDeps(engine=engine, box=box, installation_id="capmem01")
    yield d
    d.executor.shutdown(wait=False)


def fake_connection(db: sa.Engine, secrets: SecretBox, project: str = "default") -> str:
    """A new connection of the in-memory `fake` cloud in `project`."""
    with Session(db) as s:
        return connections.add_connection(s, secrets, provider="fake", name="fake",
                                          credentials={"api_key": "good"}, project=project).id


@pytest.fixture
def sim(lambda_sim: FakeCloudServer,  # noqa: F811 — the imported fixture
        deps: ActivityDeps) -> Iterator[FakeCloudServer]:
    """The simulated Lambda, fresh, its endpoint allowed to `deps`."""
    lambda_sim.admin.reset()
    with simclouds.allowed(deps, lambda_sim):
        yield lambda_sim
    lambda_sim.admin.reset()
