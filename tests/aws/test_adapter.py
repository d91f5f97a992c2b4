"""The AWS adapter against the simulated EC2: what it makes, and what it leaves (checked through
boto3 itself, as a user would look at the account)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncssh
import pytest

from fakeclouds import aws_moto
from fakeclouds.server import FakeCloudServer
from providers.aws import TAG_INSTALLATION, AwsProvider
from providers.base import (
    AuthError,
    CapacityError,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    OfferQuery,
    QuotaError,
)
from tests.aws.conftest import USER_KEY, adapter, boto, offer, spec
from tests.conformance.checks import WAIT_GONE, WAIT_RUNNING, wait_for
from tests.eventually import eventually, text_of


def _running(st: InstanceStatus | None) -> bool:
    return st is not None and st.state == InstanceState.RUNNING


def _gone(st: InstanceStatus | None) -> bool:
    return st is None or st.state == InstanceState.TERMINATED


def ours(ec2: Any, installation: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(instances not terminated, security groups) carrying the installation's tag, per boto3."""
    tag = [{"Name": f"tag:{TAG_INSTALLATION}", "Values": [installation]}]
    reservations = ec2.describe_instances(Filters=tag)["Reservations"]
    live = [i for r in reservations for i in r["Instances"] if i["State"]["Name"] != "terminated"]
    return live, ec2.describe_security_groups(Filters=tag)["SecurityGroups"]


async def test_offers_are_per_zone_with_gpus_and_spot_below_on_demand(aws: AwsProvider) -> None:
    offers = await aws.offers(OfferQuery(region="us-east-1", gpu="a10g"))
    assert offers and all(o.gpu and o.gpu.name == "A10G" and o.region == "us-east-1" for o in offers)
    assert {o.zone for o in offers} == {"us-east-1a", "us-east-1b", "us-east-1c"}
    g5 = {(o.zone, o.spot): o for o in offers if o.instance_type == "g5.xlarge"}
    assert g5[("us-east-1a", False)].price_per_hour == 1.006  # the shipped price table
    assert g5[("us-east-1a", False)].gpu.memory_gib == pytest.approx(22.4, abs=0.1)  # type: ignore[union-attr]
    assert g5[("us-east-1a", True)].price_per_hour < g5[("us-east-1a", False)].price_per_hour
    assert await aws.offers(OfferQuery(region="eu-west-1")) == []  # no prices there: not offered


async def test_create_opens_ssh_and_ports_and_terminate_leaves_nothing(sim: FakeCloudServer, aws: AwsProvider,
                                                                       ec2: Any) -> None:
    s = spec(aws, ports=[8080, 9000])
    ref = await aws.create(await offer(aws), s)
    live, groups = ours(ec2, aws.installation_id)
    assert [i["InstanceId"] for i in live] == [ref.instance_id]
    assert len(groups) == 1 and s.key in groups[0]["GroupName"]
    assert {p["FromPort"] for p in groups[0]["IpPermissions"]} == {22, 8080, 9000}
    assert [g["GroupId"] for g in live[0]["SecurityGroups"]] == [groups[0]["GroupId"]]

    st = (await wait_for(aws, ref, _running, WAIT_RUNNING))[-1]
    assert st is not None and st.host and st.host.startswith("127.") and st.ssh_port == 22
    async with asyncssh.connect(st.host, port=22, username="ubuntu", client_keys=[USER_KEY],
                                known_hosts=None) as conn:
        out = await conn.run("nvidia-smi --query-gpu=name --format=csv,noheader", check=True)
    assert out.stdout.strip() == "Tesla T4"

    await aws.terminate(ref)
    await wait_for(aws, ref, _gone, WAIT_GONE)
    assert ours(ec2, aws.installation_id) == ([], [])  # asked through boto3: no instance, no group
    assert await aws.list_owned() == []


async def test_get_says_terminating_until_the_security_group_is_gone(sim: FakeCloudServer, aws: AwsProvider,
                                                                     ec2: Any) -> None:
    s = spec(aws)
    ref = await aws.create(await offer(aws), s)
    ec2.terminate_instances(InstanceIds=[ref.instance_id])  # behind gpuprov's back: the group stays
    sim.admin.wait_status(ref.instance_id, "terminated")
    st = await aws.get(ref)
    assert st is not None and st.state == InstanceState.TERMINATING and "security group" in (st.detail or "")
    assert [r.kind for r in await aws.list_owned()] == ["security-group"]  # for the sweep
    await aws.terminate(ref)  # converges: the instance is gone, so the group goes
    assert _gone(await aws.get(ref)) and ours(ec2, aws.installation_id) == ([], [])


async def test_a_group_in_use_cannot_be_deleted_until_its_instance_is_terminated(
        sim: FakeCloudServer, aws: AwsProvider, ec2: Any) -> None:
    from botocore.exceptions import ClientError

    s = spec(aws)
    ref = await aws.create(await offer(aws), s)
    [group] = ours(ec2, aws.installation_id)[1]
    with pytest.raises(ClientError) as refused:
        ec2.delete_security_group(GroupId=group["GroupId"])
    assert refused.value.response["Error"]["Code"] == "DependencyViolation"
    ec2.terminate_instances(InstanceIds=[ref.instance_id])
    sim.admin.wait_status(ref.instance_id, "terminated")
    ec2.delete_security_group(GroupId=group["GroupId"])


async def test_capacity_in_one_zone_names_that_zone_and_the_others(sim: FakeCloudServer,
                                                                   aws: AwsProvider) -> None:
    sim.admin.set_stock("g4dn.xlarge", "us-east-1a", 0)
    a, b = await offer(aws, zone="us-east-1a"), await offer(aws, zone="us-east-1b")
    with pytest.raises(CapacityError) as cap:
        await aws.create(a, spec(aws))
    assert (cap.value.scope.zone, cap.value.scope.instance_type) == ("us-east-1a", "g4dn.xlarge")
    assert cap.value.scope.covers(a) and not cap.value.scope.covers(b)
    assert "InsufficientInstanceCapacity" in cap.value.message and "us-east-1b" in cap.value.message
    assert await aws.create(b, spec(aws))  # the next zone of the same type


def test_insufficient_capacity_is_http_500_which_botocore_retries_unless_told(sim: FakeCloudServer) -> None:
    from botocore.exceptions import ClientError

    def attempts(client: Any) -> int:
        sim.admin.add_fault("aws", "create", "capacity", times=-1)
        try:
            image = aws_moto.image_id("us-east-1", aws_moto.DLAMI_NAME)
            with pytest.raises(ClientError) as exc:
                client.run_instances(ImageId=image, InstanceType="g4dn.xlarge", MinCount=1, MaxCount=1)
            assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
            return int(sim.admin.faults()[0]["hits"])
        finally:
            sim.admin.clear_faults()

    # botocore's own retry loop (one retry here, to keep its backoff short)
    assert attempts(boto(sim, retries={"mode": "standard", "total_max_attempts": 2})) == 2
    assert attempts(boto(sim, retries={"total_max_attempts": 1})) == 1  # the adapter's setting


async def test_quota_and_auth_map_into_the_taxonomy(sim: FakeCloudServer, aws: AwsProvider) -> None:
    sim.admin.configure(quota={"aws": 0})
    with pytest.raises(QuotaError, match="VcpuLimitExceeded") as quota:
        await aws.create(await offer(aws), spec(aws))
    assert (quota.value.scope.region, quota.value.scope.zone) == ("us-east-1", None)
    with pytest.raises(QuotaError, match="MaxSpotInstanceCountExceeded"):
        await aws.create(await offer(aws, spot=True), spec(aws))
    key_id = aws.credentials.reveal()["access_key_id"]
    bad = AwsProvider(AwsProvider.parse_credentials({"access_key_id": key_id, "secret_access_key": "not-it"}),
                      options=aws.options, installation_id=aws.installation_id)
    async with bad:
        with pytest.raises(AuthError, match="SignatureDoesNotMatch"):
            await bad.verify()
        with pytest.raises(AuthError, match="AuthFailure"):
            await bad.list_owned()


async def test_spot_launches_as_spot(sim: FakeCloudServer, aws: AwsProvider, ec2: Any) -> None:
    o = await offer(aws, spot=True)
    ref = await aws.create(o, spec(aws))
    [inst] = [i for r in ec2.describe_instances(InstanceIds=[ref.instance_id])["Reservations"]
              for i in r["Instances"]]
    assert inst["InstanceLifecycle"] == "spot" and inst["Placement"]["AvailabilityZone"] == o.zone
    assert sim.admin.machine(ref.instance_id)["spot"] is True


async def test_a_dead_machine_is_an_error_and_a_stuck_one_stays_pending(sim: FakeCloudServer,
                                                                        aws: AwsProvider) -> None:
    ref = await aws.create(await offer(aws), spec(aws))
    await wait_for(aws, ref, _running, WAIT_RUNNING)
    sim.admin.kill(ref.instance_id)
    st = await aws.get(ref)
    assert st is not None and st.state == InstanceState.ERROR and "killed" in (st.detail or "")

    await sim.admin.aio.add_fault("aws", "create", "stuck_booting")
    stuck = await aws.create(await offer(aws), spec(aws))
    healthy = await aws.create(await offer(aws), spec(aws))  # launched after it, with the same boot delay
    await wait_for(aws, healthy, _running, WAIT_RUNNING)
    st = await aws.get(stuck)
    assert st is not None and st.state == InstanceState.PENDING and st.host is None


async def test_user_data_runs_at_boot(sim: FakeCloudServer, aws: AwsProvider) -> None:
    s = spec(aws, user_data="#!/bin/bash\necho booted > \"$HOME/booted\"\n")
    ref = await aws.create(await offer(aws), s)
    await wait_for(aws, ref, _running, WAIT_RUNNING)
    home = Path(sim.admin.machine(ref.instance_id)["home"])
    await eventually(lambda: text_of(home / "booted"), until=lambda text: text == "booted\n",
                     within=WAIT_RUNNING, what="the user data's boot mark")


async def test_a_custom_image_must_be_an_ami_the_region_has(aws: AwsProvider) -> None:
    with pytest.raises(InvalidRequest, match="AMI id"):
        await aws.create(await offer(aws), spec(aws, image="ubuntu:24.04"))
    with pytest.raises(InvalidRequest, match="InvalidAMIID.NotFound"):
        await aws.create(await offer(aws), spec(aws, image="ami-0123456789abcdef0"))


async def test_list_owned_is_per_installation(sim: FakeCloudServer) -> None:
    async with adapter(sim) as mine, adapter(sim) as theirs:
        a = await mine.create(await offer(mine), spec(mine))
        b = await theirs.create(await offer(theirs), spec(theirs))
        assert [r.instance_id for r in await mine.list_owned()] == [a.instance_id]
        assert [r.instance_id for r in await theirs.list_owned()] == [b.instance_id]
