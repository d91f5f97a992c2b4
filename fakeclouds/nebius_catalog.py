"""What the simulated Nebius tenant holds: one project per region (Nebius scopes compute to a
project, and a project lives in one region), a default subnet in each, the public image families,
and the platforms with their presets (GPU count, vCPUs, memory).

The engine's instance type is `<platform>.<preset>` (Nebius names neither with a dot). Prices are
what the simulated billing calculator answers: on-demand per region, preemptible at `spot_factor`;
they follow Nebius's published list prices of 2025-06 (nebius.com/prices) loosely [unconfirmed for
exact cents] — the adapter never reads them from here, only through the calculator service.
"""

from __future__ import annotations

from dataclasses import dataclass

from fakeclouds.catalog import Gpu, InstanceType, Region

TENANT = "tenant-e00simulated0000000"
PUBLIC_IMAGES = "project-e00public-images0000"
DEFAULT_FAMILY = "ubuntu22.04-cuda12"
IMAGE_FAMILIES = {  # family -> the latest image id in it
    "ubuntu22.04-cuda12": "computeimage-e00ubuntu2204cuda12",
    "ubuntu22.04-driverless": "computeimage-e00ubuntu2204nodrv",
    "ubuntu24.04-cuda12": "computeimage-e00ubuntu2404cuda12",
}


@dataclass(frozen=True)
class Project:
    id: str
    name: str
    region: str
    subnet_id: str
    state: str = "ACTIVE"  # iam.v2's ProjectStatus.ProjectState name (v1 has no state)


PROJECTS = (
    Project(
        "project-e00eunorth1sim00000", "default-project-eu-north1", "eu-north1", "vpcsubnet-e00eunorth1sim0"
    ),
    Project(
        "project-e00euwest1sim000000", "default-project-eu-west1", "eu-west1", "vpcsubnet-e00euwest1sim00"
    ),
    Project(
        "project-e00uscentral1sim000",
        "default-project-us-central1",
        "us-central1",
        "vpcsubnet-e00uscentral1sim",
    ),
)
REGIONS = tuple(Region(p.region, f"Nebius {p.region} (simulated)") for p in PROJECTS)


@dataclass(frozen=True)
class Platform:
    name: str
    human: str
    gpu: tuple[str, str, int] | None  # (short name, nvidia-smi name, MiB per GPU)
    presets: tuple[tuple[int, int, int], ...]  # (gpus, vcpus, GiB)
    hourly: float  # per GPU (per vCPU for a CPU platform), USD
    regions: tuple[str, ...]
    preemptible: bool = True


PLATFORMS = (
    Platform(
        "gpu-h100-sxm",
        "NVIDIA® H100 NVLink with Intel Sapphire Rapids",
        ("H100", "NVIDIA H100 80GB HBM3", 81559),
        ((1, 16, 200), (8, 128, 1600)),
        2.95,
        ("eu-north1", "us-central1"),
    ),
    Platform(
        "gpu-h200-sxm",
        "NVIDIA® H200 NVLink with Intel Sapphire Rapids",
        ("H200", "NVIDIA H200", 143771),
        ((1, 16, 200), (8, 128, 1600)),
        3.50,
        ("eu-north1", "eu-west1", "us-central1"),
    ),
    Platform(
        "gpu-l40s-a",
        "NVIDIA® L40S PCIe with Intel Ice Lake",
        ("L40S", "NVIDIA L40S", 46068),
        ((1, 8, 32), (1, 16, 64)),
        1.55,
        ("eu-north1",),
    ),
    Platform(
        "cpu-d3",
        "Non-GPU AMD EPYC Genoa",
        None,
        ((0, 4, 16), (0, 8, 32)),
        0.012,
        ("eu-north1", "eu-west1", "us-central1"),
        preemptible=False,
    ),
)
SPOT_FACTOR = 0.45


def preset_name(gpus: int, vcpus: int, gib: int) -> str:
    return f"{gpus}gpu-{vcpus}vcpu-{gib}gb" if gpus else f"{vcpus}vcpu-{gib}gb"


def type_name(platform: str, preset: str) -> str:
    return f"{platform}.{preset}"


def _hourly(p: Platform, gpus: int, vcpus: int) -> float:
    return round(p.hourly * (gpus if p.gpu else vcpus), 4)


def _stock(p: Platform, gpus: int) -> int:
    return 1 if gpus >= 8 else 4


INSTANCE_TYPES = tuple(
    InstanceType(
        name=type_name(p.name, preset_name(*preset)),
        description=f"{p.human}, preset {preset_name(*preset)}",
        gpu_description=p.gpu[1] if p.gpu else None,
        vcpus=preset[1],
        memory_gib=preset[2],
        storage_gib=0,
        gpu=Gpu(p.gpu[0], p.gpu[1], p.gpu[2], preset[0]) if p.gpu else None,
        prices={r: _hourly(p, preset[0], preset[1]) for r in p.regions},
        spot_factor=SPOT_FACTOR if p.preemptible else None,
        default_stock={r: _stock(p, preset[0]) for r in p.regions},
    )
    for p in PLATFORMS
    for preset in p.presets
)


def project(project_id: str) -> Project | None:
    return next((p for p in PROJECTS if p.id == project_id), None)


def platform(name: str) -> Platform | None:
    return next((p for p in PLATFORMS if p.name == name), None)
