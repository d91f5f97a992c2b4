"""DigitalOcean: a custom-scoped token."""

from __future__ import annotations

from providers.permissions.base import UNCONFIRMED, CloudPermissions, each

_DO_CALLS: dict[str, tuple[str, ...]] = {
    "GET /account": ("account:read",),
    "GET /sizes": ("sizes:read",),
    "GET /account/keys/{ident}": ("ssh_key:read",),
    "POST /account/keys": ("ssh_key:create", "ssh_key:read"),
    # droplet:create requires droplet:read, regions:read, sizes:read, actions:read and image:read on
    # the token; the droplet is tagged and given a key at creation (tag:create, ssh_key:read).
    "POST /droplets": ("droplet:create", "droplet:read", "regions:read", "sizes:read", "actions:read",
                       "image:read", "tag:create", "ssh_key:read"),
    "GET /droplets": ("droplet:read",),
    "GET /droplets/{droplet_id}": ("droplet:read",),
    "DELETE /droplets/{droplet_id}": ("droplet:delete", "droplet:read"),
    "GET /tags": ("tag:read",),
    "POST /tags": ("tag:create", "tag:read"),
    "DELETE /tags/{name}": ("tag:delete", "tag:read"),
    "GET /firewalls": ("firewall:read",),
    "POST /firewalls": ("firewall:create", "firewall:read", "tag:read"),
    "DELETE /firewalls/{fid}": ("firewall:delete", "firewall:read"),
}
ENTRY = CloudPermissions(
    kind="custom-scoped personal access token",
    summary=f"a token with custom scopes ({len(each(_DO_CALLS))}), not full access",
    permissions=each(_DO_CALLS), calls=_DO_CALLS,
    document=" ".join(sorted(each(_DO_CALLS))),
    sources=("https://docs.digitalocean.com/reference/api/scopes (the scopes, each with its required ones)",
             "https://docs.digitalocean.com/reference/api/scopes/droplet/create (required: droplet:read, "
             "regions:read, sizes:read, actions:read, image:read; associated: tag:create, ssh_key:read)",
             "https://docs.digitalocean.com/reference/api/create-personal-access-token/"),
    notes=("regions:read, actions:read and image:read are the token's price for droplet:create: "
           "DigitalOcean will not add droplet:create without them.",
           "ssh_key:create/tag:create/tag:delete needing their :read scope follows the documented rule "
           "\"a non-read scope needs the read scope of its resource\".",
           "Checked against the simulation only " + UNCONFIRMED + "."),
)
