"""Every combination the clouds page's capability table marks unsupported is refused with the
cloud's own reason before any workflow starts; every supported one is accepted (202). The table
is tests/test_seed_capabilities.py's SEED."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from fakeclouds import clouds
from providers import registry
from store import connections
from store.secrets import SecretBox
from tests.api.conftest import FakeWorkflows
from tests.conformance.clouds import REAL_ENGINE_CLOUDS
from tests.test_seed_capabilities import SEED

# The user's asks the table has a column for, as the API takes them.
ASKS: dict[str, dict[str, Any]] = {"port": {"ports": [8080]}, "spot": {"spot": True},
                                   "image": {"image": "ubuntu-22.04"}}
# An image in the form of each cloud that names its images one way (Capabilities.image_pattern):
# another form is refused with the request (tests/api/test_planning.py).
IMAGES = {"aws": "ami-0123456789abcdef0", "azure": "Canonical:ubuntu-24_04-lts:server:latest",
          "oci": "ocid1.image.oc1.iad.aaaa", "runpod": "runpod/pytorch:2.4.0",
          "gcp": "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"}


@pytest.mark.parametrize("cloud", sorted(SEED))
async def test_unsupported_asks_are_refused_before_a_workflow_and_supported_ones_start(
        cloud: str, client: httpx.AsyncClient, engine: sa.Engine, box: SecretBox, workflows: FakeWorkflows,
        ssh_key: str) -> None:
    caps, row = registry.capabilities(cloud), SEED[cloud]
    with Session(engine) as session:  # a stored connection: refusals come before the cloud is asked
        # A cloud checked against a real engine (docker) has no facade: its credentials need nothing.
        credentials = {} if cloud in REAL_ENGINE_CLOUDS else clouds.facade(cloud).credentials("a-test-token")
        connections.add_connection(session, box, provider=cloud, name=cloud, credentials=credentials)
    base: dict[str, Any] = {"cloud": cloud, "ssh_public_keys": [ssh_key]}
    if caps.region_required:
        base["region"] = caps.regions[0]
    asks = {**ASKS, "image": {"image": IMAGES[cloud]}} if caps.image_pattern else ASKS
    for ask, fields in asks.items():
        started = len(workflows.starts)
        r = await client.post("/api/compute/instances", json={**base, **fields})
        if getattr(row, ask):
            assert r.status_code == 202, (ask, r.text)
            assert len(workflows.starts) == started + 1
        else:
            assert r.status_code == 422, (ask, r.text)
            why = caps.ports_reason if ask == "port" else caps.display_name  # the cloud's own words
            assert why and why in r.json()["detail"], (ask, r.text)
            assert len(workflows.starts) == started, "refused before any workflow"
    # k3s is on by default everywhere: a cloud that cannot host it still allocates (k3s skipped).
    r = await client.post("/api/compute/instances", json={**base, "k3s": True})
    assert r.status_code == 202, r.text
