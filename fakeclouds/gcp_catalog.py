"""What the simulated Compute Engine sells: zones, machine types, accelerator types, and the engine's
instance types made from them.

The engine counts stock per (type, "region"); for this cloud its regions are Compute Engine's
**zones** (`us-central1-a`), so stock, capacity faults (`region` = a zone) and machines are per
zone, as capacity is on the real cloud. An engine instance type is a machine type with its GPUs:
a bundled one (`a2-highgpu-1g`, `g2-standard-4`) or an N1 host with attached GPUs
(`n1-standard-4+nvidia-tesla-t4:1`, the adapter's offer names). Prices come from the adapter's
dated table (providers/gcp_catalog.py), so billing and offers agree. Zone availability is modelled
on Compute Engine's published GPU zones for these three regions; not exhaustive.
"""

from __future__ import annotations

from dataclasses import dataclass

from fakeclouds.catalog import Gpu, InstanceType, Region
from providers import gcp_catalog as prices


@dataclass(frozen=True)
class MachineType:
    name: str
    vcpus: int
    memory_mb: int
    accelerator: str | None = None  # bundled GPUs (A2, G2)
    count: int = 0

    @property
    def description(self) -> str:
        return f"{self.vcpus} vCPUs, {self.memory_mb / 1024:g} GB RAM"


@dataclass(frozen=True)
class AcceleratorType:
    name: str
    description: str
    max_cards: int
    gpu: Gpu  # what the simulated nvidia-smi prints for one card (count 1)


MACHINE_TYPES = {
    m.name: m
    for m in (
        MachineType("n1-standard-4", 4, 15360),
        MachineType("n1-standard-8", 8, 30720),
        MachineType("n1-standard-16", 16, 61440),
        MachineType("g2-standard-4", 4, 16384, "nvidia-l4", 1),
        MachineType("g2-standard-8", 8, 32768, "nvidia-l4", 1),
        MachineType("g2-standard-24", 24, 98304, "nvidia-l4", 2),
        MachineType("a2-highgpu-1g", 12, 87040, "nvidia-tesla-a100", 1),
        MachineType("a2-highgpu-2g", 24, 174080, "nvidia-tesla-a100", 2),
        MachineType("a2-ultragpu-1g", 12, 174080, "nvidia-a100-80gb", 1),
    )
}

ACCELERATOR_TYPES = {
    a.name: a
    for a in (
        AcceleratorType("nvidia-tesla-t4", "NVIDIA T4", 4, Gpu("T4", "Tesla T4", 15360, 1)),
        AcceleratorType("nvidia-tesla-v100", "NVIDIA V100", 8, Gpu("V100", "Tesla V100-SXM2-16GB", 16384, 1)),
        AcceleratorType("nvidia-l4", "NVIDIA L4", 8, Gpu("L4", "NVIDIA L4", 23034, 1)),
        AcceleratorType(
            "nvidia-tesla-a100", "NVIDIA A100 40GB", 16, Gpu("A100", "NVIDIA A100-SXM4-40GB", 40960, 1)
        ),
        AcceleratorType(
            "nvidia-a100-80gb", "NVIDIA A100 80GB", 8, Gpu("A100", "NVIDIA A100-SXM4-80GB", 81920, 1)
        ),
    )
}

_T4, _V100, _L4, _A100, _A100_80 = ACCELERATOR_TYPES
# zone -> (description, accelerator types offered there)
ZONES: dict[str, tuple[str, tuple[str, ...]]] = {
    "us-central1-a": ("Council Bluffs, Iowa, North America", (_T4, _V100, _L4, _A100, _A100_80)),
    "us-central1-b": ("Council Bluffs, Iowa, North America", (_T4, _V100, _L4, _A100)),
    "us-central1-c": ("Council Bluffs, Iowa, North America", (_T4, _V100, _L4, _A100, _A100_80)),
    "us-central1-f": ("Council Bluffs, Iowa, North America", (_T4, _V100, _A100)),
    "us-east1-b": ("Moncks Corner, South Carolina, North America", (_L4, _A100)),
    "us-east1-c": ("Moncks Corner, South Carolina, North America", (_T4, _V100, _L4)),
    "us-east1-d": ("Moncks Corner, South Carolina, North America", (_T4, _L4)),
    "europe-west4-a": ("Eemshaven, Netherlands, Europe", (_T4, _V100, _L4, _A100, _A100_80)),
    "europe-west4-b": ("Eemshaven, Netherlands, Europe", (_T4, _V100, _L4, _A100)),
    "europe-west4-c": ("Eemshaven, Netherlands, Europe", (_T4, _V100, _L4)),
}
N1_COUNTS = (1, 2, 4)
DEFAULT_STOCK = 3
SCARCE = {"a2-ultragpu-1g": 1, "a2-highgpu-2g": 2}


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def machine_types_in(zone: str) -> list[MachineType]:
    """N1 hosts everywhere; a bundled type where its GPU is offered."""
    offered = ZONES[zone][1]
    return [m for m in MACHINE_TYPES.values() if m.accelerator is None or m.accelerator in offered]


def _price(zone: str, machine: str, gpus: list[tuple[str, int]], spot: bool) -> float | None:
    return prices.price(region_of(zone), machine, gpus, spot=spot)


def _instance_type(
    name: str, machine: MachineType, accelerator: str | None, count: int, zones: list[str]
) -> InstanceType | None:
    gpus = [(accelerator, count)] if accelerator else []
    od = {z: p for z in zones if (p := _price(z, machine.name, gpus, False)) is not None}
    if not od:
        return None
    first = next(iter(od))
    spot = _price(first, machine.name, gpus, True)
    gpu = None
    if accelerator:
        one = ACCELERATOR_TYPES[accelerator].gpu
        gpu = Gpu(one.name, one.smi_name, one.memory_mib, count)
    return InstanceType(
        name=name,
        description=machine.description,
        gpu_description=f"{count}x {ACCELERATOR_TYPES[accelerator].description}" if accelerator else None,
        vcpus=machine.vcpus,
        memory_gib=round(machine.memory_mb / 1024),
        storage_gib=10,
        gpu=gpu,
        prices=od,
        spot_factor=round(spot / od[first], 4) if spot else None,
        default_stock={z: SCARCE.get(name, DEFAULT_STOCK) for z in od},
    )


def engine_types() -> tuple[InstanceType, ...]:
    """Every machine type (with its bundled GPUs), every N1 host alone and with 1, 2 or 4 of each
    attachable GPU, in the zones that have them and where the price table prices them."""
    out: list[InstanceType | None] = []
    for machine in MACHINE_TYPES.values():
        zones = [z for z in ZONES if machine in machine_types_in(z)]
        out.append(_instance_type(machine.name, machine, machine.accelerator, machine.count, zones))
        if machine.name.startswith("n1-"):
            for accelerator in ACCELERATOR_TYPES:
                if accelerator not in prices.N1_ATTACHABLE:
                    continue
                for count in N1_COUNTS:
                    zones = [
                        z
                        for z in ZONES
                        if accelerator in ZONES[z][1] and count <= ACCELERATOR_TYPES[accelerator].max_cards
                    ]
                    name = prices.combo_type(machine.name, accelerator, count)
                    out.append(_instance_type(name, machine, accelerator, count, zones))
    return tuple(t for t in out if t is not None)


REGIONS = tuple(Region(zone, description) for zone, (description, _) in ZONES.items())
INSTANCE_TYPES = engine_types()
