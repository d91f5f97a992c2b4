"""Idempotency-Key on the creating POSTs: the same key and body answer with the same resource and
start nothing twice, whatever point the first attempt died at; another body is a 422."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from api import idempotency
from api.temporal import WorkflowUnavailable
from messages.connection import ConnectResult
from store import allocations as started_rows
from store.models import Connection, IdempotencyRecord, Instance
from tests.api.conftest import GOOD_KEY, FakeWorkflows, connect_fake, make_project

URL = "/api/compute/instances"
CONNECTIONS = "/api/compute/connections"


def body(ssh_key: str, **extra: Any) -> dict[str, Any]:
    return {"cloud": "fakecloud", "ssh_public_keys": [ssh_key], **extra}


def keyed(key: str | bytes) -> dict[str, Any]:
    return {"headers": {"Idempotency-Key": key}}


def allocations(workflows: FakeWorkflows) -> list[str]:
    """The AllocationWorkflow runs actually started."""
    return [w for w in workflows.runs if w.startswith("allocation-")]


def rows(engine: sa.Engine) -> list[Instance]:
    with Session(engine) as s:
        return list(s.exec(select(Instance)).all())


async def test_the_same_key_twice_gives_the_same_allocation_and_one_start(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str, engine: sa.Engine) -> None:
    await connect_fake(client)
    first = await client.post(URL, json=body(ssh_key, gpu="A10"), **keyed("order-42"))
    assert first.status_code == 202, first.text
    iid = first.json()["id"]
    again = await client.post(URL, json=body(ssh_key, gpu="A10"), **keyed("order-42"))
    assert again.status_code == 202 and again.json() == first.json()
    assert allocations(workflows) == [f"allocation-{iid}"] and [r.id for r in rows(engine)] == [iid]
    # The id is derived from the key, but the key is nowhere in it, nor in the workflow id.
    assert iid == idempotency.derived_id("instance", "default", "order-42") and "42" not in iid
    assert len(iid) == 12 and iid.isalnum() and iid[0].isalpha()
    # Another key, or the same key in another project, is another allocation.
    other = await client.post(URL, json=body(ssh_key, gpu="A10"), **keyed("order-43"))
    await make_project(client, "vision")
    await connect_fake(client, "vision")
    elsewhere = await client.post(URL, json=body(ssh_key, gpu="A10"),
                                  headers={"X-Project": "vision", "Idempotency-Key": "order-42"})
    assert len({iid, other.json()["id"], elsewhere.json()["id"]}) == 3
    # Without a key, every request is a new allocation.
    plain = [(await client.post(URL, json=body(ssh_key))).json()["id"] for _ in range(2)]
    assert len(set(plain)) == 2 and len(allocations(workflows)) == 5


async def test_a_replay_answers_with_the_allocation_as_it_is_now(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str, engine: sa.Engine) -> None:
    await connect_fake(client)
    iid = (await client.post(URL, json=body(ssh_key), **keyed("k"))).json()["id"]
    with Session(engine) as s:
        row = s.get(Instance, iid)
        assert row is not None
        row.status = "ready"
        s.add(row)
        s.commit()
    # Even once its connection is gone: the answer is the allocation the key made.
    with Session(engine) as s:
        for conn in s.exec(select(Connection)).all():
            s.delete(conn)
        s.commit()
    r = await client.post(URL, json=body(ssh_key), **keyed("k"))
    assert r.status_code == 202 and r.json() == {"id": iid, "status": "ready"}
    assert len(workflows.starts) == 1


async def test_the_same_key_with_another_body_is_a_422(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                                        ssh_key: str, engine: sa.Engine) -> None:
    await connect_fake(client)
    assert (await client.post(URL, json=body(ssh_key, gpu="A10"), **keyed("k1"))).status_code == 202
    r = await client.post(URL, json=body(ssh_key, gpu="H100"), **keyed("k1"))
    assert r.status_code == 422 and r.json()["detail"] == "Idempotency-Key was used for a different request"
    assert len(workflows.starts) == 1 and len(rows(engine)) == 1
    # The body as validated is what counts: defaults written out, ports in any order, are the same.
    assert (await client.post(URL, json=body(ssh_key, gpu="A10", k3s=True, spot=None),
                              **keyed("k1"))).status_code == 202


async def test_a_refused_request_does_not_use_up_its_key(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                                         ssh_key: str, engine: sa.Engine) -> None:
    r = await client.post(URL, json=body(ssh_key), **keyed("k"))
    assert r.status_code == 409  # not connected yet: nothing was done, nothing recorded
    r = await client.post(URL, json=body(ssh_key, spot=True), **keyed("k"))
    assert r.status_code == 422 and "spot" in r.json()["detail"]
    with Session(engine) as s:
        assert s.exec(select(IdempotencyRecord)).all() == []
    await connect_fake(client)
    assert (await client.post(URL, json=body(ssh_key), **keyed("k"))).status_code == 202


@pytest.mark.parametrize("key", ["", "x" * 201, "caf\u00e9".encode(), b"tab\there", b"nul\x7f"])
async def test_a_bad_key_is_a_422(client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str,
                                  key: str | bytes) -> None:
    await connect_fake(client)
    for url, payload in [(URL, body(ssh_key)),
                         (CONNECTIONS, {"provider": "fakecloud", "credentials": {"api_key": GOOD_KEY}})]:
        r = await client.post(url, json=payload, **keyed(key))
        assert r.status_code == 422, (url, key, r.text)
        assert r.json()["errors"][0]["loc"] == ["header", "Idempotency-Key"]
        assert r.json()["detail"].startswith("header.Idempotency-Key: ")
    assert workflows.starts == [] and len(workflows.executes) == 1  # the connect_fake above


async def test_printable_ascii_keys_of_1_to_200_characters_are_taken(
        client: httpx.AsyncClient, ssh_key: str) -> None:
    await connect_fake(client)
    for key in ["a", "x" * 200, "~!@#$%^&*()_+ {}|:\"<>?`-=[]\\;',./",
                "550e8400-e29b-41d4-a716-446655440000"]:
        r = await client.post(URL, json=body(ssh_key), **keyed(key))
        assert r.status_code == 202, (key, r.text)


async def test_api_killed_after_the_start_a_retry_joins_that_run(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str, engine: sa.Engine,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The API dies between starting the workflow and writing the row: no row (yet: the workflow's
    own record would write it), and the retry joins the same run and records the row."""
    await connect_fake(client)

    def killed(*args: Any) -> str:
        raise SystemExit("killed")

    monkeypatch.setattr(started_rows, "record_started", killed)
    with pytest.raises(SystemExit):
        await client.post(URL, json=body(ssh_key), **keyed("k"))
    monkeypatch.undo()
    assert len(allocations(workflows)) == 1 and rows(engine) == []
    r = await client.post(URL, json=body(ssh_key), **keyed("k"))
    assert r.status_code == 202
    assert allocations(workflows) == [f"allocation-{r.json()['id']}"]  # joined, not started again
    assert [(s.once, s.workflow_id) for s in workflows.starts] == [(True, f"allocation-{r.json()['id']}")] * 2
    assert [row.id for row in rows(engine)] == [r.json()["id"]]


async def test_temporal_down_then_up_a_retry_starts_it_once(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str, engine: sa.Engine) -> None:
    await connect_fake(client)
    workflows.fail_with = WorkflowUnavailable("Temporal at x is not reachable")
    r = await client.post(URL, json=body(ssh_key), **keyed("k"))
    assert r.status_code == 503 and rows(engine) == []  # no row without a workflow
    workflows.fail_with = None
    r = await client.post(URL, json=body(ssh_key), **keyed("k"))
    assert r.status_code == 202 and allocations(workflows) == [f"allocation-{r.json()['id']}"]
    assert [row.id for row in rows(engine)] == [r.json()["id"]]


async def test_the_workflow_wrote_its_row_first(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                                ssh_key: str, engine: sa.Engine) -> None:
    """Whichever writes the row first wins; the API's insert leaves the workflow's row alone."""
    conn = await connect_fake(client)

    async def started(workflow: str, arg: Any, workflow_id: str) -> None:
        with Session(engine) as s:
            s.add(Instance(id=arg.request.allocation_id, provider="fakecloud", connection_id=conn["id"],
                           workflow_id=workflow_id, status="ready", phase="ready"))
            s.commit()

    workflows.started = started  # type: ignore[method-assign]
    r = await client.post(URL, json=body(ssh_key), **keyed("k"))
    assert r.status_code == 202 and r.json()["status"] == "ready"
    assert [(row.status, row.phase) for row in rows(engine)] == [("ready", "ready")]


async def test_an_id_that_ran_and_closed_is_never_run_again(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str, engine: sa.Engine) -> None:
    await connect_fake(client)
    iid = idempotency.derived_id("instance", "default", "k")
    workflows.fail_with = WorkflowUnavailable("Temporal at x is not reachable")  # the key is recorded,
    assert (await client.post(URL, json=body(ssh_key), **keyed("k"))).status_code == 503
    workflows.fail_with = None
    workflows.runs.append(f"allocation-{iid}")  # and the run started after all, then closed without
    workflows.closed.add(f"allocation-{iid}")  # recording anything (an operator terminated it)
    r = await client.post(URL, json=body(ssh_key), **keyed("k"))
    assert r.status_code == 409 and "ended before it recorded anything" in r.json()["detail"]
    assert rows(engine) == [] and allocations(workflows) == [f"allocation-{iid}"]


async def test_concurrent_requests_with_one_key_make_one_allocation(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str, engine: sa.Engine) -> None:
    await connect_fake(client)
    answers = await asyncio.gather(*[client.post(URL, json=body(ssh_key), **keyed("same")) for _ in range(8)])
    assert {r.status_code for r in answers} == {202}
    assert len({r.json()["id"] for r in answers}) == 1
    assert len(allocations(workflows)) == 1 and len(rows(engine)) == 1
    # Racing with different bodies: one wins, every other is told the key was used.
    answers = await asyncio.gather(*[client.post(URL, json=body(ssh_key, gpu_count=n), **keyed("race"))
                                     for n in range(1, 7)])
    assert sorted(r.status_code for r in answers) == [202] + [422] * 5
    assert len(allocations(workflows)) == 2 and len(rows(engine)) == 2


async def test_terminate_twice_is_accepted_twice(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                                 ssh_key: str) -> None:
    await connect_fake(client)
    iid = (await client.post(URL, json=body(ssh_key), **keyed("k"))).json()["id"]
    for _ in range(2):
        r = await client.post(f"{URL}/{iid}/terminate")
        assert r.status_code == 202 and r.json() == {"id": iid, "status": "terminating"}


# --------------------------------------------------------------------------- connections


CONNECT = {"provider": "fakecloud", "credentials": {"api_key": GOOD_KEY}}


async def test_connect_with_a_key_twice_gives_the_same_connection(
        client: httpx.AsyncClient, workflows: FakeWorkflows, engine: sa.Engine) -> None:
    first = await client.post(CONNECTIONS, json=CONNECT, **keyed("conn-1"))
    assert first.status_code == 201, first.text
    assert first.json()["id"] == idempotency.derived_id("connection", "default", "conn-1")
    again = await client.post(CONNECTIONS, json=CONNECT, **keyed("conn-1"))
    assert again.status_code == 201 and again.json() == first.json()
    assert len(workflows.executes) == 1  # the saved connection answers; nothing verified twice
    assert [c["id"] for c in (await client.get(CONNECTIONS)).json()["items"]] == [first.json()["id"]]
    # The record keeps no secret: the fingerprint is keyed, not a bare hash of the body.
    with Session(engine) as s:
        [record] = s.exec(select(IdempotencyRecord)).all()
    assert record.scope == "connections:default" and record.resource_id == first.json()["id"]
    assert record.fingerprint != idempotency.fingerprint(
        {**CONNECT, "name": None, "endpoint": None, "ca_bundle": None})
    assert GOOD_KEY not in str(record) and "conn-1" not in str(record)


async def test_connect_with_a_key_and_other_credentials_is_a_422(
        client: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    assert (await client.post(CONNECTIONS, json=CONNECT, **keyed("c"))).status_code == 201
    r = await client.post(CONNECTIONS, json={**CONNECT, "credentials": {"api_key": "other"}}, **keyed("c"))
    assert r.status_code == 422 and r.json()["detail"] == "Idempotency-Key was used for a different request"
    assert len(workflows.executes) == 1


async def test_connect_retried_while_the_first_still_verifies_joins_it(
        client: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    """The API died while ConnectWorkflow ran: the retry attaches to that run and gets its answer."""
    connection_id = idempotency.derived_id("connection", "default", "c")
    workflow_id = f"connect-{connection_id}"
    workflows.results[workflow_id] = ConnectResult(connection_id=connection_id, ok=False,
                                                   reason="still at it")
    r = await client.post(CONNECTIONS, json=CONNECT, **keyed("c"))
    assert r.status_code == 400 and "still at it" in r.json()["detail"]  # that run's answer, not a new one
    assert workflows.runs == []
    # Once that run has closed, a retry verifies again (a refusal is not a resource).
    workflows.closed.add(workflow_id)
    r = await client.post(CONNECTIONS, json=CONNECT, **keyed("c"))
    assert r.status_code == 201 and r.json()["id"] == connection_id and workflows.runs == [workflow_id]


async def test_openapi_documents_the_header_on_every_creating_post(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    for path in ("/api/compute/instances", "/api/compute/connections"):
        [param] = [p for p in spec["paths"][path]["post"]["parameters"] if p["name"] == "Idempotency-Key"]
        assert param["in"] == "header" and param["required"] is False
        schema = param["schema"]["anyOf"][0]
        assert (schema["minLength"], schema["maxLength"]) == (1, 200) and "pattern" in schema
        assert "same key" in param["description"]
