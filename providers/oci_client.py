"""The `oci` SDK behind the OCI adapter (providers/oci.py): client construction, paging, the request
models a launch sends. The SDK is ~250 MB and takes seconds to import, so nothing imports it at module
level: only a connection to OCI that makes its first call pays for it (providers.registry, the API
and the fast tests never do).

- Auth: the SDK's own `oci.signer.Signer` (draft-cavage HTTP signatures over `date (request-target)
  host`, plus `content-length content-type x-content-sha256` on bodies), built from the connect form's
  key content; the key never touches a file.
- Retries: the SDK's default strategy retries 8 times over up to 600 s and adds a random retry token;
  every client here gets `NoneRetryStrategy` and no circuit breaker (Temporal owns retrying,
  providers/sdk.py), and the adapter passes its own `opc_retry_token`.
- Endpoints: per region from the SDK's templates (`iaas.<region>.oraclecloud.com`, ...), or one
  `service_endpoint` for every client when the connection names an endpoint (a proxy, the simulation).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from providers.base import K8S_API_PORT, AuthError, Transient

TIMEOUT = (10.0, 60.0)  # (connect, read) seconds: a launch answers in seconds
MAX_PAGES = 100


@dataclass
class Clients:
    identity: Any
    compute: Any
    network: Any


class ClientPool:
    """One (identity, compute, network) client set per region, built on first use (thread-safe: the
    SDK calls run on the shared pool)."""

    def __init__(
        self,
        *,
        tenancy: str,
        user: str,
        fingerprint: str,
        home_region: str,
        private_key: str,
        endpoint: str | None,
        ca_file: Callable[[], str | None],
    ) -> None:
        self._conf = {"tenancy": tenancy, "user": user, "fingerprint": fingerprint, "region": home_region}
        self._key, self._endpoint, self._ca_file = private_key, endpoint, ca_file
        self._by_region: dict[str, Clients] = {}
        self._lock = threading.Lock()

    @property
    def single_endpoint(self) -> bool:
        """Every region is answered by one endpoint (an override): one client set serves them all."""
        return self._endpoint is not None

    def get(self, region: str) -> Clients:
        slot = "*" if self._endpoint else region
        with self._lock:
            found = self._by_region.get(slot)
            if found is None:
                found = self._by_region[slot] = self._build(region)
            return found

    def _build(self, region: str) -> Clients:
        import oci  # lazily: see the module docstring

        try:
            signer = oci.signer.Signer(
                self._conf["tenancy"],
                self._conf["user"],
                self._conf["fingerprint"],
                private_key_file_location=None,
                private_key_content=self._key,
            )
        except Exception:  # noqa: BLE001 — the SDK's key errors say nothing the user needs beyond this
            raise AuthError("oci: the private key is not a readable PEM RSA private key") from None
        config = {**self._conf, "region": region, "key_content": self._key}  # validate_config wants a key
        kwargs: dict[str, Any] = {
            "signer": signer,
            "retry_strategy": oci.retry.NoneRetryStrategy(),
            # nor a client-side circuit breaker (OCI_SDK_DEFAULT_CIRCUITBREAKER_ENABLED could turn one on)
            "circuit_breaker_strategy": oci.circuit_breaker.NoCircuitBreakerStrategy(),
            "timeout": TIMEOUT,
        }
        if self._endpoint:
            kwargs["service_endpoint"] = self._endpoint
        made = Clients(
            identity=oci.identity.IdentityClient(config, **kwargs),
            compute=oci.core.ComputeClient(config, **kwargs),
            network=oci.core.VirtualNetworkClient(config, **kwargs),
        )
        ca = self._ca_file()
        if ca:
            for client in (made.identity, made.compute, made.network):
                client.base_client.session.verify = ca
        return made


def all_pages(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
    """Every item of a paged list call (`opc-next-page`), within one blocking call."""
    items: list[Any] = []
    page: str | None = None
    for _ in range(MAX_PAGES):
        resp = fn(*args, **({**kwargs, "page": page} if page else kwargs))
        items += list(resp.data or [])
        if not resp.has_next_page:
            return items
        page = resp.next_page
    raise Transient(f"oci: a listing has more than {MAX_PAGES} pages")


def launch_details(
    *,
    compartment: str,
    ad: str,
    shape: str,
    name: str,
    image: str,
    subnet: str,
    nsg: str,
    keys: list[str],
    user_data_b64: str | None,
    spot: bool,
    tags: dict[str, str],
) -> Any:
    from oci.core import models as m

    metadata = {"ssh_authorized_keys": "\n".join(k.strip() for k in keys)}
    if user_data_b64:
        metadata["user_data"] = user_data_b64
    return m.LaunchInstanceDetails(
        compartment_id=compartment,
        availability_domain=ad,
        shape=shape,
        display_name=name,
        freeform_tags=tags,
        metadata=metadata,
        source_details=m.InstanceSourceViaImageDetails(source_type="image", image_id=image),
        create_vnic_details=m.CreateVnicDetails(subnet_id=subnet, assign_public_ip=True, nsg_ids=[nsg]),
        preemptible_instance_config=m.PreemptibleInstanceConfigDetails(
            preemption_action=m.TerminatePreemptionAction(type="TERMINATE", preserve_boot_volume=False)
        )
        if spot
        else None,
    )


def nsg_details(*, compartment: str, vcn: str, name: str, tags: dict[str, str]) -> Any:
    from oci.core import models as m

    return m.CreateNetworkSecurityGroupDetails(
        compartment_id=compartment, vcn_id=vcn, display_name=name, freeform_tags=tags
    )


ANYWHERE = "0.0.0.0/0"
Opening = tuple[int, str]  # (TCP port, source CIDR) an ingress rule opens


def wanted_openings(ports: list[int], k8s_api_from: list[str]) -> list[Opening]:
    """SSH and the asked ports from anywhere; the Kubernetes API port from the asked networks only."""
    anywhere = [(p, ANYWHERE) for p in [22, *ports]]
    return list(dict.fromkeys([*anywhere, *((K8S_API_PORT, c) for c in k8s_api_from)]))


def openings_of(rules: list[Any]) -> set[Opening]:
    """The single-port TCP ingress openings among an NSG's rules (`SecurityRule`s as listed)."""
    out: set[Opening] = set()
    for r in rules:
        tcp = r.tcp_options
        span = tcp.destination_port_range if tcp is not None else None
        if (
            r.direction == "INGRESS"
            and r.protocol == "6"
            and r.source_type in (None, "CIDR_BLOCK")
            and span is not None
            and span.min == span.max
            and tcp.source_port_range is None
        ):
            out.add((int(span.min), str(r.source)))
    return out


def ingress_rules(openings: list[Opening]) -> Any:
    """Stateful TCP ingress rules for `openings` (an NSG denies what it does not allow)."""
    from oci.core import models as m

    rules = [
        m.AddSecurityRuleDetails(
            direction="INGRESS",
            protocol="6",
            source=source,
            source_type="CIDR_BLOCK",
            is_stateless=False,
            description=f"gpuprov k8s api tcp/{p}" if p == K8S_API_PORT and source != ANYWHERE
            else f"gpuprov tcp/{p}",
            tcp_options=m.TcpOptions(destination_port_range=m.PortRange(min=p, max=p)),
        )
        for p, source in openings
    ]
    return m.AddNetworkSecurityGroupSecurityRulesDetails(security_rules=rules)
