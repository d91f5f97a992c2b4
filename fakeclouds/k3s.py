"""A SIMULATED `k3s` preinstalled on the simulated Lambda image.

The simulated machines have no network, so gpuprov's installer (which fetches get.k3s.io)
finds this binary already present, as it would on a machine where k3s was installed, and
only runs its health check. It answers `k3s kubectl get nodes` with one Ready node, and
`k3s kubectl get runtimeclass nvidia` as k3s does on a machine with the NVIDIA runtime.
"""

from __future__ import annotations

SCRIPT = r"""#!/usr/bin/env bash
# SIMULATED k3s, written by gpuprov's fakeclouds: no Kubernetes runs here.
if [[ "$1 $2 $3" == "kubectl get nodes" ]]; then
  echo "NAME        STATUS   ROLES                  AGE   VERSION"
  echo "$(hostname)   Ready    control-plane,master   1m    v1.31.4+k3s1"
  exit 0
fi
# k3s registers the `nvidia` RuntimeClass when it finds the NVIDIA container runtime: here, where the
# simulated machine has a (simulated) nvidia-smi.
if [[ "$1 $2 $3 $4" == "kubectl get runtimeclass nvidia" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "runtimeclass.node.k8s.io/nvidia"
    exit 0
  fi
  echo 'Error from server (NotFound): runtimeclasses.node.k8s.io "nvidia" not found' >&2
  exit 1
fi
if [[ "$1" == "--version" ]]; then
  echo "k3s version v1.31.4+k3s1 (simulated)"
  exit 0
fi
echo "simulated k3s: unsupported command: $*" >&2
exit 1
"""

# A SIMULATED k3s installer, served in place of get.k3s.io (GPUPROV_K3S_INSTALL_URL) to hosts that
# have no k3s: it writes the simulated `k3s` above and a `k3s-uninstall.sh` (which removes both, as
# the real one removes k3s) into ~/bin, on the simulated hosts' PATH. It installs nothing real.
UNINSTALL = """#!/bin/sh
# SIMULATED k3s-uninstall.sh, written by gpuprov's fakeclouds: removes the simulated k3s.
rm -f "$HOME/bin/k3s" "$HOME/bin/k3s-uninstall.sh"
"""

INSTALLER = f"""#!/bin/sh
# SIMULATED k3s installer, served by gpuprov's tests in place of get.k3s.io: no Kubernetes is installed.
set -e
mkdir -p "$HOME/bin"
cat > "$HOME/bin/k3s" <<'GPUPROV_SIMULATED_K3S'
{SCRIPT}GPUPROV_SIMULATED_K3S
cat > "$HOME/bin/k3s-uninstall.sh" <<'GPUPROV_SIMULATED_K3S'
{UNINSTALL}GPUPROV_SIMULATED_K3S
chmod 755 "$HOME/bin/k3s" "$HOME/bin/k3s-uninstall.sh"
echo "[INFO]  simulated k3s installed"
"""
