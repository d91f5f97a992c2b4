"""The watch's round over a connection of many machines costs the cloud's listing — its pages — plus
one `get` per machine the listing does not show, never one call per machine; and one SSH login per
machine (the idle sample). Both counted where the cloud would count them: at the simulation."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlmodel import Session
from temporalio.testing import ActivityEnvironment

from activities import metrics
from activities.deps import ActivityDeps
from activities.watch import WatchActivities
from messages.allocation import CloudTarget
from messages.enums import AllocationStatus
from messages.watch import WatchInput, WatchReport
from providers.base import InstanceRef, InstanceState, LaunchSpec, OfferQuery, Ownership
from providers.digitalocean import DigitalOceanProvider
from store.models import Instance, utcnow
from store.secrets import SecretBox
from tests import migrated, simclouds
from tests.digitalocean.conftest import Sim
from tests.eventually import eventually

MACHINES = 7
PAGE = 3  # droplets per listing page: 7 machines are 3 pages
PAGES = 3
LIST, GET = "GET /droplets", "GET /droplets/{droplet_id}"


async def test_a_watch_round_costs_the_listings_pages_and_one_login_per_machine(
        sim: Sim, tmp_path: Path, secret_box: SecretBox, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = migrated.sqlite_engine(tmp_path / "app.db")
    deps = ActivityDeps(engine=engine, box=secret_box, installation_id=uuid.uuid4().hex[:8])
    told: dict[str, str] = {}

    async def fake_tell(self: WatchActivities, workflow_id: str, reason: str, *,
                        preempted: bool = False) -> bool:
        told[workflow_id] = reason  # FAKE: no Temporal here; the signal's sending is tested elsewhere
        return True

    monkeypatch.setattr(WatchActivities, "_tell", fake_tell)
    with Session(engine) as s:
        connection_id = simclouds.add_connection(s, secret_box, sim, "digitalocean")
    with simclouds.allowed(deps, sim):
        p = await ActivityEnvironment().run(deps.provider, CloudTarget(connection_id=connection_id,
                                                                       cloud="digitalocean"))
        assert isinstance(p, DigitalOceanProvider)
        p.page_size = PAGE  # the watch's adapter (the worker's cache hands out this one)
        offer = (await p.offers(OfferQuery(spot=False)))[0]
        assert offer.region is not None
        sim.admin.set_stock(offer.instance_type, offer.region, MACHINES, "digitalocean")
        public_key = await deps.blocking(deps.public_key)
        keys = [f"w-{i}-{uuid.uuid4().hex[:6]}" for i in range(MACHINES)]
        refs = [await p.create(offer, LaunchSpec(
            key=k, owner=Ownership(installation_id=deps.installation_id, allocation_id=k),
            ssh_public_keys=[public_key])) for k in keys]

        async def running() -> list[str]:
            listed = await p.list_machines()
            return [s.ref.instance_id for s in listed if s.state == InstanceState.RUNNING and s.host]

        await eventually(running, until=lambda ids: len(ids) == MACHINES, within=30, what="droplets up")
        with Session(engine) as s:
            for ref, k in zip(refs, keys, strict=True):
                st = await p.get(ref)
                assert st is not None and st.host
                s.add(Instance(id=k, provider="digitalocean", connection_id=connection_id,
                               workflow_id=f"wf-{k}", status=AllocationStatus.READY, phase="ready",
                               cloud_instance_id=ref.instance_id, key=k, offer_region=ref.region,
                               ssh_host=st.host, ssh_port=st.ssh_port, ssh_user=st.ssh_user,
                               ready_at=utcnow()))
            s.commit()

        def scraped() -> tuple[float, float]:  # what /metrics says of the watch's adapter calls and losses
            return (metrics.value("gpuprov_watch_cloud_calls_total", cloud="digitalocean"),
                    metrics.value("gpuprov_watch_machines_lost_total", cloud="digitalocean", why="lost"))

        async def one_round() -> tuple[WatchReport, dict[str, int], dict[str, int]]:
            sim.admin.clear_calls()
            calls0, lost0 = scraped()
            report = await ActivityEnvironment().run(WatchActivities(deps).watch_connection,
                                                     WatchInput(connection_id=connection_id))
            counts = sim.admin.call_counts().get("digitalocean", {})
            calls1, lost1 = scraped()
            # The adapter's calls: one listing (however many pages) and a get per machine it missed.
            assert (calls1 - calls0, lost1 - lost0) == (1 + counts.get(GET, 0), len(report.lost))
            return report, counts, sim.admin.ssh_logins()

        report, counts, logins = await one_round()
        assert counts == {LIST: PAGES}, counts  # every page once; no get: the listing settled each
        assert report.lost == {} and told == {}
        assert sorted(logins.values()) == [1] * MACHINES, logins  # the idle sample: one login each
        assert len(report.idle) == MACHINES  # sampled (0 % GPU, no session): idle

        # One machine gone behind the watch's back: the listing no longer shows it, so it alone is
        # asked about (`get`: 404) and its allocation told. Six machines are two pages: 2 + 1 calls.
        gone = refs[0]
        await p.terminate(InstanceRef(provider="digitalocean", instance_id=gone.instance_id, key=keys[0]))
        await eventually(lambda: p.get(gone), until=lambda st: st is None, within=30, what="droplet gone")
        report, counts, logins = await one_round()
        assert counts == {LIST: 2, GET: 1}, counts
        assert list(report.lost) == [keys[0]] and "no longer lists" in told[f"wf-{keys[0]}"]
        assert sorted(logins.values()) == [1] * (MACHINES - 1), logins
        for ref in refs[1:]:
            await p.terminate(ref)
