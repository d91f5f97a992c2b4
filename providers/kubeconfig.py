"""An instance's kubeconfig, as gpuprov hands it out: the one k3s wrote on the machine
(`k3s kubectl config view --raw`: server https://127.0.0.1:6443, the cluster's CA, the admin client
certificate and key), checked for exactly that shape and pointed at where the client will dial —
the machine's public address (direct access) or the local end of an SSH tunnel.

How each cloud's machines are reached (`access`): *direct* where the cloud's firewall can open 6443
to the caller (Capabilities.k8s_api), *tunnel* where only SSH reaches the machine, none where the
machine cannot host k3s (Capabilities.k3s == "none", with the cloud's reason).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Literal

import yaml

from providers.base import K8S_API_PORT, Capabilities

Access = Literal["direct", "tunnel"]


class KubeconfigError(ValueError):
    """What the machine printed is not a k3s kubeconfig with a client certificate."""


class NoK8sAccess(Exception):
    """The cloud's machines cannot host k3s: its reason."""


def access_of(caps: Capabilities) -> Access:
    """How a client reaches the API server on this cloud's machines (NoK8sAccess: not at all)."""
    if caps.k3s == "none":
        raise NoK8sAccess(caps.k3s_reason or f"{caps.display_name} machines cannot host k3s")
    return "direct" if caps.k8s_api else "tunnel"


def server_url(host: str, port: int = K8S_API_PORT) -> str:
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def _b64(entry: dict[str, Any], field: str) -> str:
    value = entry.get(field)
    if not isinstance(value, str) or not value:
        raise KubeconfigError(f"the kubeconfig has no {field}")
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigError(f"the kubeconfig's {field} is not base64") from None
    return value


def pointed_at(raw: str, server: str, name: str) -> str:
    """k3s's kubeconfig (`raw`), its one cluster at `server`, its cluster, user and context named
    `name` (so it merges beside others). KubeconfigError when it is not one cluster and one user with
    embedded CA, client certificate and key: a token, a file path or an exec plugin is refused."""
    try:
        cfg = yaml.safe_load(raw)
    except yaml.YAMLError:
        raise KubeconfigError("the machine's kubeconfig is not YAML") from None
    if not isinstance(cfg, dict):
        raise KubeconfigError("the machine's kubeconfig is not a mapping")
    clusters, users = cfg.get("clusters") or [], cfg.get("users") or []
    if len(clusters) != 1 or len(users) != 1:
        raise KubeconfigError(f"expected one cluster and one user, found {len(clusters)} and {len(users)}")
    cluster = (clusters[0] or {}).get("cluster") or {}
    user = (users[0] or {}).get("user") or {}
    out = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {
            "server": server, "certificate-authority-data": _b64(cluster, "certificate-authority-data")}}],
        "users": [{"name": name, "user": {
            "client-certificate-data": _b64(user, "client-certificate-data"),
            "client-key-data": _b64(user, "client-key-data")}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "preferences": {},
    }
    return str(yaml.safe_dump(out, sort_keys=False))


def with_server(kubeconfig: str, server: str) -> str:
    """A kubeconfig from `pointed_at`, its cluster's server replaced (the tunnel's local port)."""
    cfg = yaml.safe_load(kubeconfig)
    cfg["clusters"][0]["cluster"]["server"] = server
    return str(yaml.safe_dump(cfg, sort_keys=False))
