"""EC2 end to end: the adapter launches with InstanceInitiatedShutdownBehavior=terminate (as boto3
reads it back from the simulated account), so a guest shutdown on the machine terminates it."""

from __future__ import annotations

from typing import Any

import asyncssh

from fakeclouds import guest_power
from providers.aws import AwsProvider
from providers.base import InstanceState, InstanceStatus
from tests.aws.conftest import USER_KEY, aws, aws_sim, ec2, offer, sim, spec  # noqa: F401 (fixtures)
from tests.conformance.checks import WAIT_GONE, WAIT_RUNNING, wait_for
from tests.eventually import eventually


def _running(st: InstanceStatus | None) -> bool:
    return st is not None and st.state == InstanceState.RUNNING


def _gone(st: InstanceStatus | None) -> bool:
    return st is None or st.state == InstanceState.TERMINATED


async def test_a_guest_shutdown_terminates_an_instance_gpuprov_launched(aws: AwsProvider,  # noqa: F811
                                                                       ec2: Any) -> None:  # noqa: F811
    ref = await aws.create(await offer(aws), spec(aws))
    got = ec2.describe_instance_attribute(InstanceId=ref.instance_id,
                                          Attribute="instanceInitiatedShutdownBehavior")
    assert got["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    st = (await wait_for(aws, ref, _running, WAIT_RUNNING))[-1]
    assert st is not None and st.host
    async with asyncssh.connect(st.host, port=22, username="ubuntu", client_keys=[USER_KEY],
                                known_hosts=None) as conn:
        found = str((await conn.run("command -v shutdown")).stdout).strip()
        assert found == f"{guest_power.shim_dir()}/shutdown"  # the simulated one, not the host's
        await conn.run("sudo shutdown -h now")

    async def state() -> str:
        found = ec2.describe_instances(InstanceIds=[ref.instance_id])["Reservations"][0]["Instances"][0]
        return str(found["State"]["Name"])

    await eventually(state, until=lambda s: s == "terminated", within=WAIT_GONE,
                     what="the instance terminated (its bill ended)")
    # Its security group stays until gpuprov (or its leak sweep) terminates the allocation.
    await aws.terminate(ref)
    await wait_for(aws, ref, _gone, WAIT_GONE)
