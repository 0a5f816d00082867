"""Network stack: the VPC by AZ ID, endpoints, flow logs and the EFA security group."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from fminfra.config import EnvironmentConfig
from fminfra.eks.rules import INTERNAL_ELB_SUBNET_TAG
from fminfra.network.constructs.efa_security_group import EfaSecurityGroup, EfaSecurityGroupProps
from fminfra.network.constructs.vpc import AzIdVpc, AzIdVpcProps

# The network config's names of public subnets (`NetworkConfig.subnets`: Public-<az id>).
PUBLIC_SUBNET_PREFIX = "Public-"


def removal_policy(cfg: EnvironmentConfig) -> cdk.RemovalPolicy:
    """The config's removal policy for stateful resources."""
    return cdk.RemovalPolicy.DESTROY if cfg.removal_policy == "destroy" else cdk.RemovalPolicy.RETAIN


class NetworkStack(cdk.Stack):
    """Long-lived networking every other stack of the environment lives in.

    Attributes for other stacks: `vpc`, `compute_subnet`, `private_subnets`, `efa_security_group`.
    """

    def __init__(self, scope: Construct, construct_id: str, *, cfg: EnvironmentConfig, **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.cfg = cfg
        network = AzIdVpc(
            self,
            "Vpc",
            AzIdVpcProps(
                cidr=cfg.network.cidr,
                subnets=cfg.network.subnets(),
                nat_gateways=cfg.network.nat_gateways,
                flow_log_retention_days=cfg.network.flow_log_retention_days,
                removal_policy=removal_policy(cfg),
                name_prefix=cfg.physical_name(),
            ),
        )
        self.network = network
        if cfg.compute.needs_eks and cfg.compute.eks is not None and cfg.compute.eks.load_balancer_controller:
            # The AWS Load Balancer Controller places internal load balancers in the subnets with this tag
            # (docs/facts/eks.md#lbc-subnet-discovery-tags): the private ones, never the public.
            key, value = INTERNAL_ELB_SUBNET_TAG
            for name, cfn in network.cfn_subnets.items():
                if not name.startswith(PUBLIC_SUBNET_PREFIX):
                    cdk.Tags.of(cfn).add(key, value)
        self.vpc: ec2.IVpc = network.vpc
        self.compute_subnet: ec2.ISubnet = network.compute_subnet
        self.private_subnets: list[ec2.ISubnet] = network.private_subnets
        self.efa_security_group = EfaSecurityGroup(self, "EfaSecurityGroup", EfaSecurityGroupProps(vpc=self.vpc)).security_group
        cdk.CfnOutput(self, "VpcId", value=network.vpc_id, description="VPC of the environment")
        cdk.CfnOutput(self, "ComputeSubnetId", value=self.compute_subnet.subnet_id, description="Private subnet in the compute AZ")
