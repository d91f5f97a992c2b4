"""Each cloud declares the clouds page's capability row exactly (../shared/seeds: "Capabilities",
"At a glance"): the row is the specification, so it is written out here once more, by hand, and
compared with what each adapter declares. Vast.ai has no row there: it gets RunPod's, plus --spot
(an interruptible bid); nor has Modal: it gets the row issue 19 gives it."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from providers import registry


class Row(NamedTuple):
    k3s: str  # "cloud-init" (at boot: cloud-init or a startup script), "ssh", "none"
    k8s_direct: bool  # "direct" (else an SSH tunnel, or no k3s at all)
    port: bool
    spot: bool
    image: bool
    login: str | None  # None: "dictated by the pod" / the user the API returns
    side_resources: bool  # whether any per-VM side resource is listed


SEED = {
    "aws": Row("cloud-init", True, True, True, True, "ubuntu", True),
    "gcp": Row("cloud-init", True, True, True, True, "ubuntu", True),
    "massedcompute": Row("ssh", False, False, False, True, None, False),
    "hyperstack": Row("cloud-init", True, True, True, True, "ubuntu", False),
    "lambda": Row("cloud-init", True, True, False, True, "ubuntu", True),
    "digitalocean": Row("cloud-init", True, True, False, True, "root", True),
    "verda": Row("cloud-init", False, False, True, True, "root", True),
    "primeintellect": Row("ssh", False, False, False, False, None, False),
    "runpod": Row("none", False, False, False, True, "root", False),
    "vastai": Row("none", False, False, True, True, "root", False),
    # The page says "direct"; the adapter cannot yet restrict 6443 to the caller's networks (no security
    # group of its own: providers/nebius.py), so it offers the SSH tunnel instead. A named deviation.
    "nebius": Row("cloud-init", False, True, True, True, "ubuntu", False),
    # "Bare-metal RDMA GPU clusters" (single machines): k3s at boot, --port by an NSG per machine.
    "oci": Row("cloud-init", True, True, True, True, "ubuntu", True),
    # No row on the clouds page: issue 19's (containers, so no k3s; no --port beyond its tunnels).
    "modal": Row("none", False, False, False, False, "root", False),
    # A local sshd container (issue's row): no systemd, no firewall, ubuntu@ a random local port.
    "docker": Row("none", False, False, False, False, "ubuntu", False),
}


@pytest.mark.parametrize("cloud", sorted(SEED))
def test_the_adapter_declares_the_seed_row(cloud: str) -> None:
    caps, row = registry.capabilities(cloud), SEED[cloud]
    assert caps.k3s == row.k3s
    assert caps.k8s_api == row.k8s_direct
    assert (caps.ports, caps.spot, caps.custom_image) == (row.port, row.spot, row.image)
    if row.login is not None:
        assert caps.login_user == row.login
    assert bool(caps.side_resources) == row.side_resources, caps.side_resources
    if caps.k3s == "none":
        assert caps.k3s_reason, "the note shown when the default k3s cluster is skipped"
    if not caps.ports:
        assert caps.ports_reason, "the cloud's own reason for refusing --port"


def test_regions_and_defaults_follow_the_at_a_glance_table() -> None:
    hyperstack = registry.capabilities("hyperstack")
    assert hyperstack.regions == ["CANADA-1", "US-1", "NORWAY-1"]
    assert hyperstack.default_regions == ["CANADA-1", "US-1"]
    lam = registry.capabilities("lambda")
    assert lam.default_regions and all(r.startswith("us-") for r in lam.default_regions)
    do = registry.capabilities("digitalocean")
    assert {"tor1", "nyc2", "atl1"} <= set(do.default_regions)
    assert registry.capabilities("massedcompute").ports_reason == "Massed Compute has no firewall API"
    for cloud in ("aws", "gcp"):
        assert registry.capabilities(cloud).region_required


def test_only_modal_stops_a_machine_after_a_set_lifetime() -> None:
    """--max-hours has no column on the clouds page; the issue gives Modal one (a sandbox lives at most
    its timeout, capped at 24 h, set from the allocation). No other cloud stops a machine itself."""
    enforcing = {cloud: registry.capabilities(cloud).max_lifetime_h for cloud in SEED}
    assert {cloud: h for cloud, h in enforcing.items() if h is not None} == {"modal": 24}
    modal = registry.capabilities("modal")
    assert modal.lifetime_reason == "Modal caps a sandbox's lifetime (its timeout) at 24 h"
