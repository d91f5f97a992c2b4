"""The operations each SDK-only cloud's vendor defines, read from the installed, pinned SDK itself.

For the clouds whose vendor publishes no REST OpenAPI description, only an SDK, the SDK's packaged
definitions are the oracle for the remote calls our adapters make (and so for what the simulations
answer). Each loader below returns the operations in the naming `fakeclouds/calls.py` gives the calls
it serves, i.e. the naming of tests/conformance/remote_calls/<cloud>.json:

- aws: botocore's service models (`<service>:<Action>`, e.g. "ec2:RunInstances").
- gcp: google-cloud-compute's REST transports (`METHOD <uri template>`).
- azure: azure-mgmt-compute/-network/-resource's request builders (`METHOD <route name or type>`).
- oci: the OCI SDK's clients (`METHOD <base path><resource path>`).
- nebius, modal: the gRPC service descriptors the SDKs ship (`<package>.<Service>/<Method>`).

Path templates are compared with their placeholders' names blanked ("{instance}" and "{name}" are the
same slot): the SDK names a slot after its parameter, the simulation after its route.
Hyperstack is not here: its adapter speaks plain REST (httpx), and uses no vendor SDK.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
from collections.abc import Iterable
from pathlib import Path

_SLOT = re.compile(r"\{[^}]*\}")

# What each cloud's oracle is read from, by distribution. The versions are the installed ones this
# oracle was checked with: the test asserts the installed version is still this one, and that it
# satisfies pyproject.toml's requirement (where pyproject pins exactly, it is that pin). A moved SDK
# shows up here first. Distributions not in pyproject (msal) come with the one that is.
SDKS: dict[str, dict[str, str]] = {
    "aws": {"boto3": "1.44.8", "botocore": "1.44.8"},  # botocore holds the service models
    "gcp": {"google-cloud-compute": "1.57.0"},
    "azure": {
        "azure-mgmt-compute": "39.0.0",
        "azure-mgmt-network": "33.1.0",
        "azure-mgmt-resource": "26.0.0",
        "azure-mgmt-core": "1.6.0",  # ARM's long-running-operation polling
    "msal": "1.39.0",  # Entra ID sign-in, under azure-identity
    },
    "oci": {"oci": "2.189.0"},
    "nebius": {"nebius": "0.6.29"},
    "modal": {"modal": "1.6.4"},
}


def blank(call: str) -> str:
    """A call name with its path placeholders' names blanked: "GET /a/{x}" -> "GET /a/{}"."""
    return _SLOT.sub("{}", call)


def installed(dist: str) -> str:
    return importlib.metadata.version(dist)


def source(dist: str, path: str) -> Path:
    """A file the installed distribution ships, found without importing it (importing
    google.cloud.compute_v1, azure.mgmt.network or oci takes seconds)."""
    found = Path(str(importlib.metadata.distribution(dist).locate_file(path)))
    assert found.exists(), f"{dist} {installed(dist)} no longer ships {path}"
    return found


# ------------------------------------------------------------------------------------------ aws


def aws_operations(services: Iterable[str] = ("ec2", "sts")) -> set[str]:
    """botocore's service models: "ec2:RunInstances". The simulation names an AWS call
    "<service>:<Action>" (the query API's Action is the model's operation name)."""
    import botocore.session

    session = botocore.session.get_session()
    return {f"{s}:{op}" for s in services for op in session.get_service_model(s).operation_names}


# ------------------------------------------------------------------------------------------ gcp


_GCP_OPTION = re.compile(r'\{\s*"method": "(\w+)",\s*"uri": "([^"]+)"')


def gcp_operations() -> set[str]:
    """Every REST binding of every google-cloud-compute service: each transport's `_Base<Method>`
    has `_get_http_options()` returning [{"method": "get", "uri": "/compute/v1/projects/{project}/..."}].
    Read from the source of each service's transports/rest_base.py (importing google.cloud.compute_v1
    takes seconds); every `_get_http_options` must yield a binding, so a layout change fails loudly.
    Named "GET /compute/v1/projects/{}/..." (slots blanked)."""
    out: set[str] = set()
    for rest_base in sorted(source("google-cloud-compute", "google/cloud/compute_v1/services").glob(
            "*/transports/rest_base.py")):
        text = rest_base.read_text()
        bindings = _GCP_OPTION.findall(text)
        assert len(bindings) >= text.count("def _get_http_options("), f"{rest_base}: unread bindings"
        out |= {blank(f"{method.upper()} {uri}") for method, uri in bindings}
    return out


# ---------------------------------------------------------------------------------------- azure

_AZURE_MODULES = (
    ("azure-mgmt-compute", "azure/mgmt/compute/operations/_operations.py"),
    ("azure-mgmt-network", "azure/mgmt/network/operations/_operations.py"),
    ("azure-mgmt-resource", "azure/mgmt/resource/resources/operations/_operations.py"),
)
_BUILD = re.compile(r'^def (build_\w+_request)\(|^    _url = "([^"]+)"|HttpRequest\(method="(\w+)"', re.M)


def azure_requests() -> set[tuple[str, str, str]]:
    """(builder, METHOD, URL template) of every request the three mgmt SDKs can build: each operation
    has a generated `build_<group>_<op>_request` that sets `_url = "/subscriptions/..."` and returns
    `HttpRequest(method=...)`. Read from the source (importing azure-mgmt-network takes seconds)."""
    out: set[tuple[str, str, str]] = set()
    for dist, name in _AZURE_MODULES:
        text = source(dist, name).read_text()
        builder = url = None
        for m in _BUILD.finditer(text):
            if m.group(1):
                builder, url = m.group(1), None
            elif m.group(2):
                url = m.group(2)
            elif builder and url:
                out.add((builder, m.group(3), url))
                builder = url = None
        assert len(out) > 100 and text.count("\ndef build_") > 0, name
    return out


# The simulation names an ARM call by the route it matched (fakeclouds/azure_api.py ROUTES, one
# dispatcher serves all of ARM): "<METHOD> <type>" where the path names a resource type
# (".../providers/Microsoft.Network/publicIPAddresses/{name}" -> "PUT publicIPAddresses"), else
# "<METHOD> <route>". The same rule, on the SDK's templates (the routes' shapes, in order):
_ARM = "/subscriptions/[^/]+"
_RG = _ARM + "/resourcegroups/[^/]+"
_AZURE_ROUTES = [
    (name, re.compile(rx + "$", re.I))
    for name, rx in [
        ("subscription", _ARM),
        ("resources", _ARM + "/resources"),
        ("skus", _ARM + r"/providers/Microsoft\.Compute/skus"),
        ("vms_all", _ARM + r"/providers/Microsoft\.Compute/virtualMachines"),
        ("group", _RG),
        ("vms_group", _RG + r"/providers/Microsoft\.Compute/virtualMachines"),
        ("resource", _RG + r"/providers/Microsoft\.(?:Compute|Network)/(?P<type>[^/]+)/[^/]+"),
    ]
]

# Calls whose URL the client does not build but follows from an answer, so no SDK operation defines
# them; they are checked against the client code that follows them instead (see `azure_operations`):
AZURE_FOLLOWED = {
    # azure-mgmt-core's ARMPolling polls the `Azure-AsyncOperation` URL a long-running PUT/DELETE
    # answers with (.../providers/Microsoft.Compute/locations/{loc}/operations/{id}).
    "GET operation": ("azure-mgmt-core", "azure/mgmt/core/polling/arm_polling.py", "Azure-AsyncOperation"),
    # msal (under azure-identity) asks the tenant's OpenID discovery document, at a path it builds
    # ("{prefix}{version}/.well-known/openid-configuration", version "/v2.0"), then posts to the
    # `token_endpoint` that document names (Entra ID's: /{tenant}/oauth2/v2.0/token).
    "GET /login/{tenant}/v2.0/.well-known/openid-configuration": (
        "msal", "msal/authority.py", "{prefix}{version}/.well-known/openid-configuration"),
    "POST /login/{tenant}/oauth2/v2.0/token": ("msal", "msal/oauth2cli/oauth2.py", "token_endpoint"),
}


def azure_name(method: str, template: str) -> str | None:
    """The simulation's name for an ARM request, or None where it has no such route."""
    path = _SLOT.sub("x", template)
    for route, rx in _AZURE_ROUTES:
        if m := rx.fullmatch(path):
            return f"{method} {m.groupdict().get('type') or route}"
    return None


def azure_operations() -> set[str]:
    ops = {n for _, method, url in azure_requests() if (n := azure_name(method, url))}
    for call, (dist, name, text) in AZURE_FOLLOWED.items():
        if text in source(dist, name).read_text():
            ops.add(blank(call))
    return ops


# ------------------------------------------------------------------------------------------ oci

_OCI_CLIENTS = (  # the packages whose clients providers/oci_client.py builds: oci.core, oci.identity
    "oci/core/compute_client.py",
    "oci/core/virtual_network_client.py",
    "oci/core/blockstorage_client.py",
    "oci/core/compute_management_client.py",
    "oci/identity/identity_client.py",
)
_OCI_BASE = re.compile(r"'base_path': '([^']+)'")
_OCI_OP = re.compile(r'resource_path = "([^"]+)"\n\s+method = "(\w+)"')


def oci_operations() -> set[str]:
    """Every operation of the OCI clients the adapter uses: each client method sets
    `resource_path = "/instances/{instanceId}"` and `method = "GET"`, below the client's `base_path`
    ("/20160918"). Read from the source (importing `oci` takes seconds). "GET /20160918/instances/{}"."""
    out: set[str] = set()
    for name in _OCI_CLIENTS:
        text = source("oci", name).read_text()
        base = _OCI_BASE.search(text)
        assert base, f"{name}: no base_path"
        out |= {blank(f"{method} {base.group(1)}{path}") for path, method in _OCI_OP.findall(text)}
    return out


# ------------------------------------------------------------------------------------- nebius


def nebius_operations(packages: Iterable[str] | None = None) -> set[str]:
    """The gRPC methods of the Nebius SDK's services, "nebius.compute.v1.InstanceService/Create"
    (a gRPC path without its leading "/"). Each generated package (nebius.api.nebius.compute.v1 for
    proto package nebius.compute.v1) has a `<Service>Client` whose `get_descriptor()` is the service's
    descriptor. `packages`: the proto packages to load (all 30-odd take ~5 s to import; a method is
    only ever defined in its own package, so loading the packages asked about is enough)."""
    import nebius.api.nebius as root

    if packages is None:
        base = os.path.dirname(str(root.__file__))
        packages = sorted(
            "nebius." + os.path.relpath(d, base).replace(os.sep, ".")
            for d, _, files in os.walk(base) if d != base and "__init__.py" in files
        )
    out: set[str] = set()
    for package in packages:
        try:
            mod = importlib.import_module(f"nebius.api.{package}")
        except ModuleNotFoundError as exc:
            if not f"nebius.api.{package}".startswith(str(exc.name)):
                raise
            continue  # no such package: none of its methods is defined
        for cls in vars(mod).values():
            if isinstance(cls, type) and "__service_name__" in vars(cls) and hasattr(cls, "get_descriptor"):
                d = cls.get_descriptor()
                out |= {f"{d.full_name}/{m.name}" for m in d.methods}
    return out


def grpc_package(call: str) -> str:
    """"nebius.compute.v1.InstanceService/Create" -> "nebius.compute.v1"."""
    return call.split("/", 1)[0].rsplit(".", 1)[0]


# -------------------------------------------------------------------------------------- modal


def modal_operations() -> set[str]:
    """The gRPC methods of Modal's client API, from the client's generated modal_proto/api_pb2:
    "modal.client.ModalClient/SandboxCreate"."""
    from modal_proto import api_pb2

    return {
        f"{s.full_name}/{m.name}" for s in api_pb2.DESCRIPTOR.services_by_name.values() for m in s.methods
    }


def operations(cloud: str, calls: Iterable[str] = ()) -> set[str]:
    """The operations the cloud's SDK defines, named as the pinned calls are (paths blanked)."""
    if cloud == "aws":
        return aws_operations()
    if cloud == "gcp":
        return gcp_operations()
    if cloud == "azure":
        return azure_operations()
    if cloud == "oci":
        return oci_operations()
    if cloud == "nebius":
        return nebius_operations({grpc_package(c) for c in calls})
    if cloud == "modal":
        return modal_operations()
    raise KeyError(cloud)
