"""What INSTALL_K3S runs on a machine: k3s ready for remote clients and, on a GPU machine, for pods
that ask for `nvidia.com/gpu`.

- k3s is started with `--tls-san <the address gpuprov reaches the machine on>`, so a client
  dialling that address (a direct kubeconfig, `gpuprov kubeconfig`) verifies the server's
  certificate; 127.0.0.1 is always in it (the SSH tunnel's end).
- GPU machines (nvidia-smi answers): the NVIDIA container toolkit (installed from NVIDIA's apt
  repository unless the image has it), k3s with `--default-runtime nvidia` (k3s finds the runtime at
  start and registers it; as the default, the device plugin's own pod gets NVML without a
  RuntimeClass), then NVIDIA's device plugin DaemonSet; the step waits until the node advertises
  as many `nvidia.com/gpu` as nvidia-smi lists, and fails naming both numbers if it never does.
- Idempotent, and it never rewrites a k3s it did not install: the flags gpuprov last started k3s
  with are kept in ~/.gpuprov/k3s-exec, and the installer it used (at boot: providers/cloudinit.py
  keeps it in /var/lib/gpuprov) is run again only when they differ — re-running the installer with
  new INSTALL_K3S_EXEC is how k3s documents changing a server's flags. A k3s found without either
  (a fleet host's own) is checked and left as it is.

The installer's URL is a setting (GPUPROV_K3S_INSTALL_URL): a mirror where get.k3s.io is out of
reach, a local one in tests.
"""

from __future__ import annotations

import shlex

DEFAULT_K3S_INSTALL_URL = "https://get.k3s.io"
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"

# NVIDIA's device plugin as a DaemonSet, as its static deployment describes it
# (github.com/NVIDIA/k8s-device-plugin, deployments/static/nvidia-device-plugin.yml, v0.17.1,
# Apache-2.0): one pod per node registering the node's GPUs with the kubelet.
DEVICE_PLUGIN = f"""apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: nvidia-device-plugin-daemonset
  namespace: kube-system
spec:
  selector:
    matchLabels:
      name: nvidia-device-plugin-ds
  updateStrategy:
    type: RollingUpdate
  template:
    metadata:
      labels:
        name: nvidia-device-plugin-ds
    spec:
      tolerations:
      - key: nvidia.com/gpu
        operator: Exists
        effect: NoSchedule
      priorityClassName: system-node-critical
      containers:
      - image: {DEVICE_PLUGIN_IMAGE}
        name: nvidia-device-plugin-ctr
        env:
        - name: FAIL_ON_INIT_ERROR
          value: "false"
        securityContext:
          allowPrivilegeEscalation: false
          capabilities:
            drop: ["ALL"]
        volumeMounts:
        - name: kubelet-device-plugins-dir
          mountPath: /var/lib/kubelet/device-plugins
      volumes:
      - name: kubelet-device-plugins-dir
        hostPath:
          path: /var/lib/kubelet/device-plugins
          type: Directory
"""

# NVIDIA's documented apt install of the container toolkit (docs.nvidia.com/datacenter/cloud-native/
# container-toolkit/latest/install-guide.html, "With apt"), after checking root is at hand: nothing is
# fetched for a machine that could not install it anyway.
# Run in a subshell: each step must succeed for the next to run.
TOOLKIT = r"""sudo -n true || { echo "installing it needs root (passwordless sudo)" >&2; exit 1; }
sudo mkdir -p /usr/share/keyrings \
&& curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey \
  | sudo gpg --dearmor --yes -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg \
&& curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list \
  | sed 's#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://#g' \
  | sudo tee /etc/apt/sources.list.d/nvidia-container-toolkit.list >/dev/null \
&& sudo apt-get update -q \
&& sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q nvidia-container-toolkit
"""

TEMPLATE = r"""set -euo pipefail
san=__SAN__
state="$HOME/.gpuprov"
mkdir -p "$state"
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
fi
want="server --write-kubeconfig-mode 644 --tls-san $san"
if [ "$gpus" -gt 0 ]; then
  if ! command -v nvidia-container-runtime >/dev/null 2>&1; then
    ( __TOOLKIT__ ) >&2 || { echo "cannot install the NVIDIA container toolkit" >&2; exit 5; }
  fi
  want="$want --default-runtime nvidia"
fi
kept=""
for f in "$state/k3s-install.sh" /var/lib/gpuprov/k3s-install.sh; do
  if [ -s "$f" ]; then kept="$f"; break; fi
done
if ! command -v k3s >/dev/null 2>&1; then
  kept="$state/k3s-install.sh"
  curl -sfL __URL__ -o "$kept" \
    || { rm -f "$kept"; echo "cannot download the k3s installer from "__URL__ >&2; exit 3; }
fi
if [ -n "$kept" ]; then
  if [ "$(cat "$state/k3s-exec" 2>/dev/null || true)" != "$want" ]; then
    INSTALL_K3S_EXEC="$want" sh "$kept" || exit 4
    printf '%s\n' "$want" > "$state/k3s-exec"
  fi
  if [ "$gpus" -gt 0 ]; then
    k3s kubectl apply -f - <<'GPUPROV_DEVICE_PLUGIN'
__PLUGIN__GPUPROV_DEVICE_PLUGIN
    seen=""
    for _ in $(seq 1 __WAIT__); do
      seen=$(k3s kubectl get nodes -o 'jsonpath={.items[*].status.allocatable.nvidia\.com/gpu}' || true)
      [ "$seen" = "$gpus" ] && break
      sleep 1
    done
    if [ "$seen" != "$gpus" ]; then
      echo "the k3s node advertises nvidia.com/gpu=${seen:-none}; nvidia-smi lists $gpus" >&2
      exit 6
    fi
  fi
else
  echo "k3s found, not installed by gpuprov: left as it is" >&2
fi
k3s kubectl get nodes
"""


def k3s_script(install_url: str = DEFAULT_K3S_INSTALL_URL, tls_san: str = "127.0.0.1",
               gpu_wait_s: int = 120) -> str:
    """The script for a machine reached at `tls_san` (an address, parsed by the caller)."""
    return (TEMPLATE.replace("__URL__", shlex.quote(install_url)).replace("__SAN__", shlex.quote(tls_san))
            .replace("__TOOLKIT__", TOOLKIT).replace("__PLUGIN__", DEVICE_PLUGIN)
            .replace("__WAIT__", str(int(gpu_wait_s))))
