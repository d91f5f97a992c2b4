"""The simulated OCI as the unchanged `oci` SDK meets it: every request's signature is verified against
the registered key (a tampered signed header or body, six minutes of clock skew, another key: 401
NotAuthenticated, whatever the call), `launch_instance` is deduplicated by `opc-retry-token`, and what
the tenancy does not hold is 404 NotAuthorizedOrNotFound."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from fakeclouds import oci_api, oci_auth
from fakeclouds.server import FakeCloudServer

V = "/20160918"


def sdk() -> Any:
    """The `oci` SDK, imported here, not at collection: it takes seconds, and the fast tier collects
    this module too."""
    import oci

    return oci


@pytest.fixture(scope="module")
def server() -> Iterator[FakeCloudServer]:
    with FakeCloudServer(facades=[oci_api.FACADE], boot_delay=0.2, terminate_delay=0.02, time_scale=0) as srv:
        yield srv


def creds(server: FakeCloudServer) -> dict[str, Any]:
    return oci_api.FACADE.credentials(server.tokens["oci"])


def signer(c: dict[str, Any], key_pem: str | None = None) -> Any:
    return sdk().signer.Signer(
        c["tenancy_ocid"],
        c["user_ocid"],
        c["fingerprint"],
        None,
        private_key_content=key_pem or c["private_key"],
    )


def identity(server: FakeCloudServer, key_pem: str | None = None) -> Any:
    c = creds(server)
    config = {
        "tenancy": c["tenancy_ocid"],
        "user": c["user_ocid"],
        "fingerprint": c["fingerprint"],
        "region": c["region"],
        "key_content": key_pem or c["private_key"],
    }
    return sdk().identity.IdentityClient(
        config,
        signer=signer(c, key_pem),
        service_endpoint=server.url + "/oci",
        retry_strategy=sdk().retry.NoneRetryStrategy(),
    )


def send(
    server: FakeCloudServer, method: str, path: str, body: str | None = None, tamper: Any = None
) -> requests.Response:
    """One request signed as the SDK signs it, `tamper`ed (headers, then body) after signing."""
    req = requests.Request(
        method,
        server.url + "/oci" + V + path,
        data=body,
        headers={"content-type": "application/json"} if body is not None else {},
    ).prepare()
    signer(creds(server))(req)
    if tamper:
        tamper(req)
    with requests.Session() as s:
        return s.send(req, timeout=10)


def test_a_correctly_signed_request_is_answered(server: FakeCloudServer) -> None:
    tenancy = creds(server)["tenancy_ocid"]
    assert identity(server).get_tenancy(tenancy).data.name == "simulated-tenancy"
    r = send(server, "GET", f"/availabilityDomains?compartmentId={tenancy}")
    assert r.status_code == 200 and [a["name"] for a in r.json()] == [
        "Uocm:US-ASHBURN-1-AD-1",
        "Uocm:EU-FRANKFURT-1-AD-1",
    ]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda r: r.headers.__setitem__("date", email.utils.formatdate(time.time() + 1, usegmt=True)),
        lambda r: setattr(r, "url", r.url.replace("compartmentId=", "compartmentId=x")),  # the request-target
        lambda r: r.headers.__setitem__(
            "authorization", r.headers["authorization"].replace('signature="', 'signature="AAAA')
        ),
    ],
)
def test_a_tampered_signed_header_is_not_authenticated(server: FakeCloudServer, tamper: Any) -> None:
    tenancy = creds(server)["tenancy_ocid"]
    r = send(server, "GET", f"/availabilityDomains?compartmentId={tenancy}", tamper=tamper)
    assert r.status_code == 401 and r.json()["code"] == "NotAuthenticated", r.text
    assert r.headers["opc-request-id"]


def test_a_tampered_body_is_not_authenticated(server: FakeCloudServer) -> None:
    tenancy = creds(server)["tenancy_ocid"]
    body = f'{{"compartmentId": "{tenancy}", "shape": "VM.GPU.A10.1"}}'

    def swap(r: requests.PreparedRequest) -> None:
        r.body = body.replace("A10.1", "A10.2").encode()

    r = send(server, "POST", "/instances", body=body, tamper=swap)
    assert r.status_code == 401 and "x-content-sha256" in r.json()["message"]
    assert server.engine.live("oci") == []


@pytest.mark.parametrize(("skew_s", "refused"), [(-360, True), (360, True), (-240, False)])
def test_six_minutes_of_clock_skew_is_refused_four_are_not(
    server: FakeCloudServer, monkeypatch: pytest.MonkeyPatch, skew_s: int, refused: bool
) -> None:
    real = email.utils.formatdate
    monkeypatch.setattr(
        sdk().signer.email.utils, "formatdate", lambda *a, **k: real(time.time() + skew_s, usegmt=True)
    )
    client, tenancy = identity(server), creds(server)["tenancy_ocid"]
    if not refused:
        assert client.get_tenancy(tenancy).data.id == tenancy
        return
    with pytest.raises(sdk().exceptions.ServiceError) as exc:
        client.get_tenancy(tenancy)
    assert (exc.value.status, exc.value.code) == (401, "NotAuthenticated")
    assert "5 minutes" in exc.value.message


def test_another_key_under_the_same_key_id_is_not_authenticated(server: FakeCloudServer) -> None:
    other = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        .decode()
    )
    with pytest.raises(sdk().exceptions.ServiceError) as exc:
        identity(server, other).get_tenancy(creds(server)["tenancy_ocid"])
    assert (exc.value.status, exc.value.code) == (401, "NotAuthenticated")
    assert "does not verify" in exc.value.message


def test_what_the_tenancy_does_not_hold_is_not_authorized_or_not_found(server: FakeCloudServer) -> None:
    tenancy = creds(server)["tenancy_ocid"]
    for path in (
        "/instances/ocid1.instance.oc1.us-ashburn-1.nope",
        f"/instances?compartmentId={tenancy}x",
        "/vnics/ocid1.vnic.oc1.iad.nope",
        "/tenancies/ocid1.tenancy.oc1..other",
    ):
        r = send(server, "GET", path)
        assert (r.status_code, r.json()["code"]) == (404, "NotAuthorizedOrNotFound"), path


def launch_body(tenancy: str, key: str, shape: str = "VM.GPU.A10.1") -> str:
    import json

    return json.dumps(
        {
            "compartmentId": tenancy,
            "availabilityDomain": "Uocm:US-ASHBURN-1-AD-1",
            "shape": shape,
            "displayName": "dedupe",
            "metadata": {"ssh_authorized_keys": key},
            "sourceDetails": {"sourceType": "image", "imageId": next(iter(oci_api.IMAGES))},
            "createVnicDetails": {"subnetId": "ocid1.subnet.oc1.us-ashburn-1.amaaaaaadefaultiad"},
        }
    )


def test_launch_is_deduplicated_by_the_retry_token(server: FakeCloudServer) -> None:
    server.admin.reset()
    tenancy = creds(server)["tenancy_ocid"]
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ8eGJfS0ZbXxxbLxQ3NnKJgZ0k5gM6mBHqKXqf1ShS5 t"

    def token(r: requests.PreparedRequest) -> None:  # not signed: OCI signs no opc-retry-token
        r.headers["opc-retry-token"] = "token-1"

    first = send(server, "POST", "/instances", body=launch_body(tenancy, key), tamper=token)
    again = send(server, "POST", "/instances", body=launch_body(tenancy, key), tamper=token)
    assert first.status_code == again.status_code == 200, first.text
    assert first.json()["id"] == again.json()["id"] and len(server.engine.live("oci")) == 1
    assert first.headers["opc-work-request-id"] == again.headers["opc-work-request-id"]
    other = send(server, "POST", "/instances", body=launch_body(tenancy, key, "VM.GPU.A10.2"), tamper=token)
    assert (other.status_code, other.json()["code"]) == (409, "Conflict")
    assert len(server.engine.live("oci")) == 1
    server.admin.reset()


def test_the_simulation_key_is_the_tokens() -> None:
    c = oci_auth.credentials("t1")
    assert c == oci_auth.credentials("t1") and c["fingerprint"] != oci_auth.credentials("t2")["fingerprint"]
    assert c["private_key"].startswith("-----BEGIN PRIVATE KEY-----")


def _fields(model: type) -> set[str]:
    return set(model().attribute_map.values())  # type: ignore[attr-defined]


def test_every_field_the_simulation_answers_is_the_published_models(server: FakeCloudServer) -> None:
    """The pinned SDK's models are generated from OCI's published API spec: each JSON object the
    simulation serves uses only their field names (a typo would reach the adapter as None)."""
    from oci.core import models as core
    from oci.identity import models as ident

    server.admin.reset()
    tenancy = creds(server)["tenancy_ocid"]
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ8eGJfS0ZbXxxbLxQ3NnKJgZ0k5gM6mBHqKXqf1ShS5 t"
    launched = send(server, "POST", "/instances", body=launch_body(tenancy, key)).json()
    nsg = send(
        server,
        "POST",
        "/networkSecurityGroups",
        body=(f'{{"compartmentId": "{tenancy}", "vcnId": "ocid1.vcn.oc1.us-ashburn-1.amaaaaaadefaultiad"}}'),
    ).json()
    checks = [
        (core.Instance, [launched]),
        (core.Shape, send(server, "GET", f"/shapes?compartmentId={tenancy}").json()),
        (core.Image, send(server, "GET", f"/images?compartmentId={tenancy}").json()),
        (core.Subnet, send(server, "GET", f"/subnets?compartmentId={tenancy}").json()),
        (core.NetworkSecurityGroup, [nsg]),
        (
            ident.AvailabilityDomain,
            send(server, "GET", f"/availabilityDomains?compartmentId={tenancy}").json(),
        ),
        (ident.RegionSubscription, send(server, "GET", f"/tenancies/{tenancy}/regionSubscriptions").json()),
        (ident.Tenancy, [send(server, "GET", f"/tenancies/{tenancy}").json()]),
    ]
    for model, rows in checks:
        assert rows, model.__name__
        for row in rows:
            assert set(row) <= _fields(model), (model.__name__, set(row) - _fields(model))
    for _ in range(100):
        attachments = send(server, "GET", f"/vnicAttachments?compartmentId={tenancy}").json()
        if attachments:
            break
        time.sleep(0.05)
    assert set(attachments[0]) <= _fields(core.VnicAttachment)
    vnic = send(server, "GET", f"/vnics/{attachments[0]['vnicId']}").json()
    assert set(vnic) <= _fields(core.Vnic) and vnic["publicIp"]
    server.admin.reset()
