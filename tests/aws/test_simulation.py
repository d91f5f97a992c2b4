"""The simulated EC2 as boto3 sees it: what it refuses, how it signs, what it lists when."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from botocore.exceptions import ClientError

from fakeclouds import aws_api, aws_catalog, aws_moto, aws_sigv4
from fakeclouds.server import FakeCloudServer
from providers.aws_prices import ON_DEMAND
from tests import simclouds
from tests.aws.conftest import boto

IMAGE = aws_moto.image_id("us-east-1", aws_moto.DLAMI_NAME)


def code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def test_catalogue_agrees_with_ec2s_instance_data_and_the_price_table() -> None:
    from moto.ec2.models.instance_types import INSTANCE_TYPES as EC2

    for t in aws_catalog.INSTANCE_TYPES:
        real = EC2[t.name]
        assert t.vcpus == real["VCpuInfo"]["DefaultVCpus"]
        assert t.memory_gib * 1024 == real["MemoryInfo"]["SizeInMiB"]
        [gpu] = real["GpuInfo"]["Gpus"]
        assert t.gpu is not None and (t.gpu.name, t.gpu.count) == (gpu["Name"], gpu["Count"])
        assert all(price == ON_DEMAND[zone[:-1]][t.name] for zone, price in t.prices.items())


def test_refusals(sim: FakeCloudServer, ec2: Any) -> None:
    def launch(**kw: Any) -> Any:
        return ec2.run_instances(**{"ImageId": IMAGE, "InstanceType": "g4dn.xlarge", "MinCount": 1,
                                    "MaxCount": 1, **kw})

    with pytest.raises(ClientError) as exc:
        launch(InstanceType="g9.huge")
    assert code(exc) == "InvalidParameterValue"
    with pytest.raises(ClientError) as exc:
        launch(ImageId="ami-0000000000000000f")
    assert code(exc) == "InvalidAMIID.NotFound"
    with pytest.raises(ClientError) as exc:
        launch(ImageId="ubuntu")
    assert code(exc) == "InvalidAMIID.Malformed"
    with pytest.raises(ClientError) as exc:
        launch(Placement={"AvailabilityZone": "us-east-1f"})  # a real zone, not sold here
    assert code(exc) == "Unsupported"
    with pytest.raises(ClientError) as exc:
        launch(KeyName="nobody")
    assert code(exc) == "InvalidKeyPair.NotFound"
    with pytest.raises(ClientError) as exc:
        ec2.describe_instances(InstanceIds=["999999999"])
    assert code(exc) == "InvalidInstanceID.Malformed"
    with pytest.raises(ClientError) as exc:
        ec2.terminate_instances(InstanceIds=["i-0123456789abcdef0"])
    assert code(exc) == "InvalidInstanceID.NotFound"
    assert sim.admin.machines() == []


def test_signatures_are_checked(sim: FakeCloudServer) -> None:
    sts = boto(sim, "sts")
    assert sts.get_caller_identity()["Account"] == aws_api.sim_of(sim.engine).moto.account_id
    import boto3

    wrong = boto3.client("sts", region_name="us-east-1", endpoint_url=simclouds.endpoint(sim, "aws"),
                         aws_access_key_id=simclouds.credentials(sim, "aws")["access_key_id"],
                         aws_secret_access_key="not-the-secret")  # the right key id, another secret
    with pytest.raises(ClientError) as exc:
        wrong.get_caller_identity()
    assert code(exc) == "SignatureDoesNotMatch"

    def signed(body: bytes, sent: bytes) -> None:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        req = AWSRequest(method="POST", url="http://h:1/aws", data=body, headers={"Content-Type": "x"})
        SigV4Auth(Credentials("AKIDSIMULATED0001", "s3cret"), "ec2", "us-east-1").add_auth(req)
        headers = {k.lower(): v for k, v in req.headers.items()}
        aws_sigv4.verify(method="POST", url="http://h:1/aws", headers=headers, body=sent,
                         access_key_id="AKIDSIMULATED0001", secret="s3cret", now=dt.datetime.now(dt.UTC))

    signed(b"Action=DescribeInstances", b"Action=DescribeInstances")
    with pytest.raises(aws_sigv4.SignatureError, match="does not match"):
        signed(b"Action=DescribeInstances", b"Action=TerminateInstances")  # a body changed on the way


def test_new_instances_appear_in_listings_late_and_terminated_ones_age_out(sim: FakeCloudServer,
                                                                          ec2: Any) -> None:
    state = aws_api.sim_of(sim.engine)
    state.listing_delay = 60.0
    iid = ec2.run_instances(ImageId=IMAGE, InstanceType="g4dn.xlarge", MinCount=1, MaxCount=1,
                            ClientToken="late-1")["Instances"][0]["InstanceId"]
    listed = ec2.describe_instances(Filters=[{"Name": "client-token", "Values": ["late-1"]}])
    assert listed["Reservations"] == []  # eventually consistent: not listed yet
    assert ec2.describe_instances(InstanceIds=[iid])["Reservations"]  # by id it is there
    state.listing_delay = 0.0
    assert ec2.describe_instances(Filters=[{"Name": "client-token", "Values": ["late-1"]}])["Reservations"]

    ec2.terminate_instances(InstanceIds=[iid])
    sim.admin.wait_status(iid, "terminated")
    assert ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]["State"]["Name"] == \
        "terminated"
    again = ec2.terminate_instances(InstanceIds=[iid])["TerminatingInstances"][0]
    assert again["CurrentState"]["Name"] == "terminated"
    state.terminated_visible_s = 0.0  # EC2 drops terminated instances after about an hour
    assert ec2.describe_instances()["Reservations"] == []
    with pytest.raises(ClientError) as exc:
        ec2.describe_instances(InstanceIds=[iid])
    assert code(exc) == "InvalidInstanceID.NotFound"


def test_spot_prices_and_offerings_follow_the_catalogue(sim: FakeCloudServer, ec2: Any) -> None:
    history = ec2.describe_spot_price_history(InstanceTypes=["g5.xlarge"], ProductDescriptions=["Linux/UNIX"],
                                              StartTime=dt.datetime.now(dt.UTC))["SpotPriceHistory"]
    assert {h["AvailabilityZone"] for h in history} == set(aws_catalog.zones_of("us-east-1"))
    assert all(float(h["SpotPrice"]) < ON_DEMAND["us-east-1"]["g5.xlarge"] for h in history)
    offered = ec2.describe_instance_type_offerings(LocationType="availability-zone", Filters=[
        {"Name": "instance-type", "Values": ["p5.*"]}])["InstanceTypeOfferings"]
    assert {(o["InstanceType"], o["Location"]) for o in offered} == {
        ("p5.48xlarge", z) for z in aws_catalog.zones_of("us-east-1")}
