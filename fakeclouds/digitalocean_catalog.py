"""What the simulated DigitalOcean sells (sizes, regions, images) and the request bodies it takes,
for fakeclouds/digitalocean_api.py."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from fakeclouds.catalog import Gpu, InstanceType, Region

# Documented image slugs (dstack's choice of GPU images; the OpenAPI's droplet example), with ids.
IMAGES = {"gpu-h100x1-base": 166407044, "gpu-h100x8-base": 166407045, "gpu-amd-base": 170052513,
          "ubuntu-24-04-x64": 162222512, "ubuntu-22-04-x64": 129211873}

REGIONS = (Region("tor1", "Toronto 1"), Region("nyc2", "New York 2"), Region("atl1", "Atlanta 1"))
ALL = tuple(r.name for r in REGIONS)


def _size(slug: str, desc: str, gpu: Gpu | None, model: str | None, vcpus: int, mem_gib: int, disk: int,
          price: float, regions: tuple[str, ...], stock: int = 4) -> InstanceType:
    # gpu_description holds DigitalOcean's gpu_info.model (e.g. nvidia_h100).
    return InstanceType(name=slug, description=desc, gpu_description=model, vcpus=vcpus, memory_gib=mem_gib,
                        storage_gib=disk, gpu=gpu, prices={r: price for r in regions},
                        default_stock={r: stock for r in regions})


# DigitalOcean's GPU Droplet plans (slugs, specs and list prices as published on its pricing page;
# gpu_info.model spelled as the API does: nvidia_h100 [doc], the others as gpuhunt parses them), plus
# one Basic CPU size, so the default listing's "non-GPU only" has something to show.
INSTANCE_TYPES = (
    _size("s-2vcpu-4gb", "Basic", None, None, 2, 4, 80, 0.03571, ALL, stock=8),
    _size("gpu-4000adax1-20gb", "RTX 4000 Ada GPU - 1X", Gpu("RTX4000ADA", "NVIDIA RTX 4000 Ada Generation",
          20475, 1), "nvidia_rtx4000_ada", 8, 32, 500, 0.76, ("tor1",)),
    _size("gpu-6000adax1-48gb", "RTX 6000 Ada GPU - 1X", Gpu("RTX6000ADA", "NVIDIA RTX 6000 Ada Generation",
          49140, 1), "nvidia_rtx6000_ada", 8, 64, 500, 1.57, ("tor1",)),
    _size("gpu-l40sx1-48gb", "L40S GPU - 1X", Gpu("L40S", "NVIDIA L40S", 46068, 1), "nvidia_l40s",
          8, 64, 500, 1.57, ("tor1",)),
    _size("gpu-mi300x1-192gb", "MI300X GPU - 1X", Gpu("MI300X", "AMD Instinct MI300X", 196608, 1),
          "amd_mi300x", 20, 240, 720, 1.99, ("atl1",)),
    _size("gpu-h100x1-80gb", "H100 GPU - 1X", Gpu("H100", "NVIDIA H100 80GB HBM3", 81559, 1), "nvidia_h100",
          20, 240, 720, 3.39, ALL),
    _size("gpu-h100x8-640gb", "H100 GPU - 8X", Gpu("H100", "NVIDIA H100 80GB HBM3", 81559, 8), "nvidia_h100",
          160, 1920, 2046, 23.92, ("nyc2", "atl1"), stock=1),
)
SIZES = {t.name: t for t in INSTANCE_TYPES}


def gpu_info(t: InstanceType) -> dict[str, Any]:
    assert t.gpu is not None
    return {"count": t.gpu.count, "model": t.gpu_description,
            "vram": {"amount": t.gpu.memory_gib, "unit": "gib"}}


def image_json(image: str | int) -> dict[str, Any]:
    slug = image if isinstance(image, str) else next(s for s, i in IMAGES.items() if i == image)
    return {"id": IMAGES[slug], "name": slug, "distribution": "Ubuntu", "slug": slug, "public": True,
            "regions": list(ALL), "type": "base", "min_disk_size": 25, "status": "available"}



class DropletCreate(BaseModel):
    name: str | None = None
    names: list[str] | None = None
    region: str | None = None
    size: str
    image: str | int
    ssh_keys: list[str | int] = Field(default_factory=list)
    tags: list[str] | None = None
    user_data: str | None = None
    volumes: list[str] = Field(default_factory=list)
    vpc_uuid: str | None = None
    backups: bool = False
    ipv6: bool = False
    monitoring: bool = False
    with_droplet_agent: bool | None = None


class TagCreate(BaseModel):
    name: str


class KeyCreate(BaseModel):
    name: str = Field(min_length=1, max_length=255)
    public_key: str


class Target(BaseModel):
    addresses: list[str] = Field(default_factory=list)
    droplet_ids: list[int] = Field(default_factory=list)
    load_balancer_uids: list[str] = Field(default_factory=list)
    kubernetes_ids: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)


class Rule(BaseModel):
    protocol: str
    ports: str | None = None
    sources: Target | None = None
    destinations: Target | None = None


class FirewallCreate(BaseModel):
    name: str
    inbound_rules: list[Rule] | None = None
    outbound_rules: list[Rule] | None = None
    droplet_ids: list[int] | None = None
    tags: list[str] | None = None
