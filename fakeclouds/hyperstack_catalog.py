"""The simulated Hyperstack's catalogue: its regions, flavors (GPU model, disks, ids as the API
names them) with their shapes, on-demand prices and stock per region, the spot flavors' suffix,
the images it serves and the security-rule protocols it accepts. The API is `hyperstack_api.py`.
"""

from __future__ import annotations

from pydantic import BaseModel

from fakeclouds.catalog import Gpu, InstanceType, Region

SPOT_SUFFIX = "-spot"  # [unconfirmed] how spot flavors are named
DEFAULT_IMAGE = "Ubuntu Server 22.04 LTS R535 CUDA 12.2"
IMAGES = (DEFAULT_IMAGE, "Ubuntu Server 24.04 LTS R570 CUDA 12.8 with Docker", "Ubuntu Server 22.04 LTS")
PROTOCOLS = ("any", "ah", "dccp", "egp", "esp", "gre", "icmp", "igmp", "ipv6-encap", "ipv6-icmp", "ospf",
             "pgm", "rsvp", "sctp", "tcp", "udp", "udplite", "vrrp")

REGIONS = (
    Region("CANADA-1", "Montreal, Canada"),
    Region("US-1", "United States"),
    Region("NORWAY-1", "Oslo, Norway"),
)


class Flavor(BaseModel):
    """A flavor and its GPU model as Hyperstack's API names it (InstanceType carries the rest)."""

    id: int
    model: str  # FlavorFields.gpu, e.g. "A100-80G-PCIe"; also the pricebook's name
    disk: int
    ephemeral: int


def _type(name: str, gpu: Gpu, vcpus: int, ram: int, price: float, stock: dict[str, int],
          spot_factor: float | None) -> InstanceType:
    return InstanceType(name=name, description=f"{gpu.count}x {gpu.name}", gpu_description=gpu.smi_name,
                        vcpus=vcpus, memory_gib=ram, storage_gib=100, gpu=gpu,
                        prices={r: price for r in stock}, spot_factor=spot_factor, default_stock=stock)


# Flavor names, shapes and on-demand prices as Hyperstack publishes them (hyperstack.cloud/gpu-pricing).
INSTANCE_TYPES = (
    _type("n3-RTX-A6000x1", Gpu("A6000", "NVIDIA RTX A6000", 49140, 1), 28, 58, 0.50,
          {"CANADA-1": 4, "NORWAY-1": 4}, 0.6),
    _type("n3-L40x1", Gpu("L40", "NVIDIA L40", 46068, 1), 28, 58, 1.00, {"NORWAY-1": 2}, None),
    _type("n3-A100x1", Gpu("A100", "NVIDIA A100 80GB PCIe", 81920, 1), 28, 120, 1.35,
          {"CANADA-1": 3, "US-1": 2}, 0.6),
    _type("n3-H100x1", Gpu("H100", "NVIDIA H100 PCIe", 81559, 1), 28, 180, 1.90, {"CANADA-1": 2, "US-1": 2},
          None),
    _type("n3-H100-SXM5x8", Gpu("H100", "NVIDIA H100 80GB HBM3", 81559, 8), 192, 1800, 19.20, {"US-1": 1},
          None),
)
FLAVORS = {
    "n3-RTX-A6000x1": Flavor(id=101, model="RTX-A6000", disk=100, ephemeral=0),
    "n3-L40x1": Flavor(id=102, model="L40", disk=100, ephemeral=725),
    "n3-A100x1": Flavor(id=103, model="A100-80G-PCIe", disk=100, ephemeral=750),
    "n3-H100x1": Flavor(id=104, model="H100-80G-PCIe", disk=100, ephemeral=750),
    "n3-H100-SXM5x8": Flavor(id=105, model="H100-80G-SXM5", disk=100, ephemeral=32000),
}
BY_NAME = {t.name: t for t in INSTANCE_TYPES}
