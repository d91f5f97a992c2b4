"""The simulated Compute Engine, asked through the official SDK unchanged: what it refuses, how it
answers a repeated requestId, a taken name, capacity and rate limits, as Compute Engine does."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import asyncssh
import pytest
import requests
from google.api_core import exceptions as api_exceptions
from google.cloud import compute_v1

from fakeclouds.gcp_auth import PROJECT, service_account_key
from fakeclouds.server import FakeCloudServer
from tests import simclouds
from tests.eventually import eventually_sync
from tests.gcp.conftest import STRANGER_TOKEN

ZONE = "us-central1-a"
KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


def instance(
    name: str,
    machine: str = "n1-standard-4",
    gpus: int = 1,
    maintenance: str = "TERMINATE",
    ssh_key: str = KEY,
    **extra: Any,
) -> compute_v1.Instance:
    return compute_v1.Instance(
        name=name,
        machine_type=f"zones/{ZONE}/machineTypes/{machine}",
        guest_accelerators=[
            compute_v1.AcceleratorConfig(
                accelerator_type=f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4", accelerator_count=gpus
            )
        ]
        if gpus
        else [],
        disks=[
            compute_v1.AttachedDisk(
                boot=True,
                auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image="projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"
                ),
            )
        ],
        network_interfaces=[
            compute_v1.NetworkInterface(
                network="global/networks/default",
                access_configs=[compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")],
            )
        ],
        scheduling=compute_v1.Scheduling(on_host_maintenance=maintenance),
        metadata=compute_v1.Metadata(items=[compute_v1.Items(key="ssh-keys", value=f"ubuntu:{ssh_key}")]),
        **{"labels": {"suite": "gcp-sim"}, **extra},
    )


def insert(sdk: Callable[[str], Any], body: compute_v1.Instance, request_id: str | None = None) -> Any:
    req = compute_v1.InsertInstanceRequest(
        project=PROJECT, zone=ZONE, instance_resource=body, request_id=request_id or str(uuid.uuid4())
    )
    return sdk("InstancesClient").insert_unary(request=req, retry=None)


def wait(sdk: Callable[[str], Any], op: Any) -> Any:
    if op.status == compute_v1.Operation.Status.DONE:
        return op
    ops = sdk("ZoneOperationsClient")
    return eventually_sync(lambda: ops.get(project=PROJECT, zone=ZONE, operation=op.name),
                           until=lambda op: op and op.status == compute_v1.Operation.Status.DONE, within=20,
                           what=f"operation {op.name} done")


def live(sim: FakeCloudServer) -> list[dict[str, Any]]:
    return [m for m in sim.admin.machines() if m["facade"] == "gcp" and m["status"] != "terminated"]


def test_a_repeated_request_id_answers_the_first_operation_and_makes_nothing(
    sim_clean: FakeCloudServer, sdk: Callable[[str], Any]
) -> None:
    rid = str(uuid.uuid4())
    first = insert(sdk, instance("dedup-1"), rid)
    again = insert(sdk, instance("dedup-1"), rid)
    other_body = insert(sdk, instance("another-name"), rid)  # the id wins over the body, as on GCE
    assert first.name == again.name == other_body.name
    assert len(live(sim_clean)) == 1
    assert wait(sdk, again).error.errors == []


def test_a_taken_name_is_409_already_exists_whatever_the_parameters(
    sim_clean: FakeCloudServer, sdk: Callable[[str], Any]
) -> None:
    wait(sdk, insert(sdk, instance("taken-1")))
    for body in (instance("taken-1"), instance("taken-1", machine="n1-standard-8", gpus=2)):
        with pytest.raises(api_exceptions.Conflict) as exc:
            insert(sdk, body)
        assert exc.value.errors[0]["reason"] == "alreadyExists"
    assert len(live(sim_clean)) == 1


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (instance("Bad_Name"), "resource.name"),
        (instance("mig-1", maintenance="MIGRATE"), "live migration"),
        (instance("type-1", machine="a2-megagpu-16g", gpus=0), "does not exist in zone"),
        (instance("cards-1", gpus=8), "acceleratorCount"),
        (instance("nokey-1", ssh_key=""), "ssh-keys"),
        (instance("label-1", labels={"Bad Key": "x"}), "labels"),
    ],
)
def test_refusals_are_400_and_make_nothing(
    sim_clean: FakeCloudServer, sdk: Callable[[str], Any], body: compute_v1.Instance, words: str
) -> None:
    with pytest.raises(api_exceptions.BadRequest) as exc:
        insert(sdk, body)
    assert words in exc.value.errors[0]["message"] and exc.value.errors[0]["reason"] == "invalid"
    assert live(sim_clean) == []


def test_capacity_fails_in_the_operation_not_the_http_answer(
    sim_clean: FakeCloudServer, sdk: Callable[[str], Any]
) -> None:
    sim_clean.admin.set_stock("n1-standard-4+nvidia-tesla-t4:1", ZONE, 0)
    rid = str(uuid.uuid4())
    op = insert(sdk, instance("full-1"), rid)  # 200: the insert was accepted
    done = wait(sdk, op)
    assert done.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED" and done.http_error_status_code == 503
    assert live(sim_clean) == []
    # The failed operation stays the answer to that requestId, even once capacity is back.
    sim_clean.admin.set_stock("n1-standard-4+nvidia-tesla-t4:1", ZONE, 3)
    assert insert(sdk, instance("full-1"), rid).name == op.name and live(sim_clean) == []


def test_rate_limiting_is_403_rate_limit_exceeded(
    sim_clean: FakeCloudServer, sdk: Callable[[str], Any]
) -> None:
    sim_clean.admin.add_fault("gcp", "list", "rate_limit", retry_after=2)
    with pytest.raises(api_exceptions.Forbidden) as exc:
        list(sdk("InstancesClient").aggregated_list(project=PROJECT, retry=None))
    assert exc.value.errors[0]["reason"] == "rateLimitExceeded"


def test_auth_is_the_service_account_jwt(sim_clean: FakeCloudServer, sdk: Callable[[str], Any]) -> None:
    from google.oauth2 import service_account

    assert sdk("ProjectsClient").get(project=PROJECT).name == PROJECT
    with pytest.raises(api_exceptions.Forbidden) as forbidden:
        sdk("ProjectsClient").get(project="someone-elses-project")
    assert forbidden.value.errors[0]["reason"] == "forbidden"
    # A key the simulation did not issue (another token's) is refused like a revoked one.
    stranger = service_account.Credentials.from_service_account_info(service_account_key(STRANGER_TOKEN))
    client = compute_v1.ProjectsClient(
        credentials=stranger, client_options={"api_endpoint": simclouds.endpoint(sim_clean, "gcp")}
    )
    with pytest.raises(api_exceptions.Unauthorized) as exc:
        client.get(project=PROJECT)
    assert exc.value.errors[0]["reason"] == "authError"
    # No JWT, or a plain token: 401 too.
    url = simclouds.endpoint(sim_clean, "gcp") + f"/compute/v1/projects/{PROJECT}"
    for headers in ({}, {"Authorization": f"Bearer {sim_clean.tokens['gcp']}"}):
        r = requests.get(url, headers=headers, timeout=10)
        assert r.status_code == 401 and r.json()["error"]["errors"][0]["reason"] == "authError"


def test_firewalls_are_validated_unique_and_listed(
    sim_clean: FakeCloudServer, sdk: Callable[[str], Any]
) -> None:
    fw = sdk("FirewallsClient")

    def rule(name: str, port: str = "22") -> compute_v1.Firewall:
        return compute_v1.Firewall(
            name=name,
            network="global/networks/default",
            target_tags=[name],
            source_ranges=["0.0.0.0/0"],
            allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=[port])],
        )

    fw.insert_unary(project=PROJECT, firewall_resource=rule("sim-fw-1"))
    with pytest.raises(api_exceptions.Conflict):
        fw.insert_unary(project=PROJECT, firewall_resource=rule("sim-fw-1"))
    with pytest.raises(api_exceptions.BadRequest):
        fw.insert_unary(project=PROJECT, firewall_resource=rule("sim-fw-2", port="70000"))
    assert [
        f.name
        for f in fw.list(
            request=compute_v1.ListFirewallsRequest(project=PROJECT, filter='name eq "sim-fw-.*"')
        )
    ] == ["sim-fw-1"]
    assert {r["name"] for r in sim_clean.admin.side_resources() if r["facade"] == "gcp"} == {"sim-fw-1"}
    fw.delete_unary(project=PROJECT, firewall="sim-fw-1")
    with pytest.raises(api_exceptions.NotFound):
        fw.delete_unary(project=PROJECT, firewall="sim-fw-1")


def test_the_key_json_is_what_the_connect_form_takes(sim_clean: FakeCloudServer) -> None:
    creds = simclouds.credentials(sim_clean, "gcp")
    key = json.loads(creds["service_account_key"])
    assert creds["project_id"] == "" and key["type"] == "service_account" and key["project_id"] == PROJECT
    assert "PRIVATE KEY" in key["private_key"]
