"""The state a SIMULATED k3s keeps on its machine (written by the simulated `k3s`, fakeclouds/k3s.py),
as the engine's simulated API server reads it (fakeclouds/k8s_api.py) at each request: the flags the
server was started with, the NVIDIA runtime and device plugin, and from those the one node."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from fakeclouds.k3s import STATE, VERSION


def state_dir(home: Path) -> Path:
    return home / STATE


def parse_flags(argv: list[str]) -> dict[str, Any]:
    """The flags of `k3s server` the simulation acts on: --tls-san (repeatable, comma lists) and
    --default-runtime, each as `--flag value` or `--flag=value`."""
    sans: list[str] = []
    config: dict[str, Any] = {"tls_sans": sans, "default_runtime": None}
    i = 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if name in ("--tls-san", "--default-runtime") and not eq:
            i += 1
            value = argv[i] if i < len(argv) else ""
        if name == "--tls-san":
            sans.extend(v for v in value.split(",") if v)
        elif name == "--default-runtime":
            config["default_runtime"] = value
        i += 1
    return config


def read_config(home: Path) -> dict[str, Any] | None:
    """What the server was started with and has since; None: k3s is not running here."""
    s = state_dir(home)
    try:
        config = parse_flags((s / "exec").read_text().split())
    except OSError:
        return None
    config["nvidia_runtime"] = (s / "nvidia-runtime").exists()
    config["device_plugin_gpus"] = None
    with contextlib.suppress(OSError, ValueError):
        config["device_plugin_gpus"] = int((s / "device-plugin").read_text().strip() or 0)
    return config


def node(home: Path) -> dict[str, Any]:
    """The one node, as /api/v1/nodes shows it (the simulated kubectl prints the same name)."""
    config = read_config(home) or {}
    gpus = 0
    if config.get("nvidia_runtime") and config.get("default_runtime") == "nvidia":
        gpus = config.get("device_plugin_gpus") or 0
    allocatable = {"cpu": "8", "memory": "32794716Ki", "pods": "110", "ephemeral-storage": "95001823898"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    machine = home.parent.name
    name = f"gpuprov-{machine[:12]}"
    return {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": name, "uid": machine, "labels": {
            "kubernetes.io/hostname": name, "node-role.kubernetes.io/control-plane": "true"}},
        "spec": {},
        "status": {
            "capacity": dict(allocatable), "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status (simulated)"}],
            "addresses": [{"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": VERSION, "kubeProxyVersion": VERSION,
                         "containerRuntimeVersion": "containerd://1.7.23-k3s2", "operatingSystem": "linux",
                         "architecture": "amd64", "osImage": "Ubuntu 22.04.5 LTS (simulated)",
                         "kernelVersion": "6.8.0-simulated", "bootID": machine,
                         "machineID": machine, "systemUUID": machine},
        },
    }
