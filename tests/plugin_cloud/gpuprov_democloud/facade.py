"""The demo cloud's simulation: the `local` API under its own prefix, with its own catalogue."""

from __future__ import annotations

import functools
import uuid

from fakeclouds import local_api
from fakeclouds.catalog import Gpu, InstanceType, Region
from fakeclouds.facade import UNIQUE_SLUG, Facade

NAME = "democloud"

FACADE = Facade(
    name=NAME, prefix="/demo/v1", display_name="Demo Cloud (simulated)",
    build_router=functools.partial(local_api.build_router, facade=NAME),
    credentials=lambda token: {"api_key": token},
    login_user="demo",
    regions=(Region("demo-1", "Demo region"),),
    instance_types=(
        InstanceType(name="demo-l4", description="1x L4", gpu_description="L4 (24 GB)", vcpus=4,
                     memory_gib=16, storage_gib=100, gpu=Gpu("L4", "NVIDIA L4", 23034, 1),
                     prices={"demo-1": 0.42}, spot_factor=0.4, default_stock={"demo-1": 4}),
    ),
    names=UNIQUE_SLUG, machine_id=lambda: f"d-{uuid.uuid4().hex[:10]}",
)
