"""What the simulated Azure sells: locations with their availability zones, VM sizes (as the
Resource SKUs API describes them, restrictions included) and marketplace images.

Stock is per zone: the engine's "regions" are zones (`eastus-1`, ...), and a location without
zones (`northcentralus`) is one engine region. So an admin `set_stock(size, "eastus-2", 0)` or a
`capacity` fault with `region="eastus-2"` empties one zone, and a zonal create there fails with
`ZonalAllocationFailed` while the other zones still allocate. Azure has no stock API: an empty zone
still shows in the SKU list, as on the real cloud.

Prices bill the simulated machines only (the ARM API reports none); they follow the adapter's dated
table (providers/azure_prices.py), so the simulation bills what the offers said.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fakeclouds.catalog import Gpu, InstanceType, Region
from providers.azure_prices import SIZES

# location -> its availability zones (empty: a location without zones)
LOCATIONS: dict[str, tuple[str, ...]] = {
    "eastus": ("1", "2", "3"),
    "northcentralus": (),
    "westeurope": ("1", "2", "3"),
    "westus2": ("1", "2", "3"),
}
_DISPLAY = {
    "eastus": "East US",
    "northcentralus": "North Central US",
    "westeurope": "West Europe",
    "westus2": "West US 2",
}


def engine_region(location: str, zone: str | None) -> str:
    """The engine region (stock unit) of a location's zone: `eastus-1`; the location itself without zones."""
    return f"{location}-{zone}" if zone else location


def engine_regions(location: str) -> list[str]:
    zones = LOCATIONS.get(location, ())
    return [engine_region(location, z) for z in zones] if zones else [location]


def split_engine_region(region: str) -> tuple[str, str | None]:
    location, _, zone = region.rpartition("-")
    if location in LOCATIONS and zone in LOCATIONS[location]:
        return location, zone
    return region, None


def _region(name: str) -> Region:
    location, zone = split_engine_region(name)
    return Region(name, _DISPLAY[location] + (f" zone {zone}" if zone else ""))


REGIONS = tuple(_region(r) for loc in LOCATIONS for r in engine_regions(loc))


@dataclass(frozen=True)
class Restriction:
    """A Resource SKU restriction: the size is not offered to this subscription there."""

    location: str
    zones: tuple[str, ...] = ()  # empty: the whole location
    reason: str = "NotAvailableForSubscription"


@dataclass(frozen=True)
class Size:
    name: str  # Standard_NC4as_T4_v3
    family: str  # the quota family, e.g. standardNCASv3_T4Family
    vcpus: int
    memory_gb: float
    gpu: Gpu | None
    locations: tuple[str, ...]
    spot: bool = True  # LowPriorityCapable
    restrictions: tuple[Restriction, ...] = ()
    stock: int = 4  # per zone (per location without zones)
    hyperv: str = "V1,V2"

    def available_in(self, location: str, zone: str | None) -> bool:
        """Not restricted there (restrictions are what the SKU list says; stock is another matter)."""
        for r in self.restrictions:
            if r.location == location and (not r.zones or (zone is not None and zone in r.zones)):
                return False
        return location in self.locations

    def instance_type(self) -> InstanceType:
        price = SIZES[self.name].on_demand if self.name in SIZES else 0.096  # D2s_v5's list price
        spot = SIZES[self.name].spot if self.name in SIZES else None
        regions = [r for loc in self.locations for r in engine_regions(loc)]
        gpu_desc = f"{self.gpu.count}x {self.gpu.smi_name}" if self.gpu else None
        return InstanceType(
            name=self.name,
            description=self.name,
            gpu_description=gpu_desc,
            vcpus=self.vcpus,
            memory_gib=round(self.memory_gb),
            storage_gib=0,
            gpu=self.gpu,
            prices={r: price for r in regions},
            spot_factor=(spot / price) if (self.spot and spot) else None,
            default_stock={r: self.stock for r in regions},
        )


_ALL = ("eastus", "northcentralus", "westeurope", "westus2")

SIZES_SOLD: tuple[Size, ...] = (
    Size("Standard_NC4as_T4_v3", "standardNCASv3_T4Family", 4, 28, Gpu("T4", "Tesla T4", 15360, 1), _ALL),
    Size("Standard_NC8as_T4_v3", "standardNCASv3_T4Family", 8, 56, Gpu("T4", "Tesla T4", 15360, 1), _ALL),
    Size(
        "Standard_NC64as_T4_v3",
        "standardNCASv3_T4Family",
        64,
        440,
        Gpu("T4", "Tesla T4", 15360, 4),
        ("eastus", "westus2"),
        stock=1,
    ),
    Size(
        "Standard_NV36ads_A10_v5",
        "StandardNVADSA10v5Family",
        36,
        440,
        Gpu("A10", "NVIDIA A10", 23028, 1),
        ("eastus", "westeurope", "westus2"),
        stock=2,
    ),
    # Zone 3 of eastus is closed to this subscription: the SKU list says so, a create there is refused.
    Size(
        "Standard_NC24ads_A100_v4",
        "StandardNCADSA100v4Family",
        24,
        220,
        Gpu("A100", "NVIDIA A100 80GB PCIe", 81920, 1),
        ("eastus", "westeurope"),
        restrictions=(Restriction("eastus", ("3",)),),
        stock=2,
    ),
    Size(
        "Standard_NC40ads_H100_v5",
        "standardNCadsH100v5Family",
        40,
        320,
        Gpu("H100", "NVIDIA H100 NVL", 95830, 1),
        ("eastus", "westus2"),
        stock=1,
        hyperv="V2",
    ),
    # Sold in West Europe but not to this subscription (a location restriction), and no spot.
    Size(
        "Standard_ND96isr_H100_v5",
        "standardNDSH100v5Family",
        96,
        1900,
        Gpu("H100", "NVIDIA H100 80GB HBM3", 81559, 8),
        ("eastus", "westeurope"),
        spot=False,
        restrictions=(Restriction("westeurope"),),
        stock=1,
        hyperv="V2",
    ),
    # A CPU size: listed by the SKU API, never offered by the adapter (no GPUs).
    Size("Standard_D2s_v5", "standardDSv5Family", 2, 8, None, _ALL, stock=8),
)
BY_NAME = {s.name.lower(): s for s in SIZES_SOLD}
INSTANCE_TYPES = tuple(s.instance_type() for s in SIZES_SOLD)


@dataclass(frozen=True)
class Image:
    publisher: str
    offer: str
    sku: str
    hyperv: str = "V2"
    versions: tuple[str, ...] = field(default=("latest",))

    def urn(self) -> str:
        return f"{self.publisher}:{self.offer}:{self.sku}"


IMAGES: tuple[Image, ...] = (
    Image("microsoft-dsvm", "ubuntu-hpc", "2204"),
    Image("Canonical", "ubuntu-24_04-lts", "server"),
    Image("Canonical", "0001-com-ubuntu-server-jammy", "22_04-lts-gen2"),
    Image("Canonical", "0001-com-ubuntu-server-jammy", "22_04-lts", hyperv="V1"),
)


def find_image(publisher: str, offer: str, sku: str) -> Image | None:
    want = (publisher.lower(), offer.lower(), sku.lower())
    return next((i for i in IMAGES if (i.publisher.lower(), i.offer.lower(), i.sku.lower()) == want), None)


# Azure refuses these admin user names on Linux VMs (its documented list).
RESERVED_ADMIN_NAMES = frozenset(
    {
        "administrator",
        "admin",
        "user",
        "user1",
        "test",
        "user2",
        "test1",
        "user3",
        "admin1",
        "1",
        "123",
        "a",
        "actuser",
        "adm",
        "admin2",
        "aspnet",
        "backup",
        "console",
        "david",
        "guest",
        "john",
        "owner",
        "root",
        "server",
        "sql",
        "support",
        "support_388945a0",
        "sys",
        "test2",
        "test3",
        "user4",
        "user5",
    }
)
