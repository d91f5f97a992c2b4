"""The simulated Kubernetes API (fakeclouds/k8s_api.py) behind a simulated Lambda machine's firewall,
driven by gpuprov's own k3s step (activities/k3s_setup.py) and read by the real `kubernetes` client,
which verifies the server's certificate."""

from __future__ import annotations

import asyncio
import base64
import shlex
import ssl
from typing import Any

import asyncssh
import httpx
import pytest
import urllib3
import yaml

from activities.k3s_setup import k3s_script
from fakeclouds.admin import FakeCloudAdmin
from tests.fakeclouds.helpers import lambda_key, launch_lambda, wait_lambda
from tests.kube import gpus_of, list_nodes, ready

GPU_TYPE = "gpu_1x_a10"


def pointed_at(kubeconfig: str, server: str) -> dict[str, Any]:
    cfg = yaml.safe_load(kubeconfig)
    cfg["clusters"][0]["cluster"]["server"] = server
    return dict(cfg)


async def _ruleset(lam: httpx.AsyncClient, rules: list[dict[str, Any]]) -> str:
    r = await lam.post("/firewall-rulesets", json={"name": "k8s", "region": "us-east-1", "rules": rules})
    assert r.status_code == 200, r.text
    return str(r.json()["data"]["id"])


async def _machine(lam: httpx.AsyncClient, pubkey: str, rulesets: list[str]) -> dict[str, Any]:
    await lambda_key(lam, pubkey)
    r = await launch_lambda(lam, pubkey, instance_type_name=GPU_TYPE,
                            firewall_rulesets=[{"id": x} for x in rulesets])
    assert r.status_code == 200, r.text
    return await wait_lambda(lam, r.json()["data"]["instance_ids"][0])


def _ssh(ip: str, key: asyncssh.SSHKey) -> asyncssh.connect:
    return asyncssh.connect(ip, 22, username="ubuntu", client_keys=[key], known_hosts=None,
                            agent_path=None, connect_timeout=5)


ALLOW_K8S_FROM_HERE = [
    {"protocol": "tcp", "port_range": [22, 22], "source_network": "0.0.0.0/0", "description": "SSH"},
    {"protocol": "tcp", "port_range": [6443, 6443], "source_network": "127.0.0.1/32", "description": "k8s"},
]


async def test_direct_and_tunnel_list_the_gpu_node_with_verified_tls(
        lam: httpx.AsyncClient, admin: FakeCloudAdmin, ssh_key: asyncssh.SSHKey, pubkey: str) -> None:
    inst = await _machine(lam, pubkey, [await _ruleset(lam, ALLOW_K8S_FROM_HERE)])
    ip = inst["ip"]
    async with _ssh(ip, ssh_key) as conn:
        # The image's k3s, started at boot without gpuprov's flags: its certificate does not name ip.
        first = await conn.run("k3s kubectl config view --raw", check=True)
        with pytest.raises(urllib3.exceptions.MaxRetryError, match="IP address mismatch"):
            await asyncio.to_thread(list_nodes, pointed_at(str(first.stdout), f"https://{ip}:6443"))

        script = f"bash -c {shlex.quote(k3s_script(tls_san=ip, gpu_wait_s=5))}"
        step = await conn.run(script)
        assert step.exit_status == 0, step.stderr
        assert "nvidia-device-plugin-daemonset created" in str(step.stdout)
        # Run again: nothing reinstalled, the plugin only re-applied.
        again = await conn.run(script)
        assert again.exit_status == 0 and "simulated k3s server started" not in str(again.stdout)
        kubeconfig = str((await conn.run("k3s kubectl config view --raw", check=True)).stdout)

        # Direct: the machine's address, verified against the cluster's CA, the admin certificate.
        nodes = await asyncio.to_thread(list_nodes, pointed_at(kubeconfig, f"https://{ip}:6443"))
        assert len(nodes) == 1
        node = nodes[0]
        assert gpus_of(node) == "1" and ready(node)

        # Through SSH: the machine's own 127.0.0.1:6443, no firewall between.
        listener = await conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", 6443)
        try:
            tunneled = await asyncio.to_thread(
                list_nodes, pointed_at(kubeconfig, f"https://127.0.0.1:{listener.get_port()}"))
            assert [n.metadata.name for n in tunneled] == [node.metadata.name]
        finally:
            listener.close()

        # The guard: a real machine's admin commands never reach the host.
        guarded = await conn.run("sudo true")
        assert guarded.exit_status == 126 and "simulated machine" in str(guarded.stderr)

    cfg = yaml.safe_load(kubeconfig)
    ca = base64.b64decode(cfg["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
    tls = ssl.create_default_context(cadata=ca)
    # No client certificate: 401, as k3s answers anonymous requests.
    async with httpx.AsyncClient(verify=tls) as client:
        r = await client.get(f"https://{ip}:6443/api/v1/nodes")
    assert r.status_code == 401 and r.json()["reason"] == "Unauthorized"
    # From an address the ruleset does not admit (127.0.0.2 is this host too): dropped before TLS.
    outside = httpx.AsyncHTTPTransport(verify=tls, local_address="127.0.0.2")
    async with httpx.AsyncClient(transport=outside) as client:
        with pytest.raises(httpx.TransportError):
            await client.get(f"https://{ip}:6443/version")


async def test_without_a_6443_rule_the_api_is_unreachable_from_outside(
        lam: httpx.AsyncClient, admin: FakeCloudAdmin, ssh_key: asyncssh.SSHKey, pubkey: str) -> None:
    inst = await _machine(lam, pubkey, [])  # the account's global rules: SSH and ICMP only
    async with _ssh(inst["ip"], ssh_key) as conn:
        await conn.run("k3s kubectl get nodes", check=True)
    async with httpx.AsyncClient(verify=False) as client:  # noqa: S501 - only reachability is tested
        with pytest.raises(httpx.TransportError):
            await client.get(f"https://{inst['ip']}:6443/version")


async def test_a_gpu_machine_without_the_nvidia_runtime_and_root_fails_before_fetching_anything(
        lam: httpx.AsyncClient, admin: FakeCloudAdmin, ssh_key: asyncssh.SSHKey, pubkey: str) -> None:
    """The toolkit's install checks for root first: here the guard's sudo refuses (a simulated
    machine never runs the host's), so nothing is downloaded and the step names why it stopped."""
    inst = await _machine(lam, pubkey, [])
    async with _ssh(inst["ip"], ssh_key) as conn:
        await conn.run("rm ~/bin/nvidia-container-runtime", check=True)
        step = await conn.run(f"bash -c {shlex.quote(k3s_script(tls_san=inst['ip'], gpu_wait_s=1))}")
    assert step.exit_status == 5
    err = str(step.stderr)
    assert "needs root" in err and "cannot install the NVIDIA container toolkit" in err
    assert "simulated machine: sudo is not available" in str(step.stderr)
