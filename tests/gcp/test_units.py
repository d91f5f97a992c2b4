"""The GCP adapter's pure parts: credentials as the connect form takes them, names, the price table,
error mapping of failed operations, the simulation's JWT checks and list filters."""

from __future__ import annotations

import base64
import json
import time
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

from fakeclouds import gcp_auth, gcp_filter
from fakeclouds.errors import Invalid
from providers import gcp_catalog, registry
from providers.base import CapacityError, FailureScope, InvalidRequest, QuotaError, Transient
from providers.gcp import GcpProvider, instance_name
from tests.gcp.conftest import SIM_TOKEN, STRANGER_TOKEN

TOKEN = SIM_TOKEN


@pytest.fixture(scope="module")
def key_json() -> str:
    return json.dumps(gcp_auth.service_account_key(TOKEN))


def test_project_id_is_filled_from_the_key_when_left_empty(key_json: str) -> None:
    creds = GcpProvider.parse_credentials({"project_id": "", "service_account_key": key_json})
    assert creds.project_id == gcp_auth.PROJECT  # type: ignore[attr-defined]
    creds = GcpProvider.parse_credentials({"service_account_key": key_json})
    assert creds.project_id == gcp_auth.PROJECT  # type: ignore[attr-defined]
    given = GcpProvider.parse_credentials({"project_id": "other-project", "service_account_key": key_json})
    assert given.project_id == "other-project"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"service_account_key": "not json at all {secret-ish}"}, "service_account_key"),
        (
            {"service_account_key": json.dumps({"type": "authorized_user", "project_id": "p-12345"})},
            "service-account",
        ),
        ({"service_account_key": json.dumps({"type": "service_account", "project_id": "p-12345"})}, "lacks"),
        ({"project_id": "Bad_Project!", "service_account_key": "{}"}, "project_id"),
        ({"project_id": "abc-123456"}, "service_account_key"),
        (
            {
                "service_account_key": json.dumps(
                    {
                        "type": "service_account",
                        "client_email": "a@b",
                        "private_key": "k",
                        "private_key_id": "i",
                    }
                )
            },
            "project_id",
        ),
    ],
)
def test_bad_credentials_are_refused_naming_the_field_never_the_value(
    raw: dict[str, Any], words: str
) -> None:
    with pytest.raises(InvalidRequest) as exc:
        GcpProvider.parse_credentials(raw)
    assert words in exc.value.message
    assert "secret-ish" not in exc.value.message and "Bad_Project" not in exc.value.message


def test_the_connect_form_has_the_seed_fields() -> None:
    form = {row["name"]: row for row in GcpProvider.credentials_model.form()}
    assert form["project_id"]["required"] is False and form["project_id"]["label"] == "GCP Project ID"
    assert form["service_account_key"]["required"] and form["service_account_key"]["kind"] == "file"


def test_capabilities_follow_the_seed_row() -> None:
    caps = registry.capabilities("gcp")
    assert (caps.k3s, caps.k8s_api, caps.ports, caps.spot, caps.custom_image, caps.login_user) == (
        "cloud-init",
        True,
        True,
        True,
        True,
        "ubuntu",
    )
    assert caps.side_resources == ["firewall-rule"] and caps.region_required
    assert set(gcp_catalog.HOSTS) <= set(caps.regions)
    assert GcpProvider.api_hosts == ("compute.googleapis.com",)


def test_instance_names_follow_compute_engine_rules_and_are_stable() -> None:
    pattern = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
    short = instance_name("abcd1234", "gp-al-1234-a1")
    assert short == "gpuprov-abcd1234-gp-al-1234-a1"
    long_key = "k" * 60
    for key in (long_key, "ends-with-dash-", "a" * 40 + "-"):
        name = instance_name("abcd1234", key)
        import re

        assert re.fullmatch(pattern, name) and len(name) <= 63, name
        assert name == instance_name("abcd1234", key)
    assert instance_name("abcd1234", long_key) != instance_name("abcd1234", "k" * 59)


def test_prices_are_dated_and_spot_is_cheaper_everywhere() -> None:
    assert gcp_catalog.PRICED_ON
    for region, hosts in gcp_catalog.HOSTS.items():
        for machine, (on_demand, spot) in hosts.items():
            assert 0 < spot < on_demand, (region, machine)
        for gpu, (on_demand, spot) in gcp_catalog.GPUS[region].items():
            assert 0 < spot < on_demand, (region, gpu)
    t4 = gcp_catalog.price("us-central1", "n1-standard-4", [("nvidia-tesla-t4", 1)], spot=False)
    assert t4 == pytest.approx(0.189999 + 0.35, abs=1e-5)
    assert gcp_catalog.price("us-central1", "n1-standard-4", [("no-such-gpu", 1)], spot=False) is None
    assert gcp_catalog.split_type(gcp_catalog.combo_type("n1-standard-8", "nvidia-tesla-v100", 2)) == (
        "n1-standard-8",
        "nvidia-tesla-v100",
        2,
    )
    assert gcp_catalog.split_type("a2-highgpu-1g") == ("a2-highgpu-1g", None, 0)


class FakeOperation(SimpleNamespace):
    """A DONE operation as the SDK returns it, just the fields the adapter reads."""


def failed_op(code: str, message: str, http: int | None) -> Any:
    return FakeOperation(
        name="operation-1",
        error=SimpleNamespace(errors=[SimpleNamespace(code=code, message=message)]),
        http_error_status_code=http,
    )


@pytest.fixture
def adapter(key_json: str) -> GcpProvider:
    creds = GcpProvider.parse_credentials({"service_account_key": key_json})
    return GcpProvider(creds, installation_id="abcd1234")


def test_operation_errors_map_by_code_with_the_zone_or_region(adapter: GcpProvider) -> None:
    scope = FailureScope(
        provider="gcp", region="us-central1", zone="us-central1-a", instance_type="g2-standard-4"
    )
    cap = adapter._op_error(failed_op("ZONE_RESOURCE_POOL_EXHAUSTED", "no room", 503), scope)
    assert isinstance(cap, CapacityError) and cap.scope == scope
    # httpErrorStatusCode unset: the SDK's own waiting would not raise; the adapter still reads the code
    quiet = adapter._op_error(failed_op("ZONE_RESOURCE_POOL_EXHAUSTED", "no room", None), scope)
    assert isinstance(quiet, CapacityError)
    regional = adapter._op_error(
        failed_op(
            "QUOTA_EXCEEDED", "Quota 'NVIDIA_L4_GPUS' exceeded. Limit: 1.0 in region us-central1.", 403
        ),
        scope,
    )
    assert isinstance(regional, QuotaError) and regional.scope == FailureScope(
        provider="gcp", region="us-central1"
    )
    everywhere = adapter._op_error(
        failed_op("QUOTA_EXCEEDED", "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 1.0 globally.", 403), scope
    )
    assert isinstance(everywhere, QuotaError) and everywhere.scope == FailureScope(provider="gcp")
    assert isinstance(adapter._op_error(failed_op("INTERNAL_ERROR", "oops", 500), scope), Transient)
    assert adapter._op_error(FakeOperation(error=None), scope) is None


def _jwt(claims: dict[str, Any], token: str = TOKEN, kid: str | None = None) -> str:
    def b64(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    head = b64({"alg": "RS256", "typ": "JWT", "kid": kid or gcp_auth.key_id(token)})
    body = b64(claims)
    sig = gcp_auth.private_key(token).sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"Bearer {head}.{body}.{base64.urlsafe_b64encode(sig).rstrip(b'=').decode()}"


def test_the_simulation_verifies_signature_audience_and_expiry() -> None:
    verifier = gcp_auth.Verifier.for_token(TOKEN)
    now = time.time()
    good = {
        "iss": gcp_auth.CLIENT_EMAIL,
        "sub": gcp_auth.CLIENT_EMAIL,
        "aud": gcp_auth.AUDIENCE,
        "iat": now,
        "exp": now + 3600,
    }
    assert verifier.check(_jwt(good))["iss"] == gcp_auth.CLIENT_EMAIL
    scoped = {**good, "scope": "https://www.googleapis.com/auth/cloud-platform"}
    del scoped["aud"]
    verifier.check(_jwt(scoped))
    for bad in (
        _jwt(good, token=STRANGER_TOKEN),  # another key (another kid)
        _jwt(good, token=STRANGER_TOKEN, kid=gcp_auth.key_id(TOKEN)),  # right kid, forged signature
        _jwt({**good, "aud": "https://storage.googleapis.com/"}),
        _jwt({**good, "iat": now - 7200, "exp": now - 3600}),
        _jwt({**good, "exp": now + 7200}),  # longer than an hour
        _jwt({**good, "iss": "someone@else.iam.gserviceaccount.com"}),
        "Bearer not-a-jwt",
        None,
    ):
        with pytest.raises(gcp_auth.AuthFailure):
            verifier.check(bad)


def test_the_key_is_derived_from_the_token_the_same_everywhere() -> None:
    assert gcp_auth.service_account_key(TOKEN) == gcp_auth.service_account_key(TOKEN)
    assert gcp_auth.key_id(TOKEN) != gcp_auth.key_id("other")
    assert gcp_auth.private_key(TOKEN).key_size == 2048


@pytest.mark.parametrize(
    ("flt", "hit"),
    [
        ('labels.gpuprov-key = "k1"', True),
        ('(labels.gpuprov-installation = "abcd1234") (labels.gpuprov-key = "k2")', False),
        ('name eq "gpuprov-abcd1234-.*"', True),
        ("name eq gpuprov", False),
        ('id = 42 AND status != "RUNNING"', True),
    ],
)
def test_list_filters(flt: str, hit: bool) -> None:
    row = {
        "id": "42",
        "name": "gpuprov-abcd1234-k1",
        "status": "STAGING",
        "labels": {"gpuprov-installation": "abcd1234", "gpuprov-key": "k1"},
    }
    assert gcp_filter.parse(flt)(row) is hit


@pytest.mark.parametrize("flt", ['name = "a" OR name = "b"', "(name = a", "cpus > 3", "labels.k:*"])
def test_unsupported_filters_are_refused(flt: str) -> None:
    with pytest.raises(Invalid):
        gcp_filter.parse(flt)


def test_the_api_refuses_an_allocation_without_a_region_before_any_workflow() -> None:
    import asyncssh

    from api.placement import refusal, requirements
    from api.shared_bodies import InstanceCreate

    key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    body = InstanceCreate(cloud="gcp", gpu="l4", ssh_public_keys=[key])
    assert refusal("gcp", requirements(body)) == "Google Compute Engine needs a region"
    placed = body.model_copy(update={"region": "us-central1", "ports": [8080], "spot": True})
    assert refusal("gcp", requirements(placed)) is None
    nowhere = body.model_copy(update={"region": "mars-north1"})
    assert "no region" in str(refusal("gcp", requirements(nowhere)))


def test_importing_the_adapter_does_not_import_the_sdk() -> None:
    import subprocess
    import sys

    code = "import sys, providers.gcp; print(sorted(m for m in sys.modules if m.startswith('google')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_operations_and_their_request_ids_are_kept_an_hour(tmp_path: Any) -> None:
    from fakeclouds.gcp_state import RETENTION_S, GcpState, Operation

    def op(name: str, at: float) -> Operation:
        return Operation(
            name=name,
            project="p",
            zone="z",
            operation_type="insert",
            target_link="t",
            user="u",
            inserted_at=at,
            done_at=at,
        )

    st = GcpState(tmp_path / "gcp.json")
    st.add(op("old", 0.0), "11111111-1111-4111-8111-111111111111")
    st.add(op("recent", RETENTION_S - 1), "22222222-2222-4222-8222-222222222222")
    assert st.by_request("p", "11111111-1111-4111-8111-111111111111") is not None
    st.add(op("new", RETENTION_S + 1), None)
    assert st.by_request("p", "11111111-1111-4111-8111-111111111111") is None
    assert sorted(GcpState(tmp_path / "gcp.json").operations) == ["new", "recent"]  # persisted


def test_the_simulations_key_primes_are_cached_per_machine_and_a_bad_cache_is_derived_again(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from fakeclouds import gcp_auth

    monkeypatch.setenv("GPUPROV_SIM_CACHE", str(tmp_path))
    token = "cache-test-token"
    first = gcp_auth._primes(token)  # derived, then written
    path = gcp_auth._cache_file(token)
    assert path.exists() and oct(path.stat().st_mode & 0o777) == "0o600"
    assert gcp_auth._primes(token) == first  # read back
    monkeypatch.setattr(gcp_auth, "_derive_primes", lambda t: pytest.fail("derived although cached"))
    assert gcp_auth._primes(token) == first
    monkeypatch.undo()
    monkeypatch.setenv("GPUPROV_SIM_CACHE", str(tmp_path))
    path.write_text(path.read_text().replace(str(first[0])[:6], "999999", 1))  # tampered: check fails
    assert gcp_auth._primes(token) == first  # derived again, the same primes
