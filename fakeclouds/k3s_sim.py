"""A SIMULATED `k3s` program: what `$HOME/bin/k3s` runs on a simulated machine (fakeclouds/k3s.py
writes the launcher). No Kubernetes runs anywhere: this keeps the state a k3s server would have in
the machine's `$HOME/.simulated-k3s/`, and the engine's simulated API server
(fakeclouds/k8s_api.py) serves it over TLS on 6443.

- `k3s server [flags]` records the flags (`--tls-san`, `--default-runtime`, `--write-kubeconfig-mode`),
  makes the PKI (fakeclouds/k3s_pki.py) and writes the kubeconfig, then returns: the simulated
  "service" is the engine's listener. The real installer starts `k3s server $INSTALL_K3S_EXEC` as
  a systemd unit; the simulated installer runs this instead.
- An image with k3s but no state yet (k3s preinstalled, its service started at boot): the first
  `k3s kubectl` starts it with no flags, as that boot would have.
- `k3s kubectl`: `get nodes` (table, `-o json`, and the one jsonpath gpuprov asks for), `get
  runtimeclass nvidia`, `config view --raw`, `apply -f -` of the NVIDIA device plugin.

The node advertises `nvidia.com/gpu` only as a real one would: the device plugin applied, the NVIDIA
container runtime present when the server started and the default runtime (`--default-runtime
nvidia`) — otherwise the plugin's pod finds no NVML and the node has no GPUs to allocate.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

VERSION = "v1.31.4+k3s1"
STATE = ".simulated-k3s"
GPU_JSONPATH = r"{.items[*].status.allocatable.nvidia\.com/gpu}"


def state_dir(home: Path) -> Path:
    return home / STATE


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o600)
    os.replace(tmp, path)


def read_config(home: Path) -> dict[str, Any] | None:
    """What the server was started with; None: k3s is not running here."""
    try:
        return dict(json.loads((state_dir(home) / "server.json").read_text()))
    except (OSError, ValueError):
        return None


def parse_flags(argv: list[str]) -> dict[str, Any]:
    sans: list[str] = []
    config: dict[str, Any] = {"argv": argv, "tls_sans": sans, "default_runtime": None,
                              "kubeconfig_mode": "600"}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in ("--tls-san", "--default-runtime", "--write-kubeconfig-mode") and not eq:
            i += 1
            value = argv[i] if i < len(argv) else ""
        if name == "--tls-san":
            sans.extend(v for v in value.split(",") if v)
        elif name == "--default-runtime":
            config["default_runtime"] = value
        elif name == "--write-kubeconfig-mode":
            config["kubeconfig_mode"] = value
        i += 1
    return config


def _gpu_count() -> int:
    """The GPUs the machine's (simulated) nvidia-smi lists, as NVML would tell the device plugin."""
    if shutil.which("nvidia-smi") is None:
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def node(home: Path) -> dict[str, Any]:
    """The one node, as /api/v1/nodes shows it."""
    config = read_config(home) or {}
    plugin = config.get("device_plugin") or {}
    gpus = 0
    if plugin and config.get("nvidia_runtime") and config.get("default_runtime") == "nvidia":
        gpus = int(plugin.get("gpus", 0))
    allocatable = {"cpu": "8", "memory": "32794716Ki", "pods": "110", "ephemeral-storage": "95001823898"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    name = f"gpuprov-{home.parent.name[:12]}"
    return {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": name, "uid": home.parent.name, "labels": {
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
                         "kernelVersion": "6.8.0-simulated", "bootID": home.parent.name,
                         "machineID": home.parent.name, "systemUUID": home.parent.name},
        },
    }


def kubeconfig(home: Path) -> str:
    """The kubeconfig k3s writes (/etc/rancher/k3s/k3s.yaml): server on 127.0.0.1:6443, the server
    CA, the admin client certificate and key."""
    import base64

    from fakeclouds import k3s_pki

    pki = k3s_pki.ensure(state_dir(home) / "pki")

    def b64(name: str) -> str:
        return base64.b64encode(pki.read(name)).decode()

    return (
        "apiVersion: v1\nclusters:\n- cluster:\n"
        f"    certificate-authority-data: {b64('server-ca.crt')}\n"
        "    server: https://127.0.0.1:6443\n  name: default\n"
        "contexts:\n- context:\n    cluster: default\n    user: default\n  name: default\n"
        "current-context: default\nkind: Config\npreferences: {}\nusers:\n- name: default\n  user:\n"
        f"    client-certificate-data: {b64('client-admin.crt')}\n"
        f"    client-key-data: {b64('client-admin.key')}\n"
    )


def server(home: Path, argv: list[str], *, quiet: bool = False) -> int:
    previous = read_config(home) or {}
    config = parse_flags(argv)
    config["nvidia_runtime"] = shutil.which("nvidia-container-runtime") is not None
    if previous.get("device_plugin"):
        config["device_plugin"] = previous["device_plugin"]  # the cluster's objects outlive a restart
    state_dir(home).mkdir(parents=True, exist_ok=True)
    # The mode k3s would give it is recorded, not applied: on the host, a simulated machine's files are
    # the simulation's user's only (its home is inside GPUPROV_HOME).
    _write(state_dir(home) / "k3s.yaml", kubeconfig(home))
    _write(state_dir(home) / "server.json", json.dumps(config))
    if not quiet:
        print(f"[INFO]  simulated k3s server started with: {' '.join(argv) or '(no flags)'}")
    return 0


def _running(home: Path) -> dict[str, Any]:
    config = read_config(home)
    if config is None:  # an image's k3s: its service started at boot, with no flags
        server(home, [], quiet=True)
        config = read_config(home) or {}
    return config


def apply(home: Path, manifest: str) -> int:
    if "kind: DaemonSet" not in manifest or "nvidia-device-plugin" not in manifest:
        print("simulated k3s: only the NVIDIA device plugin's DaemonSet can be applied here", file=sys.stderr)
        return 1
    config = _running(home)
    created = "configured" if config.get("device_plugin") else "created"
    config["device_plugin"] = {"gpus": _gpu_count()}
    _write(state_dir(home) / "server.json", json.dumps(config))
    print(f"daemonset.apps/nvidia-device-plugin-daemonset {created}")
    return 0


def kubectl(home: Path, args: list[str]) -> int:
    config = _running(home)
    if args[:3] == ["config", "view", "--raw"]:
        sys.stdout.write((state_dir(home) / "k3s.yaml").read_text())
        return 0
    if args[:2] == ["apply", "-f"] and args[2:3] == ["-"]:
        return apply(home, sys.stdin.read())
    if args[:2] in (["get", "nodes"], ["get", "node"]):
        n = node(home)
        rest = args[2:]
        if rest == ["-o", "json"]:
            print(json.dumps({"kind": "NodeList", "apiVersion": "v1", "items": [n]}, indent=2))
        elif rest in (["-o", f"jsonpath={GPU_JSONPATH}"], [f"-o=jsonpath={GPU_JSONPATH}"]):
            sys.stdout.write(n["status"]["allocatable"].get("nvidia.com/gpu", ""))
        elif rest in ([], ["--no-headers"]):
            if not rest:
                print("NAME                    STATUS   ROLES                  AGE   VERSION")
            print(f"{n['metadata']['name']:<23} Ready    control-plane,master   1m    {VERSION}")
        else:
            print(f"simulated k3s: unsupported: kubectl {' '.join(args)}", file=sys.stderr)
            return 1
        return 0
    if args[:3] == ["get", "runtimeclass", "nvidia"]:
        # k3s registers the `nvidia` RuntimeClass when it finds the NVIDIA container runtime at start.
        if config.get("nvidia_runtime"):
            print("runtimeclass.node.k8s.io/nvidia")
            return 0
        print('Error from server (NotFound): runtimeclasses.node.k8s.io "nvidia" not found', file=sys.stderr)
        return 1
    print(f"simulated k3s: unsupported: kubectl {' '.join(args)}", file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    home = Path(os.environ["HOME"])
    if argv[:1] == ["--version"]:
        print(f"k3s version {VERSION} (simulated)")
        return 0
    if argv[:1] == ["server"]:
        return server(home, argv[1:])
    if argv[:1] == ["kubectl"]:
        return kubectl(home, argv[1:])
    print(f"simulated k3s: unsupported command: {' '.join(argv)}", file=sys.stderr)
    return 1
