"""Which of the tenant's projects the Nebius adapter launches into, by the state iam.v2 reports for
each (ProjectStatus.project_state): new machines go only to an active project, while every project,
whatever its state, is still listed for the machines gpuprov launched before — one in a project
that has since been parked is not lost from sight."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from fakeclouds import nebius_catalog as cat
from fakeclouds.server import FakeCloudServer
from providers.base import OfferQuery
from tests.nebius.test_adapter import new_provider, spec

NORTH, WEST, CENTRAL = cat.PROJECTS  # the simulation's one active project per region


def parked_first() -> tuple[cat.Project, ...]:
    """eu-north1 gains a parked project listed before its active one (by name); us-central1's only
    project is being purged."""
    parked = cat.Project("project-e00eunorth1parked00", "aaa-parked-eu-north1", "eu-north1",
                         "vpcsubnet-e00eunorth1parkd", state="PARKED")
    return (parked, NORTH, WEST, dataclasses.replace(CENTRAL, state="PURGING"))


@pytest.fixture
async def fresh(server: FakeCloudServer) -> AsyncIterator[None]:
    server.admin.reset()
    yield
    server.admin.reset()


async def test_new_machines_go_only_to_an_active_project(
        server: FakeCloudServer, fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cat, "PROJECTS", parked_first())
    async with new_provider(server) as p:
        said = await p.verify()
        offers = await p.offers(OfferQuery(gpu="H100", spot=False))
        north = next(o for o in offers if o.region == "eu-north1")
        ref = await p.create(north, spec("gp-parked-a1"))
    assert "projects in eu-north1, eu-west1; not used for new machines: " in said
    assert "aaa-parked-eu-north1 (PARKED)" in said and "default-project-us-central1 (PURGING)" in said
    # H100s are in eu-north1 and us-central1 (the second test launches one there): none from the
    # project being purged.
    assert {o.region for o in offers} == {"eu-north1"}
    # The parked project comes first by name; the machine went to the active one.
    assert server.admin.machine(ref.instance_id)["extra"]["project"] == NORTH.id


async def test_a_machine_in_a_project_parked_since_is_still_listed(
        server: FakeCloudServer, fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    async with new_provider(server) as p:
        ref = await p.create(next(o for o in await p.offers(OfferQuery(gpu="H100", spot=False))
                                  if o.region == "us-central1"), spec("gp-parked-a2"))
    monkeypatch.setattr(cat, "PROJECTS", (NORTH, WEST, dataclasses.replace(CENTRAL, state="PARKED")))
    async with new_provider(server) as p:
        owned = await p.list_owned()
        offers = await p.offers(OfferQuery(gpu="H100", spot=False))
        status = await p.get(ref)
    assert ref.instance_id in {r.instance_id for r in owned}
    assert status is not None and status.state != "terminated"
    assert "us-central1" not in {o.region for o in offers}
