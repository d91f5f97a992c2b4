"""Prime Intellect: API key permissions."""

from __future__ import annotations

from providers.permissions.base import UNCONFIRMED, CloudPermissions, each, same

_PI_RW = "Instances: Read and Write"
_PI_READ = "Availability: Read"
_PI_CALLS: dict[str, tuple[str, ...]] = {
    "GET /user/whoami": (_PI_READ,),
    "GET /availability/gpus": (_PI_READ,),
    **same(("GET /pods/", "GET /pods/status", "POST /pods/", "DELETE /pods/{pod_id}", "GET /ssh_keys/",
             "POST /ssh_keys/"), _PI_RW),
}
ENTRY = CloudPermissions(
    kind="API key permissions",
    summary="an API key with Instances read and write (and availability read); nothing else",
    permissions=each(_PI_CALLS), calls=_PI_CALLS,
    document=f"Settings → API Keys → Create API Key: {_PI_RW}; {_PI_READ}.",
    sources=("https://docs.primeintellect.ai/api-reference/managing-pods (\"API Key with Instances -> Read "
             "permission (or Read and Write …)\")",),
    notes=("Which permission the availability, whoami and SSH-key routes sit under is not documented in "
           "what we read " + UNCONFIRMED + ".",
           "Checked against the simulation only " + UNCONFIRMED + "."),
)
