"""The simulated Verda's catalogue: locations, images, instance types (Verda's own names and
shapes) and the JSON `/instance-types` answers. List prices approximate verda.com/pricing (USD)
[unconfirmed]; spot is 35 % of on-demand [unconfirmed]; stock is the simulation's."""

from __future__ import annotations

import uuid
from typing import Any

from fakeclouds.catalog import Gpu, InstanceType, Region

# Verda's locations (SDK `Locations`) and their countries.
REGIONS = (
    Region("FIN-01", "Finland 1 (Helsinki)"),
    Region("FIN-02", "Finland 2 (Helsinki)"),
    Region("FIN-03", "Finland 3 (Helsinki)"),
    Region("ICE-01", "Iceland 1 (Keflavik)"),
)
COUNTRY = {"FIN-01": "FI", "FIN-02": "FI", "FIN-03": "FI", "ICE-01": "IS"}

CUDA_24 = "ubuntu-24.04-cuda-12.8-open-docker"
CUDA_22 = "ubuntu-22.04-cuda-12.0-docker"
IMAGES = (CUDA_24, CUDA_22, "ubuntu-24.04", "ubuntu-22.04")
# Older GPUs refuse the newest image ("Operating system is not valid for this instance type").
_SUPPORTED_OS = {"V100": [CUDA_22, "ubuntu-22.04"], None: ["ubuntu-24.04", "ubuntu-22.04"]}
_GPU_OS = [CUDA_24, CUDA_22, "ubuntu-24.04", "ubuntu-22.04"]


def _type(name: str, gpu: Gpu | None, desc: str, vcpus: int, mem: int, storage: int, price: float,
          stock: dict[str, int]) -> InstanceType:
    return InstanceType(name=name, description=desc, gpu_description=desc if gpu else None, vcpus=vcpus,
                        memory_gib=mem, storage_gib=storage, gpu=gpu, prices={r: price for r in stock},
                        spot_factor=0.35, default_stock=stock)


# Verda's instance-type names and shapes.
INSTANCE_TYPES = (
    _type("CPU.4V.16G", None, "4 CPU 16GB RAM", 4, 16, 0, 0.0277, {"FIN-01": 8, "FIN-03": 8}),
    _type("1V100.6V", Gpu("V100", "Tesla V100-SXM2-16GB", 16384, 1), "1x Tesla V100 16GB", 6, 23, 0, 0.39,
          {"FIN-01": 4}),
    _type("1L40S.20V", Gpu("L40S", "NVIDIA L40S", 46068, 1), "1x L40S 48GB", 20, 60, 0, 1.10,
          {"FIN-02": 4, "FIN-03": 4}),
    _type("1RTX6000ADA.10V", Gpu("RTX6000ADA", "NVIDIA RTX 6000 Ada Generation", 49140, 1),
          "1x RTX 6000 Ada 48GB", 10, 60, 0, 1.19, {"FIN-01": 4, "FIN-02": 4}),
    _type("1A100.40S.22V", Gpu("A100", "NVIDIA A100-SXM4-40GB", 40960, 1), "1x A100 SXM4 40GB",
          22, 120, 0, 1.29, {"FIN-01": 2, "ICE-01": 2}),
    _type("1H100.80S.30V", Gpu("H100", "NVIDIA H100 80GB HBM3", 81559, 1), "1x H100 SXM5 80GB",
          30, 120, 0, 2.19, {"FIN-01": 4, "FIN-02": 4, "FIN-03": 4, "ICE-01": 4}),
    _type("8H100.80S.176V", Gpu("H100", "NVIDIA H100 80GB HBM3", 81559, 8), "8x H100 SXM5 80GB",
          176, 1480, 0, 17.52, {"FIN-03": 1}),
)
TYPES = {t.name: t for t in INSTANCE_TYPES}


def supported_os(itype: InstanceType) -> list[str]:
    if itype.gpu is None:
        return list(_SUPPORTED_OS[None])
    return list(_SUPPORTED_OS.get(itype.gpu.name, _GPU_OS))


def _size(description: str, size: float) -> dict[str, Any]:
    return {"description": description, "size_in_gigabytes": size}


def type_json(itype: InstanceType) -> dict[str, Any]:
    price = min(itype.prices.values())
    gpus = itype.gpu.count if itype.gpu else 0
    gpu_mem = itype.gpu.memory_gib * gpus if itype.gpu else 0
    return {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"verda-sim/{itype.name}")),
        "instance_type": itype.name, "price_per_hour": f"{price:.4f}",
        "spot_price": f"{price * (itype.spot_factor or 1):.4f}", "currency": "usd",
        "description": itype.description,
        "cpu": {"description": f"{itype.vcpus} CPU", "number_of_cores": itype.vcpus},
        "gpu": {"description": itype.description if itype.gpu else "", "number_of_gpus": gpus},
        "memory": _size(f"{itype.memory_gib}GB RAM", itype.memory_gib),
        "gpu_memory": _size(f"{gpu_mem}GB VRAM", gpu_mem),
        "storage": _size("dynamic", 0), "best_for": [], "p2p": "",
        "model": itype.gpu.name if itype.gpu else "CPU", "name": itype.gpu.smi_name if itype.gpu else "CPU",
        "manufacturer": "NVIDIA" if itype.gpu else "AMD", "display_name": itype.description,
        "supported_os": supported_os(itype),
    }
