"""The simulation's log of remote calls, by name: what the conformance suite pins per adapter."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from fakeclouds import aws_api, lambda_api
from fakeclouds.server import FakeCloudServer


@pytest.fixture(scope="module")
def server() -> Iterator[FakeCloudServer]:
    with FakeCloudServer(facades=[lambda_api.FACADE, aws_api.FACADE], time_scale=0) as srv:
        yield srv


def test_calls_are_named_by_route_template_and_only_the_clouds(server: FakeCloudServer) -> None:
    server.admin.clear_calls()
    auth = {"Authorization": f"Bearer {server.tokens['lambda']}"}
    base = f"{server.url}{lambda_api.FACADE.prefix}"
    assert httpx.get(f"{base}/instances/abc123", headers=auth).status_code == 404  # refused: still a call
    assert httpx.get(f"{base}/instances", headers=auth).status_code == 200
    assert httpx.get(f"{base}/no-such-route", headers=auth).status_code == 404  # matched no route
    server.admin.machines()  # the admin API is not a cloud
    assert server.admin.calls() == {"lambda": ["GET /instances", "GET /instances/{instance_id}"]}
    server.admin.clear_calls()
    assert server.admin.calls() == {}


def test_a_query_api_call_is_named_by_its_action(server: FakeCloudServer) -> None:
    server.admin.clear_calls()
    unsigned = httpx.post(f"{server.url}{aws_api.FACADE.prefix}/",
                          data={"Action": "DescribeInstances", "Version": "2016-11-15"})
    assert unsigned.status_code >= 400  # refused for want of a signature, and still named
    assert server.admin.calls() == {"aws": ["ec2:DescribeInstances"]}
