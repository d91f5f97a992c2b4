"""What the OCI adapter (providers/oci.py) knows without asking OCI: its credentials form, Oracle's GPU
list prices (OCI has no price API), the regions with GPU shapes, and how OCI's lifecycle states and error
codes read (docs.oracle.com/en-us/iaas/Content/API/References/apierrors.htm; the SDK's models).
"""

from __future__ import annotations

from pydantic import SecretStr

from providers.base import InstanceState
from providers.credentials import Credentials, field
from providers.listing import Listing
from providers.rest import ErrorKind

NSG = "network-security-group"
UBUNTU, UBUNTU_VERSION = "Canonical Ubuntu", "22.04"
USER_DATA_MAX = 32000  # metadata values: 32,000 bytes in all (LaunchInstanceDetails.metadata)
SUBSCRIPTIONS_TTL_S = 300.0
SPOT_FACTOR = 0.5  # preemptible capacity: 50% of on-demand [doc: preemptible instances pricing]
GONE = ("TERMINATED", "TERMINATING")
# Oracle's list prices, USD per shape-hour (oracle.com/cloud/price-list "Compute - GPU": per GPU-hour
# times the shape's GPUs). OCI has no price API; a shape not listed here is not offered.
PRICES: dict[str, float] = {
    "VM.GPU2.1": 1.275,
    "BM.GPU2.2": 2.55,
    "VM.GPU3.1": 2.95,
    "VM.GPU3.2": 5.90,
    "VM.GPU3.4": 11.80,
    "BM.GPU3.8": 23.60,
    "BM.GPU4.8": 24.40,
    "BM.GPU.A100-v2.8": 32.00,
    "VM.GPU.A10.1": 2.00,
    "VM.GPU.A10.2": 4.00,
    "BM.GPU.A10.4": 8.00,
    "BM.GPU.L40S.4": 14.00,
    "BM.GPU.H100.8": 80.00,
    "BM.GPU.H200.8": 80.00,
    "BM.GPU.MI300X.8": 48.00,
}
# Memory per GPU, GiB, per shape: `gpu_description` says only the model ("NVIDIA® A10").
GPU_MEMORY_GIB: dict[str, float] = {
    "VM.GPU2.1": 16,
    "BM.GPU2.2": 16,
    "VM.GPU3.1": 16,
    "VM.GPU3.2": 16,
    "VM.GPU3.4": 16,
    "BM.GPU3.8": 16,
    "BM.GPU4.8": 40,
    "BM.GPU.A100-v2.8": 80,
    "VM.GPU.A10.1": 24,
    "VM.GPU.A10.2": 24,
    "BM.GPU.A10.4": 24,
    "BM.GPU.L40S.4": 48,
    "BM.GPU.H100.8": 80,
    "BM.GPU.H200.8": 141,
    "BM.GPU.MI300X.8": 192,
}
# Regions with GPU shapes (docs.oracle.com "Compute Shapes" GPU availability); offers come from the
# tenancy's subscriptions among them.
REGIONS = [
    "us-ashburn-1",
    "us-phoenix-1",
    "us-chicago-1",
    "us-sanjose-1",
    "ca-toronto-1",
    "ca-montreal-1",
    "sa-saopaulo-1",
    "uk-london-1",
    "eu-frankfurt-1",
    "eu-amsterdam-1",
    "eu-paris-1",
    "eu-milan-1",
    "eu-stockholm-1",
    "me-jeddah-1",
    "me-dubai-1",
    "ap-tokyo-1",
    "ap-osaka-1",
    "ap-sydney-1",
    "ap-melbourne-1",
    "ap-mumbai-1",
    "ap-singapore-1",
    "ap-seoul-1",
]
STATES = {
    "MOVING": InstanceState.PENDING,
    "PROVISIONING": InstanceState.PENDING,
    "STARTING": InstanceState.PENDING,
    "CREATING_IMAGE": InstanceState.RUNNING,
    "RUNNING": InstanceState.RUNNING,
    "STOPPING": InstanceState.STOPPING,
    "STOPPED": InstanceState.STOPPED,
    "TERMINATING": InstanceState.TERMINATING,
    "TERMINATED": InstanceState.TERMINATED,
}
CODES: dict[str, ErrorKind] = {
    "NotAuthenticated": "auth",
    "SignUpRequired": "auth",
    "LimitExceeded": "quota",
    "QuotaExceeded": "quota",
    "TooManyRequests": "rate_limit",
    "OutOfHostCapacity": "capacity",
    "InternalServerError": "transient",
    "ServiceUnavailable": "transient",
    "InvalidParameter": "invalid",
    "CannotParseRequest": "invalid",
    "MissingParameter": "invalid",
}


class OciCredentials(Credentials):
    """An Oracle Cloud API signing key (Profile → API keys)."""

    user_ocid: str = field(
        "User OCID",
        min_length=1,
        max_length=300,
        help="ocid1.user.oc1..…",
        pattern=r"^ocid1\.user\.[a-z0-9.\-]+\.[a-zA-Z0-9.\-]*$",
    )
    tenancy_ocid: str = field(
        "Tenancy OCID",
        min_length=1,
        max_length=300,
        help="ocid1.tenancy.oc1..…",
        pattern=r"^ocid1\.tenancy\.[a-z0-9.\-]+\.[a-zA-Z0-9.\-]*$",
    )
    fingerprint: str = field(
        "Fingerprint",
        min_length=1,
        max_length=100,
        help="of the API key, aa:bb:cc:…",
        pattern=r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){15}$",
    )
    region: str = field(
        "Home Region",
        min_length=1,
        max_length=100,
        help="e.g. us-ashburn-1",
        pattern=r"^[a-z]{2,}-[a-z]+-\d+$",
    )
    private_key: SecretStr = field(
        "Private Key", "file", min_length=1, max_length=20_000, help="the API key's private key (.pem file)"
    )


LISTING = Listing(
    tagline="Bare-metal RDMA GPU clusters",
    how_to_connect=(
        "In the OCI console open Profile → My profile → API keys → Add API key → Generate API key pair: "
        "download the private key (.pem); the configuration preview shows the User OCID, Tenancy OCID, "
        "Fingerprint and region (your Home Region). The user needs to manage instances, VNICs and "
        "network security groups in the root compartment, and the tenancy a VCN with a public subnet "
        "per region."
    ),
)


def plain(description: object) -> str:
    """A `gpu_description` without the trademark signs OCI writes ("NVIDIA® A10" -> "NVIDIA A10")."""
    return str(description or "").replace("®", "").replace("™", "")
