"""RunPod: a Restricted API key."""

from __future__ import annotations

from providers.permissions.base import UNCONFIRMED, CloudPermissions, same

_RUNPOD_RW = "Restricted key: Read/Write on the GraphQL/REST API"
_RUNPOD_CALLS = same(("GET /account/ssh-keys", "GET /catalog/gpus", "GET /catalog/datacenters", "GET /pods",
                       "GET /pods/{pod}", "POST /pods", "DELETE /pods/{pod}"), _RUNPOD_RW)
ENTRY = CloudPermissions(
    kind="API key permission level",
    summary="a Restricted API key: Read/Write on the pods API, None for Serverless endpoints (the AI API)",
    permissions=(_RUNPOD_RW,), calls=_RUNPOD_CALLS,
    document="Settings → API Keys → Create API Key → Restricted: GraphQL/REST API Read/Write; AI API "
             "(Serverless endpoints) None.",
    sources=("https://docs.runpod.io/get-started/api-keys (All / Restricted / Read Only; per-API None, "
             "Restricted, Read/Write, Read Only)",),
    notes=("Creating pods needs write, so Read Only will not do; RunPod's levels are per API, not per "
           "call. The REST API following the GraphQL API's level " + UNCONFIRMED + ".",
           "Checked against the simulation only " + UNCONFIRMED + "."),
)
