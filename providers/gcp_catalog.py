"""What Compute Engine's API does not say, and gpuprov needs to make offers: prices, GPU memory,
which GPUs attach to N1 machines, and the GPU regions the adapter offers. A dated table, shipped with
the adapter.

Prices. Compute Engine's prices live in the Cloud Billing Catalog API (`services/6F81-5844-456A`
SKUs), a separate service with its own auth that the simulation does not serve; on-demand and spot
prices are both published per region and change at most once a day (cloud.google.com/spot-vms/pricing).
So spot is a price table too, like on-demand: there is no live spot market to ask. The adapter
prices an offer as host (vCPUs + memory of the machine type) + GPUs, which is how Compute Engine
bills. Regions without a row here are not offered.

Sources, priced on PRICED_ON: host prices marked [sky] are the SkyPilot catalogue's rows
(skypilot-org/skypilot-catalog, catalogs/v8/gcp/vms.csv, which reads the Billing Catalog); the rest
are list prices as published on cloud.google.com/compute/vm-instance-pricing and /gpus-pricing and
spot prices as on /spot-vms/pricing, transcribed by hand [approx]: good to a few percent, for
ranking offers, not for invoices. Refresh the table by re-reading those pages.
"""

from __future__ import annotations

PRICED_ON = "2026-11-30"

# (on-demand, spot) USD/hour
Price = tuple[float, float]

# Host part of a machine type (vCPUs + memory; bundled GPUs are priced apart, below).
HOSTS: dict[str, dict[str, Price]] = {
    "us-central1": {
        "n1-standard-4": (0.189999, 0.040),  # [approx]
        "n1-standard-8": (0.379998, 0.080),  # [approx]
        "n1-standard-16": (0.759996, 0.160),  # [approx]
        "g2-standard-4": (0.14683, 0.0587),  # [approx]
        "g2-standard-8": (0.29366, 0.1175),  # [approx]
        "g2-standard-24": (0.88098, 0.3524),  # [approx]
        "a2-highgpu-1g": (0.73948, 0.36975),  # [sky]
        "a2-highgpu-2g": (1.47895, 0.7395),  # [sky]
        "a2-ultragpu-1g": (1.09962, 0.54978),  # [sky]
    },
    "us-east1": {
        "n1-standard-4": (0.189999, 0.040),  # [approx]
        "n1-standard-8": (0.379998, 0.080),  # [approx]
        "n1-standard-16": (0.759996, 0.160),  # [approx]
        "g2-standard-4": (0.14683, 0.0587),  # [approx]
        "g2-standard-8": (0.29366, 0.1175),  # [approx]
        "a2-highgpu-1g": (0.73948, 0.36975),  # [sky]
        "a2-highgpu-2g": (1.47895, 0.7395),  # [sky]
    },
    "europe-west4": {
        "n1-standard-4": (0.20888, 0.044),  # [approx]
        "n1-standard-8": (0.41776, 0.088),  # [approx]
        "n1-standard-16": (0.83552, 0.176),  # [approx]
        "g2-standard-4": (0.16151, 0.0646),  # [approx]
        "g2-standard-8": (0.32303, 0.1292),  # [approx]
        "a2-highgpu-1g": (0.81406, 0.31824),  # [sky]
        "a2-highgpu-2g": (1.62813, 0.63648),  # [sky]
        "a2-ultragpu-1g": (1.2105, 0.47328),  # [sky]
    },
}

# Per GPU, by accelerator type.
GPUS: dict[str, dict[str, Price]] = {
    "us-central1": {
        "nvidia-tesla-t4": (0.35, 0.14),  # [approx]
        "nvidia-tesla-v100": (2.48, 0.99),  # [approx]
        "nvidia-l4": (0.5599, 0.224),  # [approx]
        "nvidia-tesla-a100": (2.933908, 1.17),  # [approx]
        "nvidia-a100-80gb": (3.92808, 1.57),  # [approx]
    },
    "us-east1": {
        "nvidia-tesla-t4": (0.35, 0.14),  # [approx]
        "nvidia-tesla-v100": (2.48, 0.99),  # [approx]
        "nvidia-l4": (0.5599, 0.224),  # [approx]
        "nvidia-tesla-a100": (2.933908, 1.17),  # [approx]
    },
    "europe-west4": {
        "nvidia-tesla-t4": (0.41, 0.16),  # [approx]
        "nvidia-tesla-v100": (2.55, 1.02),  # [approx]
        "nvidia-l4": (0.6159, 0.2464),  # [approx]
        "nvidia-tesla-a100": (3.2273, 1.29),  # [approx]
        "nvidia-a100-80gb": (4.3209, 1.73),  # [approx]
    },
}

# Accelerator type -> (canonical GPU name, memory GiB per GPU). The API names types and gives a
# description ("NVIDIA T4") but no memory; types missing here are not offered.
GPU_MODELS: dict[str, tuple[str, float]] = {
    "nvidia-tesla-t4": ("T4", 16),
    "nvidia-tesla-p4": ("P4", 8),
    "nvidia-tesla-p100": ("P100", 16),
    "nvidia-tesla-v100": ("V100", 16),
    "nvidia-l4": ("L4", 24),
    "nvidia-tesla-a100": ("A100", 40),
    "nvidia-a100-80gb": ("A100", 80),
    "nvidia-h100-80gb": ("H100", 80),
}

# GPUs that attach to an N1 machine (`guestAccelerators`); A2/G2/A3 machine types come with theirs.
N1_ATTACHABLE = frozenset({"nvidia-tesla-t4", "nvidia-tesla-p4", "nvidia-tesla-p100", "nvidia-tesla-v100"})

# The N1 host gpuprov offers per GPU count: one shape per count (4 vCPUs a GPU), within every
# attachable GPU's vCPU limit for that count.
N1_HOSTS: dict[int, str] = {1: "n1-standard-4", 2: "n1-standard-8", 4: "n1-standard-16"}


# Compute Engine regions with GPUs (the API refuses a create without a zone; gpuprov asks for a
# region and picks the zones). Offers exist where the price table (above) has prices.
REGIONS = [
    "us-central1",
    "us-east1",
    "us-east4",
    "us-east5",
    "us-south1",
    "us-west1",
    "us-west2",
    "us-west3",
    "us-west4",
    "northamerica-northeast1",
    "southamerica-east1",
    "europe-west1",
    "europe-west2",
    "europe-west3",
    "europe-west4",
    "europe-west6",
    "europe-west8",
    "europe-west9",
    "europe-north1",
    "europe-central2",
    "me-west1",
    "asia-east1",
    "asia-northeast1",
    "asia-northeast3",
    "asia-south1",
    "asia-southeast1",
    "australia-southeast1",
]


def combo_type(host: str, accelerator: str, count: int) -> str:
    """The offer's instance type for an N1 host with attached GPUs: `n1-standard-4+nvidia-tesla-t4:1`."""
    return f"{host}+{accelerator}:{count}"


def split_type(instance_type: str) -> tuple[str, str | None, int]:
    """(machine type, attached accelerator type or None, count) of an offer's instance type."""
    host, plus, rest = instance_type.partition("+")
    if not plus:
        return host, None, 0
    accelerator, _, count = rest.rpartition(":")
    if not accelerator or not count.isdigit() or int(count) < 1:
        raise ValueError(f"malformed instance type {instance_type!r}")
    return host, accelerator, int(count)


def price(region: str, machine_type: str, gpus: list[tuple[str, int]], *, spot: bool) -> float | None:
    """USD/hour of `machine_type` with `gpus` [(accelerator type, count)] in `region`; None when the
    table lacks a part of it."""
    host = HOSTS.get(region, {}).get(machine_type)
    if host is None:
        return None
    total = host[1 if spot else 0]
    for accelerator, count in gpus:
        per_gpu = GPUS.get(region, {}).get(accelerator)
        if per_gpu is None:
            return None
        total += count * per_gpu[1 if spot else 0]
    return round(total, 5)
