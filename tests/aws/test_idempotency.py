"""Idempotent create on AWS: the ClientToken is what makes a lost answer safe. The simulation holds
the launch's answer past the client's timeout and hides new instances from listings (EC2 is
eventually consistent), so the tag lookup alone finds nothing: only the token prevents a second machine."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from botocore.exceptions import ClientError

from fakeclouds import aws_api, aws_moto
from fakeclouds.server import FakeCloudServer
from providers.aws import AwsProvider
from providers.base import InstanceRef, InvalidRequest, LaunchSpec, Offer, Transient
from tests.aws.conftest import adapter, offer, spec
from tests.conformance.checks import WAIT_GONE, wait_for


class ImpatientAwsProvider(AwsProvider):
    """The real adapter with a 2 s read timeout, so a held answer is lost quickly."""

    request_timeout_s: ClassVar[float] = 2.0


class FakeNoTokenAwsProvider(ImpatientAwsProvider):
    """Broken on purpose: launches without a ClientToken (the tag lookup is all it has)."""

    async def _ec2(self, region: str, method: str, **kwargs: Any) -> Any:
        if method == "run_instances":
            kwargs.pop("ClientToken")
        return await super()._ec2(region, method, **kwargs)


def machines_of(sim: FakeCloudServer, key: str) -> list[dict[str, Any]]:
    return [m for m in sim.admin.machines() if m["labels"].get("gpuprov-key") == key]


async def lost_answer_then_retry(sim: FakeCloudServer,
                                 cls: type[AwsProvider]) -> tuple[LaunchSpec, InstanceRef]:
    aws_api.sim_of(sim.engine).listing_delay = 60.0  # the retry's lookup cannot see the first launch
    async with adapter(sim, cls) as p:
        o, s = await offer(p), spec(p)
        await sim.admin.aio.add_fault("aws", "create", "latency", when="after", seconds=6)
        with pytest.raises(Transient) as lost:
            await p.create(o, s)
        assert lost.value.in_doubt, "a timed-out launch may have happened"
        # The retry gets the adapter's usual patience: on a loaded machine a lookup alone may take
        # longer than the 2 s that lost the first answer (new clients, same adapter state).
        p.request_timeout_s = AwsProvider.request_timeout_s  # type: ignore[misc]
        p._clients.clear()
        return s, await p.create(o, s)


async def test_a_lost_launch_answer_retried_makes_one_machine(sim: FakeCloudServer) -> None:
    s, ref = await lost_answer_then_retry(sim, ImpatientAwsProvider)
    made = machines_of(sim, s.key)
    assert [m["id"] for m in made] == [ref.instance_id]


async def test_without_the_client_token_the_same_retry_makes_two(sim: FakeCloudServer) -> None:
    s, _ = await lost_answer_then_retry(sim, FakeNoTokenAwsProvider)
    assert len(machines_of(sim, s.key)) == 2, "the simulation must catch an adapter without ClientToken"


def run(ec2: Any, token: str, instance_type: str = "g4dn.xlarge", zone: str = "us-east-1a") -> Any:
    image = aws_moto.image_id("us-east-1", aws_moto.DLAMI_NAME)
    return ec2.run_instances(ImageId=image, InstanceType=instance_type, MinCount=1, MaxCount=1,
                             ClientToken=token, Placement={"AvailabilityZone": zone})


def test_client_token_edges_as_ec2_answers_them(sim: FakeCloudServer, ec2: Any) -> None:
    first = run(ec2, "edge-token-1")
    again = run(ec2, "edge-token-1")
    assert again["Instances"][0]["InstanceId"] == first["Instances"][0]["InstanceId"]
    assert first["Instances"][0]["State"]["Name"] == "pending"

    with pytest.raises(ClientError) as mismatch:
        run(ec2, "edge-token-1", instance_type="g5.xlarge")
    assert mismatch.value.response["Error"]["Code"] == "IdempotentParameterMismatch"

    # Zonal scope: the same token in another zone is another launch.
    other_zone = run(ec2, "edge-token-1", zone="us-east-1b")
    assert other_zone["Instances"][0]["InstanceId"] != first["Instances"][0]["InstanceId"]

    found = ec2.describe_instances(Filters=[{"Name": "client-token", "Values": ["edge-token-1"]}])
    assert {i["InstanceId"] for r in found["Reservations"] for i in r["Instances"]} == {
        first["Instances"][0]["InstanceId"], other_zone["Instances"][0]["InstanceId"]}

    ec2.terminate_instances(InstanceIds=[first["Instances"][0]["InstanceId"]])
    sim.admin.wait_status(first["Instances"][0]["InstanceId"], "terminated")
    with pytest.raises(ClientError) as terminated:
        run(ec2, "edge-token-1")
    assert terminated.value.response["Error"]["Code"] == "IdempotentInstanceTerminated"


def test_a_token_refused_for_capacity_keeps_its_parameters(sim: FakeCloudServer, ec2: Any) -> None:
    sim.admin.set_stock("g4dn.xlarge", "us-east-1a", 0)
    with pytest.raises(ClientError) as cap:
        run(ec2, "cap-token-1")
    assert cap.value.response["Error"]["Code"] == "InsufficientInstanceCapacity"
    with pytest.raises(ClientError) as other:
        run(ec2, "cap-token-1", instance_type="g5.xlarge")
    assert other.value.response["Error"]["Code"] == "IdempotentParameterMismatch"
    sim.admin.set_stock("g4dn.xlarge", "us-east-1a", 4)
    assert run(ec2, "cap-token-1")["Instances"][0]["State"]["Name"] == "pending"  # same parameters: launches


async def test_a_key_whose_machine_was_terminated_launches_nothing_again(sim: FakeCloudServer,
                                                                        aws: AwsProvider) -> None:
    """The token belongs to a terminated instance: EC2 refuses (IdempotentInstanceTerminated, or a
    parameter mismatch since terminate removed the security group the first launch named)."""
    o: Offer = await offer(aws)
    s = spec(aws)
    ref = await aws.create(o, s)
    await aws.terminate(ref)
    await wait_for(aws, ref, lambda st: st is None or st.state == "terminated", WAIT_GONE)
    with pytest.raises(InvalidRequest, match="Idempotent(InstanceTerminated|ParameterMismatch)"):
        await aws.create(o, s)
    assert [m["id"] for m in machines_of(sim, s.key)] == [ref.instance_id]
    await aws.release(s.key)  # the group the refused retry made
    assert [r for r in await aws.list_owned() if r.key == s.key] == []
