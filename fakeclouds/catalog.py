"""What each simulated cloud sells: instance types, regions, prices and default stock.

Lambda rows use Lambda Cloud's real instance-type names, specs and list prices (as
published on lambda.ai/pricing); the GPU names/memory printed by the simulated
nvidia-smi follow what those GPUs report. `local` is ours: honest CPU machines.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    name: str  # short canonical name, e.g. "A10", "H100"
    smi_name: str  # what nvidia-smi prints in the name column
    memory_mib: int  # memory.total as nvidia-smi reports it (MiB)
    count: int

    @property
    def memory_gib(self) -> int:
        return round(self.memory_mib / 1024)


@dataclass(frozen=True)
class InstanceType:
    facade: str
    name: str
    description: str  # Lambda: "1x A10 (24 GB PCIe)"
    gpu_description: str | None  # Lambda: "A10 (24 GB PCIe)"
    vcpus: int
    memory_gib: int
    storage_gib: int
    gpu: Gpu | None
    # price_per_hour per region (USD); spot price is spot_factor * on-demand where offered.
    prices: dict[str, float]
    spot_factor: float | None = None  # None: no spot market
    default_stock: dict[str, int] | None = None  # per region; missing region -> 0


@dataclass(frozen=True)
class Region:
    facade: str
    name: str
    description: str


FACADES = ("local", "lambda")
LOGIN_USER = {"local": "gpuprov", "lambda": "ubuntu"}
DRIVER_VERSION = "535.129.03"  # what the simulated nvidia-smi reports

REGIONS: list[Region] = [
    Region("local", "local-1", "Local zone 1"),
    Region("local", "local-2", "Local zone 2"),
    Region("lambda", "us-east-1", "Virginia, USA"),
    Region("lambda", "us-west-1", "California, USA"),
    Region("lambda", "us-south-1", "Texas, USA"),
    Region("lambda", "europe-central-1", "Germany"),
]

_LAMBDA_REGIONS = ["us-east-1", "us-west-1", "us-south-1", "europe-central-1"]


def _cpu(name: str, vcpus: int, mem: int, p1: float, p2: float) -> InstanceType:
    return InstanceType(
        facade="local", name=name, description=f"{vcpus} vCPU, {mem} GiB RAM (CPU only)",
        gpu_description=None, vcpus=vcpus, memory_gib=mem, storage_gib=20 * vcpus, gpu=None,
        prices={"local-1": p1, "local-2": p2}, spot_factor=0.3,
        default_stock={"local-1": 8, "local-2": 8},
    )


def _lambda(name: str, gpu: Gpu, desc: str, vcpus: int, mem: int, storage: int, price: float,
            stock: dict[str, int] | None = None) -> InstanceType:
    return InstanceType(
        facade="lambda", name=name, description=f"{gpu.count}x {desc}", gpu_description=desc,
        vcpus=vcpus, memory_gib=mem, storage_gib=storage, gpu=gpu,
        prices={r: price for r in _LAMBDA_REGIONS}, spot_factor=None,
        default_stock=stock or {r: 4 for r in _LAMBDA_REGIONS},
    )


INSTANCE_TYPES: list[InstanceType] = [
    _cpu("cpu-small", 2, 4, 0.02, 0.025),
    _cpu("cpu-medium", 4, 16, 0.08, 0.09),
    _cpu("cpu-large", 8, 32, 0.16, 0.18),
    _lambda("gpu_1x_a10", Gpu("A10", "NVIDIA A10", 23028, 1), "A10 (24 GB PCIe)", 30, 200, 1400, 0.75),
    _lambda("gpu_1x_a6000", Gpu("A6000", "NVIDIA RTX A6000", 49140, 1), "RTX A6000 (48 GB)",
            14, 46, 512, 0.80),
    _lambda("gpu_1x_a100_sxm4", Gpu("A100", "NVIDIA A100-SXM4-40GB", 40960, 1), "A100 (40 GB SXM4)",
            30, 200, 512, 1.29),
    _lambda("gpu_1x_h100_pcie", Gpu("H100", "NVIDIA H100 PCIe", 81559, 1), "H100 (80 GB PCIe)",
            26, 200, 1024, 2.49),
    _lambda("gpu_8x_h100_sxm5", Gpu("H100", "NVIDIA H100 80GB HBM3", 81559, 8), "H100 (80 GB SXM5)",
            208, 1800, 24780, 23.92, stock={"us-east-1": 1, "us-west-1": 1}),
]


def types_for(facade: str) -> dict[str, InstanceType]:
    return {t.name: t for t in INSTANCE_TYPES if t.facade == facade}


def regions_for(facade: str) -> dict[str, Region]:
    return {r.name: r for r in REGIONS if r.facade == facade}


def find_type(name: str) -> InstanceType | None:
    return next((t for t in INSTANCE_TYPES if t.name == name), None)


def default_stock() -> dict[tuple[str, str], int]:
    return {(t.name, r): n for t in INSTANCE_TYPES for r, n in (t.default_stock or {}).items()}
