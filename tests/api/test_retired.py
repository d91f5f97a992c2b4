"""GET /api/compute/retired-workflows and `gpuprov retired`: the drain check before a retired workflow
type's code goes — open runs of the type (from Temporal) and live instances started under one."""

from __future__ import annotations

import httpx
import sqlalchemy as sa
from sqlmodel import Session

from api.temporal import OpenRun, WorkflowUnavailable
from messages import workflows as wf
from store.models import Instance
from tests.api.conftest import FakeWorkflows, connect_fake, make_project

URL = "/api/compute/retired-workflows"


async def test_a_fresh_installation_is_drained(client: httpx.AsyncClient) -> None:
    r = await client.get(URL)
    assert r.status_code == 200, r.text
    assert r.json() == {"retired_types": list(wf.RETIRED), "open_runs": [], "instances": [], "drained": True}


async def test_names_live_instances_on_a_retired_workflow_and_its_open_runs(
        client: httpx.AsyncClient, workflows: FakeWorkflows, engine: sa.Engine) -> None:
    conn = await connect_fake(client)
    with Session(engine) as s:
        for iid, status, workflow_id in [("old1", "ready", "allocate-old1"),
                                         ("old2", "terminated", "allocate-old2"),  # ended: no matter
                                         ("new1", "ready", "allocation-new1")]:  # today's workflow
            s.add(Instance(id=iid, provider="fakecloud", connection_id=conn["id"], workflow_id=workflow_id,
                           status=status))
        s.commit()
    workflows.open = [OpenRun("terminate-old1", wf.RETIRED[-1]), OpenRun("allocation-x", wf.ALLOCATION.name)]
    body = (await client.get(URL)).json()
    assert body["drained"] is False
    assert body["instances"] == [{"id": "old1", "project": "default", "status": "ready",
                                  "workflow_id": "allocate-old1"}]
    assert body["open_runs"] == [{"workflow_id": "terminate-old1", "workflow_type": wf.RETIRED[-1]}]


async def test_needs_the_admin_token_and_temporal(client: httpx.AsyncClient,
                                                  workflows: FakeWorkflows) -> None:
    token = await make_project(client, "team-a")
    r = await client.get(URL, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403, r.text
    workflows.fail_with = WorkflowUnavailable("Temporal at x is not reachable")
    r = await client.get(URL)
    assert r.status_code == 503 and "not reachable" in r.json()["detail"]
