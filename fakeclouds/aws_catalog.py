"""The simulated AWS's catalogue: the availability zones it serves (the engine's "regions" are
these zones), and its GPU instance types with their vCPUs, memory and GPUs as EC2's
DescribeInstanceTypes reports them, on-demand prices from providers/aws_prices.py, spot prices and
stock per zone.
"""

from __future__ import annotations

from fakeclouds.catalog import Gpu, InstanceType, Region
from providers.aws_prices import ON_DEMAND

# The zones simulated per region (a subset of the real ones; every type below is offered in each,
# as moto's copy of EC2's offerings says it is).
_ZONE_LETTERS = {"us-east-1": "abc", "us-east-2": "ab", "us-west-2": "abc"}
ZONES = tuple(f"{region}{letter}" for region, letters in _ZONE_LETTERS.items() for letter in letters)
REGIONS = tuple(Region(z, f"{z[:-1]} availability zone {z[-1]}") for z in ZONES)


def region_of(zone: str) -> str:
    return zone[:-1]


def zones_of(region: str) -> list[str]:
    return [z for z in ZONES if region_of(z) == region]


_T4 = ("T4", "Tesla T4", 15360)
_A10G = ("A10G", "NVIDIA A10G", 23028)
_L4 = ("L4", "NVIDIA L4", 23034)
_L40S = ("L40S", "NVIDIA L40S", 46068)
_A100 = ("A100", "NVIDIA A100-SXM4-40GB", 40960)
_H100 = ("H100", "NVIDIA H100 80GB HBM3", 81559)


def _gpu_type(name: str, gpu: tuple[str, str, int], count: int, vcpus: int, memory_gib: int, storage_gib: int,
              spot_factor: float, stock: dict[str, int] | None = None) -> InstanceType:
    short, smi, mib = gpu
    return InstanceType(
        name=name, description=f"{count}x {smi}", gpu_description=smi, vcpus=vcpus, memory_gib=memory_gib,
        storage_gib=storage_gib, gpu=Gpu(short, smi, mib, count),
        prices={z: ON_DEMAND[region_of(z)][name] for z in ZONES},
        spot_factor=spot_factor, default_stock=stock if stock is not None else {z: 4 for z in ZONES},
    )


# vCPUs, memory and GPUs as EC2's DescribeInstanceTypes reports them (tests/aws checks them against
# moto's copy); storage is the local NVMe. Big types are scarce: stock in one or two zones only.
INSTANCE_TYPES = (
    _gpu_type("g4dn.xlarge", _T4, 1, 4, 16, 125, 0.32),
    _gpu_type("g4dn.2xlarge", _T4, 1, 8, 32, 225, 0.33),
    _gpu_type("g4dn.12xlarge", _T4, 4, 48, 192, 900, 0.35),
    _gpu_type("g5.xlarge", _A10G, 1, 4, 16, 250, 0.38),
    _gpu_type("g5.2xlarge", _A10G, 1, 8, 32, 450, 0.39),
    _gpu_type("g5.12xlarge", _A10G, 4, 48, 192, 3800, 0.42),
    _gpu_type("g6.xlarge", _L4, 1, 4, 16, 250, 0.36),
    _gpu_type("g6.2xlarge", _L4, 1, 8, 32, 450, 0.37),
    _gpu_type("g6e.xlarge", _L40S, 1, 4, 32, 250, 0.40),
    _gpu_type("p4d.24xlarge", _A100, 8, 96, 1152, 8000, 0.45, stock={"us-east-1a": 1, "us-west-2b": 1}),
    _gpu_type("p5.48xlarge", _H100, 8, 192, 2048, 30400, 0.50, stock={"us-east-1b": 1}),
)
BY_NAME = {t.name: t for t in INSTANCE_TYPES}

