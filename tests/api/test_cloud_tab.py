"""The studio's Cloud tab (seed: "The Cloud tab stacks a few cards"), section by section: every field
the seed names for a card is in ONE response of its route — the page needs one call per section,
never one per row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncssh
import httpx
import sqlalchemy as sa
from sqlmodel import Session

from providers import registry
from store import instances, spend
from tests.api.conftest import connect_fake


async def test_each_card_of_the_cloud_tab_is_one_response(client: httpx.AsyncClient, engine: sa.Engine,
                                                          ssh_key: str) -> None:
    # Before anything is connected the tab shows just the grid: spend says it is empty and why.
    spend_card = (await client.get("/api/compute/spend", params={"days": 30})).json()
    assert spend_card["empty"] is True and spend_card["reason"]

    conn = await connect_fake(client)
    made = await client.post("/api/compute/instances", json={
        "cloud": "fakecloud", "gpu": "H100", "name": "llama-sft", "ssh_public_keys": [ssh_key]})
    assert made.status_code == 202, made.text
    instance_id = made.json()["id"]
    started = datetime.now(UTC) - timedelta(hours=1)
    with Session(engine) as s:
        instances.update_instance(s, instance_id, status="ready", instance_type="gpu.h100",
                                  price_per_hour=2.5, gpus_found=[{"index": 0, "name": "NVIDIA H100"}],
                                  ready_at=started)
        assert spend.open_interval(s, key="k-cloud-tab", instance_id=instance_id, project="default",
                                   connection_id=conn["id"], provider="fakecloud", rate_per_hour=2.5,
                                   started_at=started, job_type="manual")
    fleet_key = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    fleet = await client.post("/api/compute/fleets", json={"name": "rack-1", "private_key": fleet_key,
                                                           "hosts": ["10.0.0.5", "10.0.0.6"]})
    assert fleet.status_code in (200, 201), fleet.text

    # Connected providers: name, tagline, status dot, instance count (host count for SSH fleets),
    # hourly cost (GPU count for SSH), and the id its Remove link deletes.
    providers = (await client.get("/api/compute/providers")).json()
    assert providers["next_cursor"] is None
    rows = {row["kind"]: row for row in providers["items"]}
    cloud, ssh = rows["cloud"], rows["ssh_fleet"]
    assert (cloud["id"], cloud["name"], cloud["instance_count"], cloud["cost_per_hour"]) == (
        conn["id"], "Fake Cloud", 1, 2.5)
    assert cloud["status"] in ("healthy", "degraded", "pending") and isinstance(cloud["tagline"], str)
    assert (ssh["id"], ssh["host_count"], ssh["gpu_count"], ssh["status"]) == (
        fleet.json()["id"], 2, 0, "pending")
    assert ssh["name"] and ssh["tagline"]

    # Active cloud instances: workload name, GPU · instance type, when it started, $/hr, Terminate (id).
    active = (await client.get("/api/compute/instances", params={"status": "active"})).json()
    assert active["next_cursor"] is None
    [row] = active["items"]
    assert (row["id"], row["name"], row["gpu_label"], row["instance_type"], row["price_per_hour"]) == (
        instance_id, "llama-sft", "1× NVIDIA H100", "gpu.h100", 2.5)
    assert datetime.fromisoformat(row["ready_at"]) <= datetime.now(UTC) and row["uptime_s"] >= 3500

    # Cloud spend: the daily bars for 30 days, by job type and by project.
    spend_card = (await client.get("/api/compute/spend", params={"days": 30})).json()
    assert spend_card["empty"] is False and len(spend_card["daily"]) == 30
    assert sum(d["cost"] for d in spend_card["daily"]) > 2.4  # an hour at $2.50, still running
    assert [b["job_type"] for b in spend_card["by_job_type"]] == ["manual"]
    assert [b["project"] for b in spend_card["by_project"]] == ["default"]

    # Connect a provider: every card with its key, name and tagline in the one grid answer.
    grid = (await client.get("/api/compute/providers/catalog")).json()
    assert grid["next_cursor"] is None
    # Fakes registered for tests (this file's, or a session fixture's of another directory run
    # earlier in this process) have no tagline: the real clouds' cards are what is checked.
    test_only = set(registry._EXTRA)
    cards = {c["key"]: c for c in grid["items"] if c["key"] not in test_only}
    assert {"aws", "azure", "gcp", "runpod", "modal", "nebius", "oci", "vastai", "ssh"} <= set(cards)
    assert all(c["name"] and c["tagline"] and c["credentials"] for c in cards.values())
