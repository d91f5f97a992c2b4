"""Projects and scoped tokens: a project token sees and touches only its project; another project's
object answers 404 (never 403) on every route; the admin token works on one project at a time."""

from __future__ import annotations

import re
from typing import Any

import asyncssh
import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from api.deps import AppDeps
from store import pools
from store.models import ApiToken, Connection, Fleet, Instance, Policy, ReportedWorkload
from tests.api.conftest import (
    GOOD_KEY,
    OTHER_KEY,
    TOKEN,
    FakeWorkflows,
    app_serving,
    connect_fake,
    make_project,
)

INSTANCES = "/api/compute/instances"


def as_token(client: httpx.AsyncClient, token: str) -> dict[str, Any]:
    return {"headers": {"Authorization": f"Bearer {token}"}}


async def test_admin_makes_projects_and_tokens_shown_once_and_stored_hashed(
        client: httpx.AsyncClient, engine: sa.Engine) -> None:
    r = await client.post("/api/projects", json={"id": "vision"})
    assert r.status_code == 201 and r.json()["id"] == "vision"
    assert (await client.post("/api/projects", json={"id": "vision"})).status_code == 409
    for bad in ("Vision", "a b", "-x", "x" * 64, "naïve"):
        r = await client.post("/api/projects", json={"id": bad})
        assert r.status_code == 422, (bad, r.text)
    made = await client.post("/api/projects/vision/tokens", json={"label": "ci"})
    assert made.status_code == 201
    token = made.json()["token"]
    listed = (await client.get("/api/projects/vision/tokens")).json()["items"]
    assert [t["id"] for t in listed] == [made.json()["id"]] and "token" not in listed[0]
    with Session(engine) as s:
        stored = s.exec(select(ApiToken)).all()
    assert token not in repr([t.model_dump() for t in stored])  # only its hash is kept
    ids = [p["id"] for p in (await client.get("/api/projects")).json()["items"]]
    assert ids == ["default", "vision"]


async def test_a_project_token_works_in_its_project_only(client: httpx.AsyncClient) -> None:
    token = await make_project(client, "vision")
    await make_project(client, "audio")
    mine = as_token(client, token)
    assert (await client.get("/api/compute/connections", **mine)).status_code == 200
    same = {"headers": {**mine["headers"], "X-Project": "vision"}}
    assert (await client.get("/api/compute/connections", **same)).status_code == 200
    other = {"headers": {**mine["headers"], "X-Project": "audio"}}
    r = await client.get("/api/compute/connections", **other)
    assert r.status_code == 404 and r.json()["detail"] == "no project 'audio'"
    # It sees only its own project, and makes neither projects nor tokens.
    assert [p["id"] for p in (await client.get("/api/projects", **mine)).json()["items"]] == ["vision"]
    assert (await client.post("/api/projects", json={"id": "x"}, **mine)).status_code == 403
    assert (await client.post("/api/projects/vision/tokens", json={}, **mine)).status_code == 403
    assert (await client.post("/api/projects/audio/tokens", json={}, **mine)).status_code == 404
    # The admin token names a project that does not exist: 404, nothing done.
    r = await client.get("/api/compute/connections", headers={"X-Project": "nope"})
    assert r.status_code == 404


async def test_a_revoked_token_is_refused_from_the_next_request(client: httpx.AsyncClient) -> None:
    token = await make_project(client, "vision")
    mine = as_token(client, token)
    [listed] = (await client.get("/api/projects/vision/tokens")).json()["items"]
    assert (await client.get(INSTANCES, **mine)).status_code == 200
    r = await client.delete(f"/api/projects/vision/tokens/{listed['id']}", **mine)  # it may revoke itself
    assert r.status_code == 200 and r.json()["revoked_at"] is not None
    assert (await client.get(INSTANCES, **mine)).status_code == 401
    again = await client.delete(f"/api/projects/vision/tokens/{listed['id']}")
    assert again.status_code == 200 and again.json()["revoked_at"] == r.json()["revoked_at"]


async def test_a_project_token_may_revoke_only_itself(client: httpx.AsyncClient) -> None:
    """L3: making a token needs the admin token, so revoking another does too."""
    first = await make_project(client, "vision")
    r = await client.post("/api/projects/vision/tokens", json={"label": "second"})
    second_id, second = r.json()["id"], r.json()["token"]
    [first_id] = [t["id"] for t in (await client.get("/api/projects/vision/tokens")).json()["items"]
                  if t["id"] != second_id]
    r = await client.delete(f"/api/projects/vision/tokens/{second_id}", **as_token(client, first))
    assert r.status_code == 403 and "admin token" in r.json()["detail"]
    assert (await client.get(INSTANCES, **as_token(client, second))).status_code == 200  # still live
    # Another project's token id is still the same 404 as one that does not exist.
    other = await make_project(client, "audio")
    r = await client.delete(f"/api/projects/vision/tokens/{second_id}", **as_token(client, other))
    assert r.status_code == 404
    # Itself: yes; the admin token: any.
    r = await client.delete(f"/api/projects/vision/tokens/{second_id}", **as_token(client, second))
    assert r.status_code == 200 and r.json()["revoked_at"] is not None
    r = await client.delete(f"/api/projects/vision/tokens/{first_id}")
    assert r.status_code == 200 and r.json()["revoked_at"] is not None
    assert (await client.get(INSTANCES, **as_token(client, first))).status_code == 401


# --------------------------------------------------------------------------- every route, a foreign id


async def _project_with_objects(client: httpx.AsyncClient, project: str, ssh_key: str,
                                cloud_key: str) -> dict[str, str]:
    """A project holding a connection (of `cloud_key`: each project its own account, so each may run
    an acceptance run) and an instance; the ids every route's path may name."""
    token = await make_project(client, project)
    mine = as_token(client, token)
    conn = await connect_fake(client, project, key=cloud_key)
    r = await client.post(INSTANCES, json={"cloud": "fakecloud", "ssh_public_keys": [ssh_key]}, **mine)
    assert r.status_code == 202, r.text
    [tok] = (await client.get(f"/api/projects/{project}/tokens")).json()["items"]
    fleet = await client.post("/api/compute/fleets", json=_fleet_body(), **mine)
    assert fleet.status_code == 201, fleet.text
    policy = await client.post("/api/compute/policies", json=_POLICY, **mine)
    assert policy.status_code == 201, policy.text
    workload = await client.put(f"/api/compute/workloads/run-of-{project}", json=_WORKLOAD, **mine)
    assert workload.status_code == 201, workload.text
    job = await client.post("/api/compute/jobs", json=_JOB, **mine)
    assert job.status_code == 202, job.text
    pool = await client.put(f"/api/compute/pools/web-{project}", json=POOL, **mine)
    assert pool.status_code == 202, pool.text
    run = await client.post("/api/compute/acceptance-runs", json={**_ACCEPTANCE, "connection_id": conn["id"]},
                            **mine)
    assert run.status_code == 202, run.text
    return {"run_id": run.json()["id"],
            "token": token, "project": project, "connection_id": conn["id"], "instance_id": r.json()["id"],
            "token_id": tok["id"], "provider": "fakecloud", "fleet_id": fleet.json()["id"],
            "policy_id": policy.json()["id"], "workload_id": workload.json()["id"],
            "job_id": job.json()["id"], "name": f"web-{project}"}


_ACCEPTANCE = {"max_usd": 5, "spend": False}
_JOB = {"name": "j", "type": "task", "command": "true", "requested_by": "tests"}
_WORKLOAD = {"name": "llama-sft", "kind": "sft", "status": "running"}
_POLICY = {"name": "nightly", "when": {"kind": "cron", "expression": "0 3 * * *"},
           "then": {"kind": "pause_queue", "type": "sft"}}


POOL = {"cloud": "fakecloud", "max": 4, "size": 2}
# Routes that name an object by a name the caller chooses in its own project (an upsert): another
# project's object of that name is never touched, the caller's own is made.
# Reported workloads likewise: their ids are the reporter's own names, per project.
OWN_NAMESPACE = {("/api/compute/pools/{name}", "PUT"), ("/api/compute/workloads/{workload_id}", "PUT")}


def _fleet_body() -> dict[str, Any]:
    key = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    return {"name": "rack", "private_key": key, "hosts": ["10.0.0.1"]}


# A valid body for each route that takes one, so a refusal is about the project, not the body.
def _body(path: str, ssh_key: str) -> dict[str, Any] | None:
    return {
        "/api/projects": {"id": "made-by-b"},
        "/api/projects/{project}/tokens": {"label": "b"},
        "/api/compute/connections": {"provider": "fakecloud", "credentials": {"api_key": GOOD_KEY}},
        "/api/compute/instances": {"cloud": "fakecloud", "ssh_public_keys": [ssh_key]},
        "/api/compute/fleets": _fleet_body(),
        "/api/compute/fleets/{fleet_id}": _fleet_body(),
        "/api/compute/fleets/{fleet_id}/trust": {"hosts": ["10.0.0.1"]},
        "/api/compute/policies": _POLICY,
        "/api/compute/policies/{policy_id}": {**_POLICY, "enabled": False},
        "/api/compute/budget": {"daily_usd": 100},
        "/api/compute/workloads/{workload_id}": _WORKLOAD,
        "/api/compute/jobs": _JOB,
        "/api/compute/pools/{name}": {**POOL, "size": 3},
        "/api/compute/acceptance-runs": {**_ACCEPTANCE, "connection_id": "no-such-connection"},
        "/api/compute/acceptance-runs/{run_id}/approve": {"spend": False},
        "/api/compute/acceptance-runs/{run_id}/worker-killed": {"phase": "create"},
    }.get(path)


async def test_every_route_answers_404_for_another_projects_object(
        engine: sa.Engine, box: Any, workflows: FakeWorkflows, ssh_key: str) -> None:
    app = app_serving(AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="inst0001",
                             workflows=workflows))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api",
                                 headers={"Authorization": f"Bearer {TOKEN}"}) as admin:
        a = await _project_with_objects(admin, "alpha", ssh_key, GOOD_KEY)
        b = await _project_with_objects(admin, "beta", ssh_key, OTHER_KEY)
    a_ids = [a[k] for k in ("connection_id", "instance_id", "token_id", "fleet_id", "policy_id",
                            "workload_id", "job_id", "run_id")]
    starts_before, updates_before = len(workflows.starts), len(workflows.updates)

    # Every operation the API publishes (its OpenAPI document): a route added later is walked too.
    routes = [(path, method.upper()) for path, ops in app.openapi()["paths"].items()
              if path.startswith("/api/") for method in ops]
    routes.sort(key=lambda r: r in OWN_NAMESPACE)  # last: they make beta's own object of alpha's name
    assert len(routes) >= 10  # the walk covers the API, not an empty list
    walked = 0
    async with httpx.AsyncClient(transport=transport, base_url="http://api",
                                 headers={"Authorization": f"Bearer {b['token']}"}) as beta:
        for template, method in routes:
            params = re.findall(r"{(\w+)}", template)
            unknown = [p for p in params if p not in a]
            assert not unknown, f"{template}: teach this test what a foreign {unknown} is"
            path = template.format(**{p: a[p] for p in params})
            r = await beta.request(method, path, json=_body(template, ssh_key))
            walked += 1
            names_a_foreign_object = any(p != "provider" for p in params)
            if (template, method) in OWN_NAMESPACE:
                assert r.status_code < 500, (method, template, r.text)
            elif names_a_foreign_object:
                assert r.status_code == 404, (method, template, r.status_code, r.text)
            else:  # lists and creates work in beta's own project and never show alpha's objects
                assert r.status_code < 500, (method, template, r.text)
                assert not any(i in r.text for i in a_ids), (method, template, r.text)
    assert walked == len(routes)

    # Nothing of alpha's was touched: no workflow named its objects, its rows are as they were.
    for start in workflows.starts[starts_before:]:
        assert not any(i in start.workflow_id for i in a_ids), start
    assert not any(any(i in wid for i in a_ids) for wid, _ in workflows.updates[updates_before:])
    with Session(engine) as s:
        conn = s.get(Connection, a["connection_id"])
        inst = s.get(Instance, a["instance_id"])
        tok = s.get(ApiToken, a["token_id"])
        fleet = s.get(Fleet, a["fleet_id"])
        policy = s.get(Policy, a["policy_id"])
        workload = s.get(ReportedWorkload, ("alpha", a["workload_id"]))
    assert fleet is not None and fleet.project == "alpha" and fleet.name == "rack"
    assert conn is not None and conn.status == "connected" and conn.project == "alpha"
    assert inst is not None and inst.status == "provisioning" and inst.project == "alpha"
    assert tok is not None and tok.revoked_at is None
    assert policy is not None and policy.project == "alpha" and policy.enabled
    assert not workflows.schedules[f"gpuprov-policy-alpha-{a['policy_id']}"].paused
    assert workload is not None and (workload.name, workload.status) == ("llama-sft", "running")
    with Session(engine) as s:
        pool = pools.get_pool(s, "alpha", "web-alpha")
    assert pool is not None and pool.size == 2 and pool.status == "active"


@pytest.mark.parametrize("header", ["Alpha", "a b", "../default", ""])
async def test_a_malformed_project_header_is_422(client: httpx.AsyncClient, header: str) -> None:
    r = await client.get(INSTANCES, headers={"X-Project": header})
    assert r.status_code == 422, r.text
