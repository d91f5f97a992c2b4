"""The SDK-only clouds' remote calls against their vendors' own SDK definitions (sdk_definitions.py).

Every call pinned in tests/conformance/remote_calls/<cloud>.json (each check's, and `_sometimes`) must
be an operation the installed, pinned vendor SDK defines: a simulation answering a call the real API
does not have, or an adapter making one, fails here. The SDKs themselves check more when they run:
see tests/specs/README.md ("SDK-only clouds").
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.conformance.remote_calls import SOMETIMES, pinned
from tests.specs import sdk_definitions as sdk

CLOUDS = sorted(sdk.SDKS)
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

# Pinned calls the vendor's SDK does not define, each a known problem with why; it is pinned here (not
# added to the oracle) so that it stays visible, and so that any other one fails.
KNOWN_OUTSIDE: dict[str, dict[str, str]] = {
    "azure": {
        # providers/azure.py `verify` sends GET /subscriptions/{id} by hand (`send_request`): no installed
        # SDK defines it. It is a real ARM operation (Subscriptions_Get, in Microsoft's
        # azure-rest-api-specs, resources/subscriptions), but azure-mgmt-resource 26 no longer ships
        # the SubscriptionClient that had it (now azure-mgmt-resource-subscriptions, not installed), so
        # neither its path nor its answer is checked by any vendor definition here.
        "GET subscription": "hand-built request; SubscriptionClient is not in azure-mgmt-resource 26",
    },
}

# One invented call per cloud, in the cloud's naming, for the mutation test.
INVENTED = {
    "aws": "ec2:RunInstancesV9",
    "gcp": "POST /compute/v1/projects/{project}/zones/{zone}/instances/{name}/resurrect",
    "azure": "PUT virtualMachineFleetsV9",
    "oci": "POST /20160918/instances/{instance_id}/actions/resurrect",
    "nebius": "nebius.compute.v1.InstanceService/CreateV9",
    "modal": "modal.client.ModalClient/SandboxCreateV9",
}


def pinned_calls(cloud: str) -> set[str]:
    """Every call pinned for the cloud: each check's, and the `_sometimes` ones."""
    calls: set[str] = set()
    for entry in pinned(cloud).values():
        calls |= set(entry)  # a check's list, or `_sometimes`'s mapping of call to why
    assert SOMETIMES not in calls
    return calls


@functools.cache
def _operations(cloud: str, packages: frozenset[str]) -> frozenset[str]:
    if cloud == "nebius":  # only the proto packages asked about (loading all takes seconds)
        return frozenset(sdk.nebius_operations(packages))
    return frozenset(sdk.operations(cloud))


def not_defined(cloud: str, calls: set[str]) -> list[str]:
    """The calls the cloud's SDK defines no operation for."""
    packages = frozenset(sdk.grpc_package(c) for c in calls) if cloud == "nebius" else frozenset()
    ops = _operations(cloud, packages)
    return sorted(c for c in calls if sdk.blank(c) not in ops)


@pytest.mark.parametrize("cloud", CLOUDS)
def test_pinned_calls_are_sdk_operations(cloud: str) -> None:
    calls = pinned_calls(cloud)
    assert calls, f"nothing pinned for {cloud}"
    outside = not_defined(cloud, calls)
    assert outside == sorted(KNOWN_OUTSIDE.get(cloud, {})), (
        f"{cloud}: pinned remote calls no operation of {sdk.SDKS[cloud]} defines: {outside}")


@pytest.mark.parametrize("cloud", CLOUDS)
def test_invented_call_is_reported(cloud: str) -> None:
    calls = pinned_calls(cloud) | {INVENTED[cloud]}
    assert INVENTED[cloud] in not_defined(cloud, calls)


@pytest.mark.parametrize("cloud", CLOUDS)
def test_sdk_version_is_the_pinned_one(cloud: str) -> None:
    """The oracle's versions are the installed ones and satisfy pyproject.toml (its exact pins equal)."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    deps = {(r := Requirement(d)).name: r for d in project["dependencies"]}
    for dist, version in sdk.SDKS[cloud].items():
        assert sdk.installed(dist) == version, (
            f"{dist} is {sdk.installed(dist)}, the oracle was checked with {version}: re-run this test "
            "module, review, and update sdk_definitions.SDKS")
        if dist in deps:
            spec = deps[dist].specifier
            assert spec.contains(version), f"{dist}=={version} does not satisfy pyproject's {spec}"
            exact = [s.version for s in spec if s.operator == "=="]
            assert not exact or exact == [version], f"{dist}: pyproject pins {exact}, oracle has {version}"
