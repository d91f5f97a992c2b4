"""Listing a cluster's nodes the way a user's Kubernetes client does: the official `kubernetes` package,
its server certificate verified against the kubeconfig's CA (never insecure-skip-tls-verify)."""

from __future__ import annotations

from typing import Any

import kubernetes
import yaml


def list_nodes(kubeconfig: dict[str, Any] | str) -> list[Any]:
    """The nodes `kubeconfig` (a dict, or its YAML text) shows; raises as the client does when the
    server cannot be reached or verified, or refuses the credential."""
    cfg = yaml.safe_load(kubeconfig) if isinstance(kubeconfig, str) else kubeconfig
    assert not cfg["clusters"][0]["cluster"].get("insecure-skip-tls-verify")
    conf = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config_from_dict(cfg, client_configuration=conf)
    assert conf.verify_ssl
    conf.retries = 0  # a refusal is the answer, not a reason to ask again
    with kubernetes.client.ApiClient(conf) as api:
        return list(kubernetes.client.CoreV1Api(api).list_node(_request_timeout=10).items)


def gpus_of(node: Any) -> str | None:
    allocatable: dict[str, str] = node.status.allocatable or {}
    return allocatable.get("nvidia.com/gpu")


def ready(node: Any) -> bool:
    return [c.status for c in node.status.conditions or [] if c.type == "Ready"] == ["True"]
