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


# AWS reserves the first four and the last address of every subnet (docs/facts/network.md#subnet-reserved-addresses).
SUBNET_RESERVED_IPS = 5


def usable_addresses(cidr: str) -> int:
    """Addresses of a subnet an ENI can take: its size less the five AWS reserves."""
    return ipaddress.IPv4Network(cidr).num_addresses - SUBNET_RESERVED_IPS


# The VPC CNI's per-type limits (aws/amazon-vpc-cni-k8s v1.21.1, pkg/vpc/vpc_ip_resource_limit.go, from EC2
# DescribeInstanceTypes): (ENIs it attaches: network card 0's MaximumNetworkInterfaces, as it manages card 0
# only; Ipv4AddressesPerInterface). fact: docs/facts/eks.md#vpc-cni-eni-limits. A type not listed: unknown.
VPC_CNI_ENI_LIMITS: dict[str, tuple[int, int]] = {
    "p4d.24xlarge": (15, 50),
    "p4de.24xlarge": (15, 50),
    "p5.48xlarge": (2, 50),
    "p5e.48xlarge": (2, 50),
    "p5en.48xlarge": (4, 50),
    "p6-b200.48xlarge": (4, 50),
    "p6-b300.48xlarge": (4, 50),
    "g5.xlarge": (4, 15),
    "g5.2xlarge": (4, 15),
    "g5.4xlarge": (8, 30),
    "g5.8xlarge": (8, 30),
    "g5.12xlarge": (15, 50),
    "g5.16xlarge": (8, 30),
    "g5.24xlarge": (15, 50),
    "g5.48xlarge": (7, 50),
    "g6.xlarge": (4, 15),
    "g6.2xlarge": (4, 15),
    "g6.4xlarge": (8, 30),
    "g6.8xlarge": (8, 30),
    "g6.12xlarge": (8, 30),
    "g6.16xlarge": (15, 50),
    "g6.24xlarge": (15, 50),
    "g6.48xlarge": (15, 50),
    "g6e.xlarge": (4, 15),
    "g6e.2xlarge": (4, 15),
    "g6e.4xlarge": (8, 30),
    "g6e.8xlarge": (8, 30),
    "g6e.12xlarge": (10, 30),
    "g6e.16xlarge": (15, 50),
    "g6e.24xlarge": (10, 50),
    "g6e.48xlarge": (10, 50),
}

# `plan` warns when the VPC CNI's addresses of one pool or node group at its maximum (upper bound) come to more
# than this share of a subnet its nodes can all land in: fminfra's own threshold, leaving room for the other
# addresses a subnet holds (system nodes, endpoints, load balancers, EKS's control-plane ENIs).
POD_IP_SUBNET_SHARE = 0.5


def vpc_cni_node_addresses(instance_type: str, efa_interfaces: int = 0) -> tuple[int, int] | None:
    """Subnet addresses one node takes under the VPC CNI's defaults (WARM_ENI_TARGET=1, no prefix
    delegation, card 0 only; docs/facts/eks.md#vpc-cni-warm-eni-target): (with its pods on the first ENI and
    one warm ENI: two ENIs' addresses; at max pods: every ENI's, plus one address per `efa` interface beyond
    card 0's, EFA_INTERFACES of them, which Karpenter attaches for pods that ask for EFA). None: unknown type."""
    limits = VPC_CNI_ENI_LIMITS.get(instance_type)
    if limits is None:
        return None
    enis, per_eni = limits
    return min(2, enis) * per_eni, enis * per_eni + max(efa_interfaces - 1, 0)


def vpc_cni_max_pods(instance_type: str) -> int | None:
    """The VPC CNI's max pods of a type: ENIs x (addresses per ENI - 1) + 2 (misc/eni-max-pods.txt's formula)."""
    limits = VPC_CNI_ENI_LIMITS.get(instance_type)
    return None if limits is None else limits[0] * (limits[1] - 1) + 2


# A VPC endpoint's service name, com.amazonaws.<region>.<service>: the region a template's endpoints are in.
ENDPOINT_SERVICE_REGION = re.compile(r"^com\.amazonaws\.([a-z]{2}(?:-[a-z]+)+-\d+)\.")
