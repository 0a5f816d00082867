"""The security group that EFA traffic (and EFA-enabled FSx for Lustre) requires."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_ec2 as ec2
from constructs import Construct


@dataclass(frozen=True, kw_only=True)
class EfaSecurityGroupProps:
    """Props of `EfaSecurityGroup`.

    vpc: the VPC of the GPU nodes.
    description: the group's description. Default: says it carries EFA traffic.
    allow_egress_to_anywhere: also allow all outbound traffic (nodes reach endpoints, S3 and
      the NAT gateway through it). Default: true.

    Why 0.0.0.0/0 outbound stays (docs/facts/network.md#efa-security-group-egress-anywhere):
    HyperPod's prerequisites advise against 0.0.0.0/0 outbound rules on an EFA group ("may cause
    EFA health check failures"), while AWS's own HyperPod sample template pairs the self rules
    with exactly that rule, and the nodes need outbound traffic to destinations a security group
    rule cannot name (pinned downloads through the NAT gateway, S3 through its gateway endpoint,
    ECR, SSM, the EKS API). A security group evaluates the final destination, so "VPC CIDR only"
    would cut the NAT path. fminfra keeps the broad rule and an explicit rule to itself, so EFA
    traffic never depends on the broad one; `allow_egress_to_anywhere=False` removes it for
    fully private setups.
    """

    vpc: ec2.IVpc
    description: str = "EFA: all traffic to and from members of this group"
    allow_egress_to_anywhere: bool = True


class EfaSecurityGroup(Construct):
    """Creates a security group that allows all traffic in from itself and out to itself.

    EFA's OS-bypass traffic and EFA-enabled FSx for Lustre both fail without this rule pair.
    Attributes: `security_group`, `connections`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: EfaSecurityGroupProps) -> None:
        super().__init__(scope, construct_id)
        self.security_group = ec2.SecurityGroup(
            self,
            "Group",
            vpc=props.vpc,
            description=props.description,
            allow_all_outbound=props.allow_egress_to_anywhere,
        )
        self.security_group.add_ingress_rule(self.security_group, ec2.Port.all_traffic(), "EFA: all traffic from itself")
        # An explicit rule to itself, kept even when all outbound traffic is allowed: the EFA
        # requirement must not depend on the broader rule staying in place.
        ec2.CfnSecurityGroupEgress(
            self,
            "EgressToItself",
            group_id=self.security_group.security_group_id,
            ip_protocol="-1",
            destination_security_group_id=self.security_group.security_group_id,
            description="EFA: all traffic to itself",
        )
        self.connections = self.security_group.connections
