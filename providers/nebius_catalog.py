"""Nebius configuration the adapter needs besides the API: its regions, the default image family,
how platforms and presets become offers, and how an instance's status reads.

Regions as Nebius's documentation lists them (docs.nebius.com/overview/regions, 2025-06):
eu-north1 (Finland), eu-north2 (Iceland), eu-west1 (France), me-west1 (Israel), uk-south1 (UK),
us-central1 (USA). A region is usable only where the tenant has a project; the adapter learns that.
"""

from __future__ import annotations

from typing import Any

from providers.base import GpuSpec, InstanceState, Offer
from providers.gpus import normalize_gpu

REGIONS = ["eu-north1", "eu-north2", "eu-west1", "me-west1", "uk-south1", "us-central1"]
# Nebius's public image family with the NVIDIA driver and CUDA 12 on Ubuntu 22.04 (what dstack and
# SkyPilot boot GPU VMs from).
DEFAULT_IMAGE_FAMILY = "ubuntu22.04-cuda12"

_STATES = {
    "CREATING": InstanceState.PENDING,
    "STARTING": InstanceState.PENDING,
    "UPDATING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    "STOPPING": InstanceState.STOPPING,
    # A stopped instance (a preempted one: on_preemption=STOP) still exists and bills its disk.
    "STOPPED": InstanceState.STOPPED,
    "DELETING": InstanceState.TERMINATING,
    "ERROR": InstanceState.ERROR,
}


def state_of(inst: Any) -> tuple[InstanceState, str]:
    """The contract's state and Nebius's own word for it."""
    name = inst.status.state.name if inst.status is not None else "UNSPECIFIED"
    return _STATES.get(name, InstanceState.PENDING if name == "UNSPECIFIED" else InstanceState.ERROR), name


def preempted(inst: Any) -> bool:
    """Nebius preempted this VM: it is preemptible (`spec.preemptible`, whose only `on_preemption` is
    STOP: "Compute stops the VM without deleting or restarting it" — nebius/api compute/v1
    instance.proto) and STOPPED, which gpuprov never asks for (it only deletes). InstanceStatus has no
    preemption field of its own; whether Nebius gives a notice first is not documented."""
    spec = inst.spec
    stopped = inst.status is not None and inst.status.state.name in ("STOPPING", "STOPPED")
    return stopped and spec is not None and spec.HasField("preemptible")


def _gpu_name(platform: Any) -> str:
    """`gpu-h100-sxm` -> H100; the human name as a fallback (providers/gpus.py normalises both)."""
    parts = platform.metadata.name.split("-")
    return normalize_gpu(parts[1] if len(parts) > 1 else platform.spec.human_readable_name)[0]


def instance_offers(provider: str, region: str, platforms: list[Any]) -> list[Offer]:
    """One unpriced offer per (platform, preset, on-demand/preemptible) of a region's platforms."""
    out = []
    for p in platforms:
        for preset in p.spec.presets:
            res = preset.resources
            gpu = (
                GpuSpec(
                    name=_gpu_name(p),
                    count=res.gpu_count,
                    memory_gib=float(p.spec.gpu_memory_gigabytes) or None,
                )
                if res.gpu_count
                else None
            )
            spots = (False, True) if p.status is not None and p.status.allowed_for_preemptibles else (False,)
            for spot in spots:
                out.append(
                    Offer(
                        provider=provider,
                        instance_type=f"{p.metadata.name}.{preset.name}",
                        gpu=gpu,
                        vcpus=res.vcpu_count,
                        memory_gib=float(res.memory_gibibytes),
                        region=region,
                        price_per_hour=0.0,
                        spot=spot,
                    )
                )
    return out


def authorized_keys_part(keys: list[str]) -> str:
    """A #cloud-config giving the login user the SSH keys (Nebius takes keys only through cloud-init)."""
    lines = "".join(f"  - {k.strip()}\n" for k in keys)
    return f"#cloud-config\nssh_authorized_keys:\n{lines}"
