"""Adapter details the simulated clouds do not reach: naming, GPU names, user data, and
edge answers, driven through httpx.MockTransport."""

from __future__ import annotations

import email
import json
from collections.abc import Callable

import asyncssh
import httpx
import pytest
import yaml

from fakeclouds import cloudinit
from providers.account_objects import key_object_name
from providers.base import (
    CapacityError,
    ConnectionOptions,
    InstanceRef,
    InvalidRequest,
    LaunchSpec,
    Offer,
    OfferQuery,
    Ownership,
    Unsupported,
)
from providers.credentials import ApiKeyCredentials
from providers.gpus import normalize_gpu, same_gpu
from providers.lambda_ import LambdaProvider, instance_name, merge_user_data
from providers.local import LocalProvider

Handler = Callable[[httpx.Request], httpx.Response]
OFFER = Offer(provider="lambda", instance_type="gpu_1x_a10", vcpus=30, memory_gib=200, region="us-east-1",
              price_per_hour=0.75)


# Real keys: an adapter that registers a key object parses the key first.
PUBLIC_KEYS = [asyncssh.generate_private_key("ssh-ed25519", comment=f"k{i}").export_public_key().decode()
               .strip() for i in range(3)]


def spec(key: str = "alloc-1-a0", keys: int = 1, installation: str = "inst0001") -> LaunchSpec:
    return LaunchSpec(key=key, owner=Ownership(installation_id=installation, allocation_id="alloc-1"),
                      ssh_public_keys=PUBLIC_KEYS[:keys])


def spec_ref() -> InstanceRef:
    return InstanceRef(provider="lambda", instance_id="i-1", key="alloc-1-a0", region="us-east-1")


def lam(handler: Handler) -> LambdaProvider:
    p = LambdaProvider(ApiKeyCredentials(api_key="k"),  # type: ignore[arg-type]
                       options=ConnectionOptions(endpoint="http://lambda.test/api/v1"),
                       installation_id="inst0001")
    p._transport = httpx.MockTransport(handler)
    return p


def local(handler: Handler) -> LocalProvider:
    p = LocalProvider(ApiKeyCredentials(api_key="k"),  # type: ignore[arg-type]
                      options=ConnectionOptions(endpoint="http://local.test/local/v1"),
                      installation_id="inst0001")
    p._transport = httpx.MockTransport(handler)
    return p


def data(payload: object, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json={"data": payload})


def lambda_err(status: int, code: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": code, "suggestion": None}})


@pytest.mark.parametrize(("desc", "type_name", "expected"), [
    ("A10 (24 GB PCIe)", "gpu_1x_a10", ("A10", 24.0)),
    ("H100 (80 GB SXM5)", "gpu_8x_h100_sxm5", ("H100", 80.0)),
    ("8x A100 (40 GB SXM4)", "gpu_8x_a100", ("A100", 40.0)),
    ("GH200 (96 GB)", "gpu_1x_gh200", ("GH200", 96.0)),
    ("Tesla V100 (16 GB)", "gpu_8x_v100", ("V100", 16.0)),
    ("RTX A6000 (48 GB)", "gpu_1x_a6000", ("A6000", 48.0)),
    ("Quadro RTX 6000 (24 GB)", "gpu_1x_rtx6000", ("RTX6000", 24.0)),
    (None, "gpu_2x_b200_sxm6", ("B200", None)),
    ("NVIDIA H100 80GB HBM3", "", ("H100", 80.0)),  # what nvidia-smi prints
    ("NVIDIA A100-SXM4-40GB", "", ("A100", 40.0)),
    ("NVIDIA GeForce RTX 4090", "", ("RTX4090", None)),
    ("NVIDIA RTX A6000", "", ("A6000", None)),
    ("L40S", "", ("L40S", None)),
])
def test_gpu_names_normalise_to_one_canonical_name(desc: str | None, type_name: str,
                                                   expected: tuple[str, float | None]) -> None:
    assert normalize_gpu(desc, type_name) == expected


def test_a_user_may_spell_a_gpu_any_way() -> None:
    assert same_gpu("h100", "H100") and same_gpu("RTX A6000", "A6000") and same_gpu("rtx-4090", "RTX4090")
    assert not same_gpu("a100", "A10") and not same_gpu("h200", "H100")


def test_instance_name_fits_and_is_stable() -> None:
    assert instance_name("inst0001", "alloc-1-a0") == "gpuprov-inst0001-alloc-1-a0"
    long_key = "k" * 63
    name = instance_name("inst0001", long_key)
    assert len(name) == 64 and name == instance_name("inst0001", long_key)
    assert name != instance_name("inst0001", "k" * 62 + "j")
    with pytest.raises(InvalidRequest):
        instance_name("i" * 60, "key")


def test_merge_user_data() -> None:
    assert merge_user_data([], None) is None
    assert merge_user_data([], "#!/bin/sh\n") == "#!/bin/sh\n"
    only_keys = merge_user_data(["ssh-ed25519 BBB b"], None)
    assert only_keys is not None and only_keys.startswith("#cloud-config\n")
    assert yaml.safe_load(only_keys) == {"ssh_authorized_keys": ["ssh-ed25519 BBB b"]}
    both = merge_user_data(["ssh-ed25519 BBB b"], "#!/bin/sh\necho hi\n")
    assert both is not None and "multipart/mixed" in both
    assert "text/cloud-config" in both and "text/x-shellscript" in both and "echo hi" in both


@pytest.mark.parametrize("forged", [
    "ssh-ed25519 BBB b\nruncmd:\n  - touch /tmp/pwned",
    "ssh-ed25519 BBB b\n  - extra-key\nruncmd: [touch /tmp/pwned]",
    "ssh-ed25519 BBB b\r\nbootcmd:\r\n  - id",
    "ssh-ed25519 BBB b\n#cloud-config\nruncmd: [id]\n...\n--- {runcmd: [id]}",
    "'quoted' \"and\" {flow: [x]} & *alias !!python/object:os.system",
])
def test_a_key_list_cannot_add_a_cloud_init_directive(forged: str) -> None:
    """The writer is safe whatever the API let through (or a workflow started before it checked):
    every key is one YAML string, and the document has no key but ssh_authorized_keys."""
    for user_data in (None, "#cloud-config\npackages: [htop]\n"):
        merged = merge_user_data(["ssh-ed25519 AAA a", forged], user_data)
        assert merged is not None
        if user_data is None:
            parts = [merged]
        else:
            msg = email.message_from_string(merged)
            parts = [p.get_payload() for p in msg.walk() if not p.is_multipart()]
        docs = [yaml.safe_load(p) for p in parts]
        assert docs[0] == {"ssh_authorized_keys": ["ssh-ed25519 AAA a", forged.strip()]}
        assert all(set(d) <= {"ssh_authorized_keys", "packages"} for d in docs)
        assert cloudinit.parse(merged).authorized_keys[:2] == ["ssh-ed25519 AAA a", forged.strip()]


def test_missing_credentials_are_refused_naming_the_field() -> None:
    with pytest.raises(InvalidRequest, match="api_key"):
        LambdaProvider.parse_credentials({})
    with pytest.raises(InvalidRequest, match="api_key"):
        LocalProvider.parse_credentials({"api_key": ""})


async def test_lambda_create_finds_existing_instance_without_launching() -> None:
    paths: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        paths.append(f"{req.method} {req.url.path}")
        return data([{"id": "i-1", "name": "gpuprov-inst0001-alloc-1-a0", "status": "booting",
                      "region": {"name": "us-east-1"}}])

    async with lam(handler) as p:
        ref = await p.create(OFFER, spec())
    assert ref.instance_id == "i-1" and ref.key == "alloc-1-a0" and ref.region == "us-east-1"
    assert paths == ["GET /api/v1/instances"]


async def test_a_lifetime_on_a_cloud_that_enforces_none_is_refused_before_any_call() -> None:
    """The shared create template checks LaunchSpec.lifetime_s against the capabilities: Lambda stops
    no machine by itself, so a lifetime is refused with the reason and nothing is sent."""
    paths: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        paths.append(f"{req.method} {req.url.path}")
        return data([])

    async with lam(handler) as p:
        with pytest.raises(Unsupported, match="--max-hours needs .*; Lambda Cloud does not"):
            await p.create(OFFER, spec().model_copy(update={"lifetime_s": 3600}))
    assert paths == []


async def test_lambda_create_registers_the_installations_key_and_passes_the_rest_as_user_data() -> None:
    posted: dict[str, dict[str, object]] = {}

    def handler(req: httpx.Request) -> httpx.Response:
        if req.method == "GET":
            return data([])
        posted[req.url.path] = json.loads(req.content)
        if req.url.path.endswith("/ssh-keys"):
            return data({"id": "key-1", "name": "x", "public_key": "y"})
        return data({"instance_ids": ["i-9"]})

    async with lam(handler) as p:
        ref = await p.create(OFFER, spec(keys=2))
    assert ref.instance_id == "i-9"
    key = posted["/api/v1/ssh-keys"]
    launch = posted["/api/v1/instance-operations/launch"]
    assert key == {"name": key_object_name("inst0001", PUBLIC_KEYS[0]), "public_key": PUBLIC_KEYS[0]}
    assert launch["ssh_key_names"] == [key_object_name("inst0001", PUBLIC_KEYS[0])]
    assert launch["name"] == "gpuprov-inst0001-alloc-1-a0" and launch["quantity"] == 1
    assert PUBLIC_KEYS[1] in str(launch["user_data"])


async def test_lambda_terminate_gone_is_success_and_deletes_the_ruleset() -> None:
    calls: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(f"{req.method} {req.url.path}")
        if req.url.path.endswith("/terminate"):
            return lambda_err(404, "global/object-does-not-exist")
        if req.url.path.endswith("/instances"):
            return data([])
        if req.method == "GET":
            return data([{"id": "rs-7", "name": "gpuprov-inst0001-alloc-1-a0"},
                         {"id": "rs-8", "name": "other"}])
        return data({})

    async with lam(handler) as p:
        await p.terminate(spec_ref())
    assert calls[-1] == "DELETE /api/v1/firewall-rulesets/rs-7"
    assert not [c for c in calls if "/ssh-keys" in c], "the SSH key object is the installation's"


async def test_lambda_terminate_leaves_the_ruleset_to_a_twin_and_release_removes_it() -> None:
    """Lambda names are not unique: the firewall ruleset goes with the last machine of the name. A
    per-machine SSH key object (as launches made them before 2026-12) goes at release too."""
    calls: list[str] = []
    name = "gpuprov-inst0001-alloc-1-a0"
    twins = [{"id": "i-1", "name": name, "status": "terminating"},
             {"id": "i-2", "name": name, "status": "active"},
             {"id": "i-3", "name": "gpuprov-inst0001-other", "status": "active"}]

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(f"{req.method} {req.url.path}")
        if req.url.path.endswith("/terminate"):
            return lambda_err(404, "global/object-does-not-exist")  # i-1 is gone already
        if req.url.path.endswith("/instances"):
            return data(twins)
        if req.url.path.endswith("/firewall-rulesets"):
            return data([{"id": "rs-7", "name": name}])
        if req.method == "GET":
            return data([{"id": "key-7", "name": name}])
        return data({})

    async with lam(handler) as p:
        assert [r.instance_id for r in await p.find_all("alloc-1-a0")] == ["i-1", "i-2"]
        await p.terminate(spec_ref())
        assert not any(c.startswith("DELETE") for c in calls), "the twin i-2 still carries the name"
        await p.release("alloc-1-a0")
    assert [c for c in calls if c.startswith("DELETE")] == ["DELETE /api/v1/firewall-rulesets/rs-7",
                                                            "DELETE /api/v1/ssh-keys/key-7"]


async def test_lambda_terminate_other_refusal_raises() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return lambda_err(400, "global/invalid-parameters")

    async with lam(handler) as p:
        with pytest.raises(InvalidRequest):
            await p.terminate(spec_ref())


async def test_lambda_spot_query_makes_no_call() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        raise AssertionError("no HTTP call expected")

    async with lam(handler) as p:
        assert await p.offers(OfferQuery(spot=True)) == []


async def test_lambda_status_mapping() -> None:
    states = iter(["booting", "active", "unhealthy", "terminating", "terminated"])

    def handler(req: httpx.Request) -> httpx.Response:
        return data({"id": "i-1", "name": "n", "status": next(states), "ip": "10.0.0.5",
                     "ssh_port": 2222})  # not a Lambda field: ignored

    async with lam(handler) as p:
        got = [(await p.get(spec_ref())) for _ in range(5)]
    assert [s.state.value for s in got if s] == ["pending", "running", "error", "terminating", "terminated"]
    running = got[1]
    assert running is not None
    assert (running.host, running.ssh_port, running.ssh_user) == ("10.0.0.5", 22, "ubuntu")


async def test_local_conflict_looks_up_again() -> None:
    lookups = 0

    def handler(req: httpx.Request) -> httpx.Response:
        nonlocal lookups
        if req.method == "POST":
            return httpx.Response(409, json={"error": {"code": "name_conflict", "message": "taken"}})
        lookups += 1
        machines = [] if lookups == 1 else [{"id": "m-3", "name": "alloc-1-a0", "status": "pending",
                                              "region": "local-1",
                                              "labels": {"gpuprov-installation": "inst0001",
                                                         "gpuprov-key": "alloc-1-a0"}}]
        return httpx.Response(200, json={"machines": machines})

    async with local(handler) as p:
        ref = await p.create(OFFER.model_copy(update={"region": "local-1"}), spec())
    assert ref.instance_id == "m-3" and lookups == 2


async def test_local_never_adopts_another_installations_machine() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"machines": [{"id": "m-1", "name": "alloc-1-a0", "status": "running",
                                                       "labels": {"gpuprov-installation": "someone-else"}}]})

    async with local(handler) as p:
        with pytest.raises(InvalidRequest):
            await p.create(OFFER.model_copy(update={"region": "local-1"}), spec())
        assert await p.find("alloc-1-a0") is None
        assert await p.list_owned() == []


async def test_lambda_refused_launch_removes_its_ruleset_and_keeps_the_installations_key() -> None:
    calls: list[str] = []
    name = "gpuprov-inst0001-alloc-1-a0"

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(f"{req.method} {req.url.path}")
        if req.url.path.endswith("/launch"):
            return lambda_err(400, "instance-operations/launch/insufficient-capacity")
        if req.method == "POST":
            return data({"id": "rs-5" if "firewall" in req.url.path else "key-5", "name": name})
        if req.url.path.endswith("/firewall-rulesets") and any(c.startswith("POST") for c in calls):
            return data([{"id": "rs-5", "name": name, "region": {"name": "us-east-1"}}])
        return data([])

    async with lam(handler) as p:
        with pytest.raises(CapacityError) as exc:
            await p.create(OFFER, spec().model_copy(update={"ports": [8080]}))
    assert str(exc.value.scope) == "lambda/us-east-1/gpu_1x_a10"  # that type, that region only
    assert [c for c in calls if c.startswith("DELETE")] == ["DELETE /api/v1/firewall-rulesets/rs-5"]


def test_k3s_at_boot_only_when_asked() -> None:
    """providers/cloudinit.py: the k3s part comes first and only with k3s=True; the caller's user
    data follows, each part of a MIME multipart."""
    from providers import cloudinit
    from providers.aws import user_data as aws_user_data

    assert cloudinit.boot_user_data(None, k3s=False) is None
    assert cloudinit.boot_user_data("#!/bin/sh\necho hi\n", k3s=False) == "#!/bin/sh\necho hi\n"
    assert cloudinit.boot_user_data(None, k3s=True) == cloudinit.K3S_AT_BOOT
    both = cloudinit.boot_user_data("#!/bin/sh\necho hi\n", k3s=True)
    assert both is not None and both.index("get.k3s.io") < both.index("echo hi")
    keys = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOeV3Yb5c4qk6m0Jc8Hq3n0m2Q8m0pP2s3R1vT5xY7zA a"]
    assert "get.k3s.io" not in aws_user_data(keys, None)
    assert "get.k3s.io" in aws_user_data(keys, None, k3s=True)
