"""A spot interruption on the simulated AWS, through boto3 and the adapter: during EC2's two-minute
notice the instance still runs and its Spot request already reads `instance-terminated-no-capacity`
(`notice`); then the instance is terminated with StateReason `Server.SpotInstanceTermination`
(`preempted`, not merely gone) and stops billing. An on-demand instance never shows either. And the
watch, over rounds: the notice reaches the (FAKE) job workflow once, then the allocation is told the
machine was preempted."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any, cast

import pytest
from sqlmodel import Session
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.deps import ActivityDeps
from activities.watch import WatchActivities
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import CloudTarget
from messages.enums import AllocationStatus
from messages.ids import job_workflow_id
from messages.job import JobStatus, JobType
from messages.watch import WatchInput, WatchReport
from providers.aws import AwsProvider
from providers.base import InstanceRef, InstanceState, InstanceStatus, LaunchSpec, Ownership
from store.models import Instance, Job, utcnow
from store.secrets import SecretBox
from tests import migrated, simclouds
from tests.aws.conftest import offer, spec
from tests.eventually import eventually
from workflows import client_calls

WITHIN = 30.0


async def running(p: AwsProvider, ref: InstanceRef) -> InstanceStatus:
    st: InstanceStatus = await eventually(lambda: p.get(ref), within=WITHIN, what="the instance running",
                                          until=lambda s: s is not None and s.state == InstanceState.RUNNING)
    return st


def described(ec2: Any, instance_id: str) -> dict[str, Any]:
    reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    found: dict[str, Any] = reservations[0]["Instances"][0]
    return found


async def test_a_spot_interruption_shows_its_notice_then_reads_preempted(
        sim: FakeCloudServer, aws: AwsProvider, ec2: Any) -> None:
    ref = await aws.create(await offer(aws, spot=True), spec(aws))
    st = await running(aws, ref)
    assert (st.notice, st.preempted) == (False, False)
    inst = described(ec2, ref.instance_id)
    assert inst["InstanceLifecycle"] == "spot" and inst["SpotInstanceRequestId"].startswith("sir-")
    [req] = ec2.describe_spot_instance_requests(
        SpotInstanceRequestIds=[inst["SpotInstanceRequestId"]])["SpotInstanceRequests"]
    assert (req["State"], req["Status"]["Code"]) == ("active", "fulfilled")
    assert req["InstanceId"] == ref.instance_id

    sim.admin.preempt(ref.instance_id, notice_s=120)  # EC2's two minutes, ended below by the test

    # The notice: the instance still runs, its request is already closed for lack of capacity.
    [req] = ec2.describe_spot_instance_requests(
        SpotInstanceRequestIds=[inst["SpotInstanceRequestId"]])["SpotInstanceRequests"]
    assert (req["State"], req["Status"]["Code"]) == ("closed", "instance-terminated-no-capacity")
    assert described(ec2, ref.instance_id)["State"]["Name"] == "running"
    st = await aws.get(ref)
    assert st is not None and (st.state, st.notice, st.preempted) == (InstanceState.RUNNING, True, False)
    assert st.host  # still reachable
    listed = {s.ref.instance_id: s for s in await aws.list_machines()}
    assert listed[ref.instance_id].notice and not listed[ref.instance_id].preempted

    # The interruption: terminated by EC2, and the adapter says why.
    sim.admin.preempt(ref.instance_id)  # the notice's end
    st = await eventually(lambda: aws.get(ref), within=WITHIN, what="the instance interrupted",
                          until=lambda s: s is not None and s.preempted)
    assert st is not None and not st.notice and st.host is None
    # terminating until terminate removes its security group
    assert st.state in (InstanceState.TERMINATED, InstanceState.TERMINATING)
    inst = described(ec2, ref.instance_id)
    assert inst["State"]["Name"] == "terminated"
    assert inst["StateReason"]["Code"] == "Server.SpotInstanceTermination"
    machine = sim.admin.machine(ref.instance_id)
    assert (machine["status"], machine["detail"]) == ("terminated", "preempted")
    billed = machine["billing_seconds"]
    await asyncio.sleep(0.3)
    assert sim.admin.machine(ref.instance_id)["billing_seconds"] == billed  # EC2 stopped billing it

    await aws.terminate(ref)  # what the lost allocation does: the security group goes too
    st = await aws.get(ref)
    assert st is not None and (st.state, st.preempted) == (InstanceState.TERMINATED, True)
    assert [r for r in sim.admin.side_resources() if r["name"] == aws.group_name(ref.key)] == []


async def test_an_on_demand_instance_makes_no_spot_request_call(sim: FakeCloudServer,
                                                                 aws: AwsProvider) -> None:
    ref = await aws.create(await offer(aws), spec(aws))
    await running(aws, ref)
    sim.admin.clear_calls()
    st = await aws.get(ref)
    listed = await aws.list_machines()
    assert st is not None and not (st.notice or st.preempted)
    assert not any(s.notice or s.preempted for s in listed)
    assert "ec2:DescribeSpotInstanceRequests" not in sim.admin.call_counts().get("aws", {})
    sim.admin.preempt(ref.instance_id)  # an on-demand instance the cloud takes back all the same
    st = await aws.get(ref)
    assert st is not None and not st.preempted  # EC2 says no spot interruption: just terminated
    await aws.terminate(ref)


async def test_the_watch_passes_ec2s_notice_to_the_job_once_then_reports_the_interruption(
        sim: FakeCloudServer, tmp_path: Path, secret_box: SecretBox, monkeypatch: pytest.MonkeyPatch) -> None:
    """One watch round after another over a spot machine a managed job runs on: the notice reaches the
    job's workflow once (however many rounds it lasts), the machine is not lost until EC2 terminates
    it, then its allocation is told it was preempted."""
    engine = migrated.sqlite_engine(tmp_path / "app.db")
    deps = ActivityDeps(engine=engine, box=secret_box, installation_id=uuid.uuid4().hex[:8],
                        client=cast(Client, object()))  # FAKE client: client_calls.signal is recorded
    sent: list[tuple[str, str, Any]] = []

    async def signal(_client: Any, workflow_id: str, ref: Any, arg: Any = None) -> None:
        sent.append((workflow_id, ref.name, arg))  # FAKE: no Temporal; the sending is tested on Lambda

    monkeypatch.setattr(client_calls, "signal", signal)
    with Session(engine) as s:
        connection_id = simclouds.add_connection(s, secret_box, sim, "aws")
    with simclouds.allowed(deps, sim):
        target = CloudTarget(connection_id=connection_id, cloud="aws")
        p = await ActivityEnvironment().run(deps.provider, target)
        assert isinstance(p, AwsProvider)
        key = f"w-{uuid.uuid4().hex[:6]}"
        ref = await p.create(await offer(p, spot=True), LaunchSpec(
            key=key, owner=Ownership(installation_id=deps.installation_id, allocation_id=key),
            ssh_public_keys=[await deps.blocking(deps.public_key)]))
        st = await running(p, ref)
        job_id = f"FAKE-{uuid.uuid4().hex[:6]}"
        with Session(engine) as s:
            s.add(Instance(id=key, provider="aws", connection_id=connection_id, workflow_id=f"wf-{key}",
                           status=AllocationStatus.READY, phase="ready", cloud_instance_id=ref.instance_id,
                           key=key, offer_region=ref.region, ssh_host=st.host, ssh_port=st.ssh_port,
                           ssh_user=st.ssh_user, ready_at=utcnow()))
            s.add(Job(id=job_id, name="fake", type=JobType.TASK, command="train", requested_by="test",
                      workflow_id=job_workflow_id(job_id), status=JobStatus.RUNNING, allocation_id=key))
            s.commit()

        async def one_round() -> WatchReport:
            report: WatchReport = await ActivityEnvironment().run(WatchActivities(deps).watch_connection,
                                                                  WatchInput(connection_id=connection_id))
            return report

        sim.admin.preempt(ref.instance_id, notice_s=30)
        assert (await one_round()).lost == {} and (await one_round()).lost == {}
        notices = [(w, n, a) for w, n, a in sent if n == wf.JOB.preemption_notice.name]
        assert len(notices) == 1 and notices[0][0] == job_workflow_id(job_id)
        notice = notices[0][2]
        assert notice.allocation_id == key and "instance-terminated-no-capacity" in notice.reason

        sim.admin.preempt(ref.instance_id)  # the notice's end
        report = await one_round()
        assert report.lost[key].startswith(f"the cloud preempted machine {ref.instance_id}")
        [lost] = [a for w, n, a in sent if n == wf.ALLOCATION.machine_lost.name]
        assert lost.preempted and lost.reason == report.lost[key]
        await p.terminate(ref)
    await deps.aclose()
