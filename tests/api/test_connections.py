from __future__ import annotations

import httpx
from sqlmodel import Session

from api.deps import WorkflowFailed, WorkflowUnavailable
from store import repo
from store.models import Instance
from tests.api.conftest import GOOD_KEY, FakeWorkflows, connect_fake

URL = "/api/compute/connections"


async def test_connect_verifies_and_never_returns_secrets(client: httpx.AsyncClient,
                                                          workflows: FakeWorkflows) -> None:
    created = await connect_fake(client)
    assert created["status"] == "connected" and created["account"] == "fake-account-7"
    assert created["name"] == "Fake Cloud" and created["provider"] == "fakecloud"
    [(name, arg, wf_id)] = workflows.executes
    assert name == "ConnectWorkflow" and wf_id == f"connect-{created['id']}"
    assert arg.model_dump() == {"connection_id": created["id"]}  # ids, never credentials
    listed = await client.get(URL)
    assert listed.status_code == 200 and [c["id"] for c in listed.json()] == [created["id"]]
    for text in (str(created), listed.text):
        assert GOOD_KEY not in text and "credentials" not in text and "secret" not in text


async def test_bad_credentials_are_a_400_with_the_reason_and_nothing_is_saved(
        client: httpx.AsyncClient) -> None:
    r = await client.post(URL, json={"provider": "fakecloud", "credentials": {"api_key": "nope"}})
    assert r.status_code == 400
    assert "Fake Cloud refused the API key" in r.json()["detail"]
    assert (await client.get(URL)).json() == []


async def test_unknown_provider_and_missing_fields_fail_before_any_workflow(
        client: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    r = await client.post(URL, json={"provider": "nimbus", "credentials": {"api_key": "k"}})
    assert r.status_code == 422 and "nimbus" in r.json()["detail"] and "fakecloud" in r.json()["detail"]
    r = await client.post(URL, json={"provider": "fakecloud", "credentials": {}})
    assert r.status_code == 422 and "api_key" in r.json()["detail"]
    r = await client.post(URL, json={"provider": "fakecloud", "credentials": {"api_key": "k"},
                                     "endpoint": "not a url"})
    assert r.status_code == 422
    assert workflows.executes == [] and (await client.get(URL)).json() == []


async def test_temporal_down_or_workflow_failure_leaves_nothing(client: httpx.AsyncClient,
                                                                workflows: FakeWorkflows) -> None:
    body = {"provider": "fakecloud", "credentials": {"api_key": GOOD_KEY}}
    workflows.fail_with = WorkflowUnavailable("Temporal at x is not reachable")
    r = await client.post(URL, json=body)
    assert r.status_code == 503 and "not reachable" in r.json()["detail"]
    workflows.fail_with = WorkflowFailed("ConnectWorkflow did not finish within 60s", timed_out=True)
    r = await client.post(URL, json=body)
    assert r.status_code == 504 and "did not finish" in r.json()["detail"]
    assert (await client.get(URL)).json() == []


async def test_delete(client: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    created = await connect_fake(client)
    assert (await client.delete(f"{URL}/{created['id']}")).status_code == 204
    assert (await client.get(URL)).json() == []
    r = await client.delete(f"{URL}/{created['id']}")
    assert r.status_code == 404 and created["id"] in r.json()["detail"]
    assert workflows.starts == []


async def test_delete_terminates_live_instances_first(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                                      engine) -> None:  # type: ignore[no-untyped-def]
    conn = await connect_fake(client)
    with Session(engine) as s:
        s.add(Instance(id="live1", provider="fakecloud", connection_id=conn["id"], workflow_id="w",
                       status="ready"))
        s.add(Instance(id="gone1", provider="fakecloud", connection_id=conn["id"], workflow_id="w",
                       status="terminated"))
        s.commit()
    assert (await client.delete(f"{URL}/{conn['id']}")).status_code == 204
    assert [(w, a.allocation_id, i, e) for w, a, i, e in workflows.starts] == [  # type: ignore[attr-defined]
        ("TerminateWorkflow", "live1", "terminate-live1", True)]
    [listed] = (await client.get(URL)).json()
    assert listed["status"] == "removing"  # kept: the terminate activity still needs its credentials
    assert (await client.get("/api/compute/backends/fakecloud/offers")).status_code == 409
    with Session(engine) as s:
        assert repo.get_instance(s, "live1").status == "terminating"  # type: ignore[union-attr]
        repo.update_instance(s, "live1", status="terminated")
    assert (await client.get(URL)).json() == []
