"""moto, in this process: the EC2 and STS Query APIs of moto's server mode (its WSGI application,
called directly, no socket) and its EC2 backends, one AWS account per simulated cloud.

What moto lacks is added around it by `aws_api.py`; the only change made inside moto itself is
`client-token` in its DescribeInstances filters (real EC2 has it; moto raises NotImplementedError).
moto is imported on first use: importing the facade module costs nothing.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import secrets
import threading
from typing import Any

# Images every simulated region serves, as AWS publishes them: (owner id, owner alias, name, description).
# The login user of both is `ubuntu`. The Deep Learning Base AMI carries the NVIDIA driver (and so
# nvidia-smi) that plain Ubuntu lacks; the simulated machines carry a simulated nvidia-smi either way.
DLAMI_NAME = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20260601"
IMAGES = (
    ("898082745236", "amazon", DLAMI_NAME,
     "Supported EC2 instances: G4dn, G5, G6, Gr6, G6e, P4, P4de, P5. PyTorch-2.x, NVIDIA driver, CUDA"),
    ("099720109477", None, "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20260601",
     "Canonical, Ubuntu, 24.04, amd64 noble image"),
)
IMAGE_CREATED = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
_lock = threading.Lock()


def image_id(region: str, name: str) -> str:
    """A stable AMI id per region (real AMI ids differ between regions too)."""
    return "ami-0" + hashlib.sha256(f"{region}/{name}".encode()).hexdigest()[:16]


@functools.cache
def _app() -> Any:
    from moto.ec2 import utils
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    # Real EC2 filters DescribeInstances by `client-token`; moto stores the token but has no such filter.
    utils.filter_dict_attribute_mapping.setdefault("client-token", "client_token")
    return DomainDispatcherApplication(create_backend_app)


def new_account_id() -> str:
    return str(100000000000 + secrets.randbelow(900000000000))


class Moto:
    """One simulated AWS account inside the process's moto."""

    def __init__(self, account_id: str | None = None) -> None:
        self.account_id = account_id or new_account_id()
        self._imaged: set[str] = set()

    def call(self, method: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        """Send one Query API request (EC2 or STS, told apart by its signature's scope) to moto.
        Blocking: run it off the event loop."""
        from werkzeug.test import Client

        sent = {k: v for k, v in headers.items() if k not in ("host", "content-length")}
        sent["x-moto-account-id"] = self.account_id
        resp = Client(_app()).open("/", method=method, data=body, headers=sent)
        return resp.status_code, resp.get_data()

    def ec2(self, region: str) -> Any:
        """The account's EC2 backend in `region` (made on first use, with the simulated images)."""
        from moto.ec2.models import ec2_backends

        backend = ec2_backends[self.account_id][region]
        if region not in self._imaged:
            with _lock:
                if region not in self._imaged:
                    self._add_images(backend, region)
                    self._imaged.add(region)
        return backend

    @staticmethod
    def _add_images(backend: Any, region: str) -> None:
        from moto.ec2.models.amis import Ami

        for owner, alias, name, description in IMAGES:
            ami = image_id(region, name)
            backend.amis[ami] = Ami(backend, ami, name=name, description=description, owner_id=owner,
                                    owner_alias=alias, public=True, virtualization_type="hvm",
                                    architecture="x86_64", root_device_type="ebs", hypervisor="xen",
                                    creation_date=IMAGE_CREATED, region_name=f"{region}a")
