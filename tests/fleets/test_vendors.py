"""AMD and Gaudi hosts: the probe finds them by their device nodes (/dev/kfd; /dev/accel/accel*) and
reads the vendor's tool (SIMULATED `rocm-smi --json`, `hl-smi` CSV in the host's ~/bin).

Each host's SSH server is a process of its own (tests/fleets/netns_ssh.py) in a private mount
namespace the test makes (`unshare --mount`, as root) where /dev is a fresh tmpfs holding the
vendor's device node as an empty file, beside binds of the few real nodes a shell needs. So the
probe's `test -e /dev/kfd` sees what it would on such a host, and this machine's /dev is untouched.
A host with the node but no working tool is still reported as that vendor, with no GPU count made up.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shlex
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import pytest

from activities.fleet import probe_host
from providers.ssh_login import HostLogin

REPO = Path(__file__).resolve().parents[2]
KEY = asyncssh.generate_private_key("ssh-ed25519")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root (CI runs as root)")

# SIMULATED vendor tools, in the shapes the real ones print for these queries.
ROCM_SMI = "#!/bin/sh\n# SIMULATED rocm-smi\ncat <<'EOF'\n" + json.dumps({
    f"card{i}": {"Card series": "AMD Instinct MI300X", "Card model": "0x74a1",
                 "VRAM Total Memory (B)": str(192 * 1024**3), "VRAM Total Used Memory (B)": "0"}
    for i in range(8)}) + "\nEOF\n"
HL_SMI = "#!/bin/sh\n# SIMULATED hl-smi\n" + "".join("echo 'HL-225, 98304'\n" for _ in range(8))
BROKEN = "#!/bin/sh\necho 'tool failed' >&2\nexit 1\n"


def home_with(root: Path, name: str, tools: dict[str, str]) -> Path:
    home = root / name
    (home / "bin").mkdir(parents=True)
    for tool, text in tools.items():
        (home / "bin" / tool).write_text(text)
        (home / "bin" / tool).chmod(0o755)
    return home


def in_private_dev(devices: list[str], argv: list[str], keep: Path) -> list[str]:
    """`argv` in a new mount namespace whose /dev is a tmpfs with `devices` (empty files) and binds
    of null, zero, urandom and pts from the real /dev (bound at the empty directory `keep` first)."""
    setup = [f"mount --rbind /dev {keep}", "mount -t tmpfs tmpfs /dev"]
    for node in ("null", "zero", "urandom"):
        setup += [f"touch /dev/{node}", f"mount --bind {keep}/{node} /dev/{node}"]
    setup += ["mkdir /dev/pts", f"mount --rbind {keep}/pts /dev/pts"]
    for dev in devices:
        setup.append(f"mkdir -p $(dirname /dev/{dev}) && touch /dev/{dev}")
    script = " && ".join(setup) + " && exec " + shlex.join(argv)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]


async def serve(address: str, home: Path, devices: list[str], host_key: Path) -> asyncio.subprocess.Process:
    argv = [sys.executable, "-m", "tests.fleets.netns_ssh", "--listen", address, "--port", "2222",
            "--home", str(home), "--user", "ubuntu", "--public-key", KEY.export_public_key().decode(),
            "--host-key", str(host_key)]
    keep = home.parent / f"{home.name}-realdev"
    keep.mkdir()
    proc = await asyncio.create_subprocess_exec(*in_private_dev(devices, argv, keep), cwd=REPO,
                                                stdout=asyncio.subprocess.PIPE,
                                                env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line == b"ready\n", f"the SSH server for {home.name} did not start ({line!r})"
    return proc


@pytest.fixture
async def hosts() -> AsyncIterator[dict[str, str]]:
    root = Path(tempfile.mkdtemp(prefix="fv", dir="/tmp"))
    host_key = root / "host_key"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(host_key))
    net = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
    layout = {
        "amd": (home_with(root, "amd", {"rocm-smi": ROCM_SMI}), ["kfd", "dri/renderD128"]),
        "gaudi": (home_with(root, "gaudi", {"hl-smi": HL_SMI}), [f"accel/accel{i}" for i in range(8)]),
        "amd-no-tool": (home_with(root, "amd-no-tool", {"rocm-smi": BROKEN}), ["kfd"]),
        "gaudi-no-tool": (home_with(root, "gaudi-no-tool", {}), ["accel/accel0"]),
    }
    procs, addresses = [], {}
    try:
        for i, (name, (home, devices)) in enumerate(layout.items(), start=20):
            addresses[name] = f"{net}.{i}"
            procs.append(await serve(addresses[name], home, devices, host_key))
        yield addresses
    finally:
        for proc in procs:
            proc.terminate()
            await proc.wait()
        shutil.rmtree(root, ignore_errors=True)


async def test_amd_and_gaudi_hosts_are_found_by_their_device_nodes(hosts: dict[str, str]) -> None:
    probes = {name: await probe_host(name, HostLogin(host=address, port=2222, user="ubuntu", key=KEY), 30)
              for name, address in hosts.items()}
    assert all(p.reachable for p in probes.values()), {n: p.reason for n, p in probes.items()}
    amd, gaudi = probes["amd"], probes["gaudi"]
    assert (amd.gpu_vendor, amd.gpu_name, amd.gpu_count, amd.gpu_memory_gb) == (
        "amd", "MI300X", 8, 192), amd
    assert amd.gpu_summary and amd.gpu_summary.startswith("8× MI300X (192GB)"), amd.gpu_summary
    assert (gaudi.gpu_vendor, gaudi.gpu_count, gaudi.gpu_memory_gb) == ("gaudi", 8, 96), gaudi
    assert gaudi.gpu_name and "HL-225" in gaudi.gpu_name
    # The device node alone says the vendor; without its tool nothing is made up.
    for name, vendor in (("amd-no-tool", "amd"), ("gaudi-no-tool", "gaudi")):
        assert (probes[name].gpu_vendor, probes[name].gpu_count) == (vendor, 0), probes[name]
