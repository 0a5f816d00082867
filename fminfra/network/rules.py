"""Subnet plan of an environment's VPC, computed from the config before any synth.

The compute AZ gets one large private subnet (room for thousands of node and pod IPs); every
other AZ gets a smaller private subnet, and every AZ a small public subnet that holds only NAT
gateways. Blocks are handed out largest first, so each one stays aligned to its size.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from fminfra.core.errors import ValidationError

# An AZ *name* (us-west-2a), which fminfra refuses in favour of AZ IDs (names map to different zones per account).
AZ_NAME_RULE = re.compile(r"^(?P<region>[a-z]{2}(-gov)?-[a-z]+-[0-9])[a-z]$")


@dataclass(frozen=True, kw_only=True)
class SubnetPlan:
    """One subnet: its AZ ID, CIDR and whether it is public (NAT only) or private."""

    az_id: str
    cidr: str
    public: bool
    compute: bool

    @property
    def name(self) -> str:
        return f"{'Public' if self.public else 'Private'}-{self.az_id}"


def plan_subnets(
    *,
    cidr: str,
    az_ids: list[str],
    compute_az_id: str,
    compute_subnet_prefix: int,
    private_subnet_prefix: int,
    public_subnet_prefix: int,
) -> list[SubnetPlan]:
    """Allocate the subnets inside `cidr`; ValidationError when they do not fit."""
    network = ipaddress.IPv4Network(cidr)
    if private_subnet_prefix < compute_subnet_prefix:
        raise ValidationError(
            f"private_subnet_prefix /{private_subnet_prefix} must not be larger than the compute "
            f"subnet (compute_subnet_prefix /{compute_subnet_prefix})"
        )
    others = [az for az in az_ids if az != compute_az_id]
    private_end = int(network.network_address) + 2 ** (32 - compute_subnet_prefix) + len(others) * 2 ** (32 - private_subnet_prefix)
    public_size = 2 ** (32 - public_subnet_prefix)
    public_start = int(network.broadcast_address) + 1 - len(az_ids) * public_size
    if compute_subnet_prefix < network.prefixlen or private_end > public_start:
        needed = (private_end - int(network.network_address)) + len(az_ids) * public_size
        raise ValidationError(
            f"cidr {cidr} ({network.num_addresses} addresses) is too small for the subnets: "
            f"they need {needed} addresses (one /{compute_subnet_prefix} in the compute AZ, "
            f"a /{private_subnet_prefix} in each other AZ, a /{public_subnet_prefix} public "
            "subnet per AZ); use a larger cidr or smaller subnet prefixes"
        )
    # Private subnets grow up from the bottom (compute first), public ones down from the top, so
    # an AZ appended to az_ids adds subnets without moving any existing one.
    plans: list[SubnetPlan] = [
        SubnetPlan(
            az_id=compute_az_id,
            cidr=str(ipaddress.IPv4Network((int(network.network_address), compute_subnet_prefix))),
            public=False,
            compute=True,
        )
    ]
    cursor = int(network.network_address) + 2 ** (32 - compute_subnet_prefix)
    for az_id in others:
        block = ipaddress.IPv4Network((cursor, private_subnet_prefix))
        plans.append(SubnetPlan(az_id=az_id, cidr=str(block), public=False, compute=False))
        cursor += block.num_addresses
    top = int(network.broadcast_address) + 1
    for az_id in az_ids:
        top -= public_size
        block = ipaddress.IPv4Network((top, public_subnet_prefix))
        plans.append(SubnetPlan(az_id=az_id, cidr=str(block), public=True, compute=False))
    return plans
