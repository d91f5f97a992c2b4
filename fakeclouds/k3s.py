"""A SIMULATED `k3s` on the simulated clouds' images, and a SIMULATED installer for hosts without one.

The simulated machines have no network and run no Kubernetes. `SCRIPT` is what `$HOME/bin/k3s` holds:
a launcher of fakeclouds/k3s_sim.py (on this simulation's own Python), which keeps the state a k3s
server would have; the engine's simulated API server (fakeclouds/k8s_api.py) serves it over TLS on
6443. An image that ships `k3s` stands for one where gpuprov's boot script installed it: it also
carries that script's kept installer (`KEPT_INSTALLER`, the simulated one below), which gpuprov's
SSH step re-runs with the flags it wants — so nothing on a simulated machine downloads anything.
"""

from __future__ import annotations

import sys

SCRIPT = f"""#!{sys.executable}
# SIMULATED k3s, written by gpuprov's fakeclouds: no Kubernetes runs here (fakeclouds/k3s_sim.py).
import sys
from fakeclouds.k3s_sim import main
sys.exit(main(sys.argv[1:]))
"""

# Where gpuprov keeps the installer it used (activities/k3s_setup.py), relative to the login home.
KEPT_INSTALLER = ".gpuprov/k3s-install.sh"

UNINSTALL = """#!/bin/sh
# SIMULATED k3s-uninstall.sh, written by gpuprov's fakeclouds: removes the simulated k3s and its state.
rm -rf "$HOME/bin/k3s" "$HOME/bin/k3s-uninstall.sh" "$HOME/.simulated-k3s"
"""

# A SIMULATED k3s installer, served in place of get.k3s.io (GPUPROV_K3S_INSTALL_URL) to hosts that
# have no k3s: it writes the simulated `k3s` above and a `k3s-uninstall.sh` (which removes both, as
# the real one removes k3s) into ~/bin, on the simulated hosts' PATH, then "starts the service" with
# INSTALL_K3S_EXEC as the real installer does (the simulated `k3s server` records the flags and
# returns). It installs nothing real.
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
