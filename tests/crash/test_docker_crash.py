"""SIGKILL a real worker process after the Docker engine accepted a create but before its answer came
back, then restart it: the allocation still ends with exactly one container (its name is the key: the
retry finds the container the killed worker's create made, never created, and starts it), and
terminate leaves nothing in the engine.

Docker's engine is real (the session's, tests/docker_/fixtures.py), not the simulation: the worker
process talks to it through the fault proxy (tests/docker_/fault_proxy.py), whose latency-after
fault lets the create take effect on the engine and holds its answer past the kill. Fixtures as in
tests/crash/test_new_clouds_crash.py; one worker start and one restart."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client

from fakeclouds.faults import FaultRule
from fakeclouds.server import FakeCloudServer
from messages.allocation import AllocateRequest
from messages.enums import Phase
from messages.ids import attempt_key
from providers.docker_ import HOSTS_SETTING, LABEL_INSTALLATION, LABEL_KEY
from store import connections
from store.secrets import SecretBox
from tests.aws.test_crash import client_start
from tests.crash.conftest import (  # noqa: F401 — fixtures, used by name
    WorkerProcess,
    clean_sim,
    installation,
    sim,
    worker_process,
)
from tests.crash.test_worker_crash import TIMING, USER_KEY, until
from tests.docker_.fault_proxy import FACADE, FaultProxy
from tests.workflows.conftest import settled, terminate


def engine(url: str) -> Any:
    """A client of the engine itself (not through the proxy): what `podman ps -a` would show."""
    import docker

    return docker.DockerClient(base_url=url, version="1.41", timeout=30)


def containers(client: Any, label: str) -> list[Any]:
    """Every container (running or not) with `label` (`name=value`)."""
    return list(client.containers.list(all=True, filters={"label": label}))


def hold_create_answers(proxy: FaultProxy, seconds: float) -> None:
    """The next create takes effect on the engine; its answer is held `seconds` (or until its client dies)."""
    rule = FaultRule.build(FACADE, "create", "latency", facades=[FACADE], when="after", seconds=seconds)
    proxy.call(lambda: proxy.book.add(rule))


async def test_kill_after_the_docker_engine_accepted_the_create(
        temporal_client: Client, fault_proxy: FaultProxy, docker_engine_url: str,
        sim: FakeCloudServer, worker_process: WorkerProcess,  # noqa: F811
        installation: str, db_engine: sa.Engine, secret_box: SecretBox) -> None:  # noqa: F811
    # The worker was started with the proxy among the engines a connection may name (the module's
    # fault_proxy fixture is set up, and allows it, before the test's worker starts).
    assert fault_proxy.base_url in worker_process.env[HOSTS_SETTING].split(",")
    with Session(db_engine) as s:
        connection = connections.add_connection(s, secret_box, provider="docker", name="docker",
                                                credentials={"docker_host": fault_proxy.base_url}).id
    # Held well past the adapter's 30 s request timeout: the answer never comes to the killed worker.
    hold_create_answers(fault_proxy, seconds=120)
    allocation_id = f"crash-{uuid.uuid4().hex[:8]}"
    key = attempt_key(allocation_id, 1)
    req = AllocateRequest(allocation_id=allocation_id, connection_id=connection, cloud="docker",
                          spot=False, k3s=False, ssh_public_keys=[USER_KEY], timing=TIMING)
    handle = await client_start(temporal_client, req)

    client = engine(docker_engine_url)
    try:
        await until(lambda: len(containers(client, f"{LABEL_KEY}={key}")) == 1)
        worker_process.kill()
        fault_proxy.call(fault_proxy.book.clear)
        # The proxy sees the killed worker's connection close and drops the answer it held.
        await until(lambda: fault_proxy.holding == 0, "the proxy to drop the killed worker's answer")
        [made] = containers(client, f"{LABEL_KEY}={key}")
        # Created, never started: the killed worker never had the create's answer.
        assert made.status == "created", made.status
        worker_process.start()

        state = await settled(handle)
        assert state.phase == Phase.READY and state.ref is not None, state.error
        [running] = containers(client, f"{LABEL_KEY}={key}")
        assert (running.id, running.name, running.status) == (made.id, key, "running")
        assert state.ref.instance_id == made.id
        # Found, not launched again: the only create the engine was sent for the key is the killed one.
        creates = [t for op, t in fault_proxy.seen if op == "create" and f"name={key}" in t]
        assert len(creates) == 1, creates

        assert (await terminate(temporal_client, allocation_id)).phase == Phase.TERMINATED
        assert containers(client, f"{LABEL_KEY}={key}") == []
        assert containers(client, f"{LABEL_INSTALLATION}={installation}") == []  # nothing of ours
    finally:
        client.close()
