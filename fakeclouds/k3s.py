"""A SIMULATED `k3s` preinstalled on the simulated Lambda image.

The simulated machines have no network, so gpuprov's installer (which fetches get.k3s.io)
finds this binary already present, as it would on a machine where k3s was installed, and
only runs its health check. It answers `k3s kubectl get nodes` with one Ready node.
"""

from __future__ import annotations

SCRIPT = r"""#!/usr/bin/env bash
# SIMULATED k3s, written by gpuprov's fakeclouds: no Kubernetes runs here.
if [[ "$1 $2 $3" == "kubectl get nodes" ]]; then
  echo "NAME        STATUS   ROLES                  AGE   VERSION"
  echo "$(hostname)   Ready    control-plane,master   1m    v1.31.4+k3s1"
  exit 0
fi
if [[ "$1" == "--version" ]]; then
  echo "k3s version v1.31.4+k3s1 (simulated)"
  exit 0
fi
echo "simulated k3s: unsupported command: $*" >&2
exit 1
"""
