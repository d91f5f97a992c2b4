"""AWS EC2 on-demand prices, shipped with gpuprov because the Price List API cannot be simulated here
(and needs its own endpoint and permissions). Spot prices are live (`DescribeSpotPriceHistory`).

Source: the Amazon EC2 On-Demand pricing page (https://aws.amazon.com/ec2/pricing/on-demand/), Linux,
shared tenancy, USD per hour; captured 2026-06. The three regions below publish the same price for
every type listed. g5.xlarge ($1.006) was cross-checked against a June 2026 third-party rate card;
the P4d/P5 prices are those after AWS's June 2025 reduction. Prices change: refresh this table (and
PRICES_AS_OF) from the pricing page or the Price List bulk file `AmazonEC2/current/<region>/index.json`
before relying on it for money.
"""

from __future__ import annotations

PRICES_AS_OF = "2026-06"
PRICES_SOURCE = "https://aws.amazon.com/ec2/pricing/on-demand/ (Linux, shared tenancy)"

# GPU instance types gpuprov offers on AWS: on-demand USD/hour.
_GPU_TYPES: dict[str, float] = {
    "g4dn.xlarge": 0.526,  # 1x T4 16 GB
    "g4dn.2xlarge": 0.752,
    "g4dn.12xlarge": 3.912,  # 4x T4
    "g5.xlarge": 1.006,  # 1x A10G 24 GB
    "g5.2xlarge": 1.212,
    "g5.12xlarge": 5.672,  # 4x A10G
    "g6.xlarge": 0.8048,  # 1x L4 24 GB
    "g6.2xlarge": 0.9776,
    "g6e.xlarge": 1.861,  # 1x L40S 48 GB
    "p4d.24xlarge": 21.96,  # 8x A100 40 GB
    "p5.48xlarge": 55.04,  # 8x H100 80 GB
}

# Region -> instance type -> on-demand USD/hour. The adapter offers these regions only.
ON_DEMAND: dict[str, dict[str, float]] = {
    "us-east-1": dict(_GPU_TYPES),
    "us-east-2": dict(_GPU_TYPES),
    "us-west-2": dict(_GPU_TYPES),
}


def on_demand_price(region: str, instance_type: str) -> float | None:
    return ON_DEMAND.get(region, {}).get(instance_type)
