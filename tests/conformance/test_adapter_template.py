"""The adapter template (providers/base.py): the contract runs the capability check, once, before any
adapter's launch — so no adapter module runs it itself, and none replaces the template's `create`."""

from __future__ import annotations

import ast
import asyncio
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from providers import account_objects, registry
from providers.base import (
    CloudProvider,
    ConnectionOptions,
    InstanceRef,
    InvalidRequest,
    LaunchRequirements,
    LaunchSpec,
    Offer,
    Ownership,
    Unsupported,
)
from providers.sdk import SdkCloudProvider

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAtemplate test"


def _calls_capability_check(path: Path) -> list[int]:
    """Lines of `path` that call `<anything>.capabilities.check(...)` or `caps.check(...)`."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "check":
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name in ("capabilities", "caps"):
                hits.append(node.lineno)
    return hits


@pytest.mark.parametrize("path", sorted(p for p in (ROOT / "providers").glob("*.py") if p.name != "base.py"),
                         ids=lambda p: p.name)
def test_no_adapter_module_runs_the_capability_check(path: Path) -> None:
    assert _calls_capability_check(path) == [], f"{path.name}: the contract's create runs it (base.py)"


def test_the_finder_sees_a_check_call() -> None:
    """The scan above is not vacuous: the template itself is found calling it."""
    assert _calls_capability_check(ROOT / "providers" / "base.py")


@pytest.mark.parametrize("cloud", registry.placeable())
def test_no_adapter_replaces_the_template_create(cloud: str) -> None:
    cls = registry.adapter_class(cloud)
    assert all("create" not in vars(k) for k in cls.__mro__ if k is not CloudProvider), cls


class _Recorder:
    """Stands in for an adapter's `_find_or_launch`: what reached it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Offer, LaunchSpec]] = []

    async def __call__(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        self.calls.append((offer, spec))
        return InstanceRef(provider=offer.provider, instance_id="i-1", key=spec.key, region=offer.region)


def _bare(cloud: str) -> tuple[CloudProvider, _Recorder]:
    """The cloud's adapter without its constructor (no credentials, no client): `create` needs none
    before its launch, and the launch is the recorder."""
    cls = registry.adapter_class(cloud)
    p = cls.__new__(cls)
    launch = _Recorder()
    p._find_or_launch = launch  # type: ignore[method-assign]
    return p, launch


def _refusals(cloud: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(what, offer fields, spec fields) of every request this cloud's capabilities refuse."""
    caps = registry.capabilities(cloud)
    found: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    if not caps.spot:
        found.append(("spot", {"spot": True}, {}))
    if not caps.ports:
        found.append(("ports", {}, {"ports": [8080]}))
    if not caps.custom_image:
        found.append(("image", {}, {"image": "some-image"}))
    elif caps.image_pattern:  # the cloud names its images one way: another form is refused
        found.append(("image form", {}, {"image": "not an image"}))
    if caps.regions:
        found.append(("region", {"region": "no-such-region-1"}, {}))
    return found


def _request(cloud: str, offer: dict[str, Any], spec: dict[str, Any]) -> tuple[Offer, LaunchSpec]:
    caps = registry.capabilities(cloud)
    base = Offer(provider=cloud, instance_type="t", vcpus=1, memory_gib=1,
                 region=caps.regions[0] if caps.regions else "anywhere", price_per_hour=1.0)
    return (base.model_copy(update=offer),
            LaunchSpec(key="k-template-1", owner=Ownership(installation_id="inst0001", allocation_id="a1"),
                       ssh_public_keys=[PUBLIC], **spec))


@pytest.mark.parametrize("cloud", registry.placeable())
async def test_a_refused_request_never_reaches_the_adapters_launch(cloud: str) -> None:
    refusals = _refusals(cloud)
    assert refusals, f"{cloud} refuses nothing: the test would prove nothing"
    for what, offer_fields, spec_fields in refusals:
        p, launch = _bare(cloud)
        offer, spec = _request(cloud, offer_fields, spec_fields)
        with pytest.raises((Unsupported, InvalidRequest)) as refused:
            await p.create(offer, spec)
        assert launch.calls == [], what
        # The cloud's own refusal, word for word (the same text validation gives before planning).
        with pytest.raises(refused.type) as expected:
            registry.capabilities(cloud).check(LaunchRequirements(
                spot=offer.spot, ports=spec.ports, image=spec.image, region=offer.region))
        assert refused.value.message == expected.value.message, what


@pytest.mark.parametrize("cloud", registry.placeable())
async def test_an_acceptable_request_reaches_the_launch_once(cloud: str) -> None:
    p, launch = _bare(cloud)
    offer, spec = _request(cloud, {}, {})
    ref = await p.create(offer, spec)
    assert launch.calls == [(offer, spec)] and ref.key == spec.key


# --------------------------------------------------------------------------- ensure an account object


async def test_ensure_finds_first_creates_when_missing_and_adopts_on_a_conflict() -> None:
    seen: list[str] = []
    held: list[str] = []

    async def find() -> str | None:
        seen.append("find")
        return held[0] if held else None

    async def create() -> str:
        seen.append("create")
        held.append("theirs")  # a concurrent create's registration landed first
        raise InvalidRequest("already exists")

    assert await account_objects.ensure(find, create) == "theirs"
    assert seen == ["find", "create", "find"]
    seen.clear()
    assert await account_objects.ensure(find, create) == "theirs" and seen == ["find"]


async def test_ensure_raises_a_refusal_with_nothing_behind_it() -> None:
    async def find() -> str | None:
        return None

    async def create() -> str:
        raise InvalidRequest("that is no key")

    with pytest.raises(InvalidRequest, match="no key"):
        await account_objects.ensure(find, create)


# --------------------------------------------------------------------------- the CA bundle of SDK adapters

SDK_CLOUDS = [c for c in registry.known() if issubclass(registry.adapter_class(c), SdkCloudProvider)]
PEM = "-----BEGIN CERTIFICATE-----\nMIIBtemplate\n-----END CERTIFICATE-----\n"


def test_the_sdk_clouds_are_the_four() -> None:
    assert sorted(SDK_CLOUDS) == ["aws", "azure", "gcp", "oci"]  # boto3, google-cloud, azure-mgmt, oci


@pytest.mark.parametrize("cloud", SDK_CLOUDS)
def test_an_sdk_adapter_writes_its_ca_bundle_one_way(cloud: str) -> None:
    """Each SDK adapter's CA file is the base's: the default roots plus the connection's own, one
    private file per adapter, the same on every call, removed by aclose."""
    cls = registry.adapter_class(cloud)
    module = Path(sys.modules[cls.__module__].__file__ or "")
    assert not {"tempfile", "certifi"} & imports_of(module), "providers/sdk.py writes the CA file"
    bare = cls.__new__(cls)
    bare.options = ConnectionOptions()
    assert bare.ca_bundle_file() is None  # no bundle: the SDK's own default stands
    p = cls.__new__(cls)
    p.options = ConnectionOptions(endpoint="https://sim.example", ca_bundle=PEM)
    path = p.ca_bundle_file()
    assert path is not None and p.ca_bundle_file() == path
    text = Path(path).read_text()
    assert text.endswith(PEM) and text.count("BEGIN CERTIFICATE") > 10  # the default roots stay
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    asyncio.run(SdkCloudProvider.aclose(p))
    assert not Path(path).exists()


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found
