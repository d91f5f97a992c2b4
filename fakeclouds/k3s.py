"""A SIMULATED `k3s` on the simulated clouds' images, and a SIMULATED installer for hosts without one.

The simulated machines have no network and run no Kubernetes. `SCRIPT` (bash: it runs on every
simulated allocation's k3s step, so it stays cheap) keeps the state a k3s server would have in the
machine's `$HOME/.simulated-k3s/`; the engine reads it (fakeclouds/k3s_sim.py) and serves it over TLS on
6443 (fakeclouds/k8s_api.py).

- `k3s server [flags]` records the flags (`exec`: the engine reads `--tls-san` and `--default-runtime`
  from it), whether the NVIDIA container runtime is there (`nvidia-runtime`, as k3s looks for it at
  start), and writes the kubeconfig from the machine's certificates (`pki/`, fakeclouds/k3s_pki.py:
  made by the engine for an image with k3s, else once here), then returns: the simulated "service" is
  the engine's listener. The real installer starts `k3s server $INSTALL_K3S_EXEC` as a systemd unit.
- An image with k3s but no state yet (k3s preinstalled, its service started at boot): the first
  `k3s kubectl` starts it with no flags, as that boot would have.
- `k3s kubectl`: `get nodes` (table, `--no-headers`, and the one jsonpath gpuprov asks for), `get
  runtimeclass nvidia`, `config view --raw`, `apply -f -` of the NVIDIA device plugin.

The node advertises `nvidia.com/gpu` only as a real one would: the device plugin applied, the NVIDIA
runtime present when the server started and the default one (`--default-runtime nvidia`).

An image that ships `k3s` stands for one where gpuprov's boot script installed it: it also carries
that script's kept installer (`KEPT_INSTALLER`), which gpuprov's SSH step re-runs with the flags it
wants — so nothing on a simulated machine downloads anything.
"""

from __future__ import annotations

import sys

VERSION = "v1.31.4+k3s1"
STATE = ".simulated-k3s"  # under the machine's home
GPU_JSONPATH = r"{.items[*].status.allocatable.nvidia\.com/gpu}"

SCRIPT = r"""#!/usr/bin/env bash
# SIMULATED k3s, written by gpuprov's fakeclouds: no Kubernetes runs here (fakeclouds/k3s.py).
S="$HOME/.simulated-k3s"
NODE="gpuprov-$(basename "$(dirname "$HOME")" | cut -c1-12)"
umask 077
start() {  # k3s server FLAGS: record them, then write the kubeconfig
  mkdir -p "$S"
  printf '%s\n' "$*" > "$S/exec.tmp" && mv "$S/exec.tmp" "$S/exec"
  rm -f "$S/nvidia-runtime"
  if command -v nvidia-container-runtime >/dev/null 2>&1; then : > "$S/nvidia-runtime"; fi
  [ -d "$S/pki" ] || __PYTHON__ -m fakeclouds.k3s_pki "$S/pki" || return 1
  {
    echo "apiVersion: v1"; echo "clusters:"; echo "- cluster:"
    echo "    certificate-authority-data: $(base64 -w0 "$S/pki/server-ca.crt")"
    echo "    server: https://127.0.0.1:6443"; echo "  name: default"
    echo "contexts:"; echo "- context:"; echo "    cluster: default"; echo "    user: default"
    echo "  name: default"
    echo "current-context: default"; echo "kind: Config"; echo "preferences: {}"; echo "users:"
    echo "- name: default"; echo "  user:"
    echo "    client-certificate-data: $(base64 -w0 "$S/pki/client-admin.crt")"
    echo "    client-key-data: $(base64 -w0 "$S/pki/client-admin.key")"
  } > "$S/k3s.yaml.tmp" && mv "$S/k3s.yaml.tmp" "$S/k3s.yaml"
}
running() { [ -f "$S/exec" ] || start; }  # an image's k3s: started at boot with no flags
gpus() {  # what the node advertises as allocatable nvidia.com/gpu
  if [ -f "$S/device-plugin" ] && [ -f "$S/nvidia-runtime" ] \
     && grep -Eq -- '--default-runtime(=| )nvidia( |$)' "$S/exec"; then cat "$S/device-plugin"; fi
}
case "$1 $2 $3" in
  "--version  ") echo "k3s version __VERSION__ (simulated)"; exit 0 ;;
  "server "*|"server  ") shift; start "$@" || exit 1
    echo "[INFO]  simulated k3s server started with: ${*:-(no flags)}"; exit 0 ;;
esac
[ "$1" = kubectl ] || { echo "simulated k3s: unsupported command: $*" >&2; exit 1; }
shift
running || exit 1
case "$*" in
  "config view --raw") cat "$S/k3s.yaml" ;;
  "apply -f -")
    manifest=$(cat)
    if [[ $manifest != *"kind: DaemonSet"* || $manifest != *nvidia-device-plugin* ]]; then
      echo "simulated k3s: only the NVIDIA device plugin's DaemonSet can be applied here" >&2; exit 1
    fi
    verb=created; [ -f "$S/device-plugin" ] && verb=configured
    n=0; command -v nvidia-smi >/dev/null 2>&1 && n=$(nvidia-smi -L | grep -c '^GPU ')
    echo "$n" > "$S/device-plugin"
    echo "daemonset.apps/nvidia-device-plugin-daemonset $verb" ;;
  "get nodes -o jsonpath=__JSONPATH__"|"get nodes -o=jsonpath=__JSONPATH__") printf '%s' "$(gpus)" ;;
  "get nodes"|"get nodes --no-headers"|"get node"|"get node --no-headers")
    [[ $* == *--no-headers* ]] || echo "NAME                    STATUS   ROLES                  AGE   VERSION"
    printf '%-23s Ready    control-plane,master   1m    __VERSION__\n' "$NODE" ;;
  "get runtimeclass nvidia"*)
    # k3s registers the `nvidia` RuntimeClass when it finds the NVIDIA container runtime at start.
    if [ -f "$S/nvidia-runtime" ]; then echo "runtimeclass.node.k8s.io/nvidia"; exit 0; fi
    echo 'Error from server (NotFound): runtimeclasses.node.k8s.io "nvidia" not found' >&2; exit 1 ;;
  *) echo "simulated k3s: unsupported: kubectl $*" >&2; exit 1 ;;
esac
""".replace("__VERSION__", VERSION).replace("__JSONPATH__", GPU_JSONPATH) \
    .replace("__PYTHON__", sys.executable)

# Where gpuprov keeps the installer it used (activities/k3s_setup.py), relative to the login home.
KEPT_INSTALLER = ".gpuprov/k3s-install.sh"

UNINSTALL = """#!/bin/sh
# SIMULATED k3s-uninstall.sh, written by gpuprov's fakeclouds: removes the simulated k3s and its state.
rm -rf "$HOME/bin/k3s" "$HOME/bin/k3s-uninstall.sh" "$HOME/.simulated-k3s"
"""

# A SIMULATED k3s installer, served in place of get.k3s.io (GPUPROV_K3S_INSTALL_URL) to hosts that
# have no k3s: it writes the simulated `k3s` above and a `k3s-uninstall.sh` (which removes both, as
# the real one removes k3s) into ~/bin, on the simulated hosts' PATH, then "starts the service" with
# INSTALL_K3S_EXEC as the real installer does. It installs nothing real.
INSTALLER = f"""#!/bin/sh
# SIMULATED k3s installer, served by gpuprov's tests in place of get.k3s.io: no Kubernetes is installed.
set -e
mkdir -p "$HOME/bin"
cat > "$HOME/bin/k3s" <<'GPUPROV_SIMULATED_K3S'
{SCRIPT}GPUPROV_SIMULATED_K3S
cat > "$HOME/bin/k3s-uninstall.sh" <<'GPUPROV_SIMULATED_K3S'
{UNINSTALL}GPUPROV_SIMULATED_K3S
chmod 700 "$HOME/bin/k3s" "$HOME/bin/k3s-uninstall.sh"
set -- $INSTALL_K3S_EXEC
[ "${{1:-}}" = server ] && shift
"$HOME/bin/k3s" server "$@"
echo "[INFO]  simulated k3s installed"
"""
