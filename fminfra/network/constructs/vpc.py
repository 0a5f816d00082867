"""A VPC whose subnets are placed by Availability Zone ID.

The L2 `ec2.Vpc` places subnets by AZ *name*, which maps to a different physical zone in every
account, and looks zones up at synth time. GPU capacity reservations live in one physical zone,
so this construct builds the VPC from L1 resources with `AvailabilityZoneId` and then exposes an
`ec2.IVpc` (through `Vpc.from_vpc_attributes`) that L2 constructs accept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from fminfra.core.errors import ValidationError
from fminfra.network.rules import SubnetPlan
from fminfra.observability.constructs.log_group_key import logs_key_statement
from fminfra.policy.constructs.acknowledge import acknowledge, drop_redundant_role_dependency

# Interface endpoints that private GPU nodes need to boot, register and report without a NAT hop.
DEFAULT_INTERFACE_ENDPOINTS: tuple[str, ...] = (
    "STS",
    "SSM",
    "SSM_MESSAGES",
    "EC2_MESSAGES",
    "ECR",
    "ECR_DOCKER",
    "CLOUDWATCH_LOGS",
    "CLOUDWATCH_MONITORING",
    "PROMETHEUS_WORKSPACES",
)


@dataclass(frozen=True, kw_only=True)
class AzIdVpcProps:
    """Props of `AzIdVpc`.

    cidr: the VPC's IPv4 CIDR.
    subnets: the subnet plan (`fminfra.network.rules.plan_subnets`); exactly one private subnet is the
      compute subnet.
    nat_gateways: "one" puts a single NAT gateway in the compute AZ; "per-az" one in each AZ.
      Default: one.
    interface_endpoints: names of `ec2.InterfaceVpcEndpointAwsService` members. Default:
      STS, SSM, SSM messages, EC2 messages, ECR API and Docker, CloudWatch Logs and metrics,
      Prometheus workspaces.
    flow_log_retention_days: retention of the flow-log group (a CloudWatch Logs value). Default: 90.
    removal_policy: of the flow-log group. Default: RETAIN.
    """

    cidr: str
    subnets: list[SubnetPlan]
    nat_gateways: str = "one"
    interface_endpoints: tuple[str, ...] = DEFAULT_INTERFACE_ENDPOINTS
    flow_log_retention_days: int = 90
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN
    name_prefix: str = field(default="fminfra")


# The custom-resource type of the default security group's restriction (the one CDK's L2 Vpc uses).
RESTRICT_DEFAULT_SG_TYPE = "Custom::VpcRestrictDefaultSG"
# The construct id aws-cdk-lib gives AwsCustomResource's singleton function.
PROVIDER_ID = "AWS679f53fac002430cb0da5b7982bd2287"


class AzIdVpc(Construct):
    """Creates a VPC, subnets by AZ ID, an internet gateway, NAT gateway(s), route tables, an S3
    gateway endpoint, interface endpoints and flow logs to CloudWatch Logs.

    Attributes: `vpc` (an `ec2.IVpc` for L2 constructs), `compute_subnet`, `private_subnets`,
    `cfn_subnets` (by plan name), `vpc_id`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: AzIdVpcProps) -> None:
        super().__init__(scope, construct_id)
        compute = [s for s in props.subnets if s.compute]
        if len(compute) != 1:
            raise ValidationError(f"subnets must contain exactly one compute subnet, got {len(compute)}", path="subnets")
        if props.nat_gateways not in ("one", "per-az"):
            raise ValidationError(f"nat_gateways must be one or per-az, got {props.nat_gateways!r}", path="nat_gateways")

        self.cfn_vpc = ec2.CfnVPC(
            self,
            "Vpc",
            cidr_block=props.cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags=[cdk.CfnTag(key="Name", value=props.name_prefix)],
        )
        self.vpc_id = self.cfn_vpc.ref
        self._restrict_default_security_group()
        igw = ec2.CfnInternetGateway(self, "InternetGateway", tags=[cdk.CfnTag(key="Name", value=props.name_prefix)])
        attachment = ec2.CfnVPCGatewayAttachment(self, "InternetGatewayAttachment", vpc_id=self.vpc_id, internet_gateway_id=igw.ref)

        self.cfn_subnets: dict[str, ec2.CfnSubnet] = {}
        route_tables: dict[str, ec2.CfnRouteTable] = {}
        for plan in props.subnets:
            kind = "Public" if plan.public else "Private"
            subnet = ec2.CfnSubnet(
                self,
                plan.name,
                vpc_id=self.vpc_id,
                cidr_block=plan.cidr,
                availability_zone_id=plan.az_id,
                map_public_ip_on_launch=False,
                tags=[
                    cdk.CfnTag(key="Name", value=f"{props.name_prefix}-{kind.lower()}-{plan.az_id}"),
                    cdk.CfnTag(key="fminfra:subnet-kind", value="compute" if plan.compute else kind.lower()),
                ],
            )
            table = ec2.CfnRouteTable(
                self,
                f"{plan.name}RouteTable",
                vpc_id=self.vpc_id,
                tags=[cdk.CfnTag(key="Name", value=f"{props.name_prefix}-{kind.lower()}-{plan.az_id}")],
            )
            ec2.CfnSubnetRouteTableAssociation(self, f"{plan.name}RouteTableAssociation", subnet_id=subnet.ref, route_table_id=table.ref)
            self.cfn_subnets[plan.name] = subnet
            route_tables[plan.name] = table
            if plan.public:
                route = ec2.CfnRoute(
                    self, f"{plan.name}DefaultRoute", route_table_id=table.ref, destination_cidr_block="0.0.0.0/0", gateway_id=igw.ref
                )
                route.add_resource_dependency(attachment)

        compute_az = compute[0].az_id
        nat_azs = [s.az_id for s in props.subnets if s.public] if props.nat_gateways == "per-az" else [compute_az]
        nat_by_az: dict[str, ec2.CfnNatGateway] = {}
        for az_id in nat_azs:
            eip = ec2.CfnEIP(self, f"NatEip-{az_id}", domain="vpc", tags=[cdk.CfnTag(key="Name", value=f"{props.name_prefix}-nat-{az_id}")])
            nat = ec2.CfnNatGateway(
                self,
                f"NatGateway-{az_id}",
                subnet_id=self.cfn_subnets[f"Public-{az_id}"].ref,
                allocation_id=eip.attr_allocation_id,
                tags=[cdk.CfnTag(key="Name", value=f"{props.name_prefix}-nat-{az_id}")],
            )
            nat.add_resource_dependency(attachment)
            nat_by_az[az_id] = nat
        private = [s for s in props.subnets if not s.public]
        for plan in private:
            nat = nat_by_az.get(plan.az_id, nat_by_az[nat_azs[0]])
            ec2.CfnRoute(
                self,
                f"{plan.name}DefaultRoute",
                route_table_id=route_tables[plan.name].ref,
                destination_cidr_block="0.0.0.0/0",
                nat_gateway_id=nat.ref,
            )

        # L2 views of the L1 resources, for constructs that want ec2.IVpc / ec2.ISubnet.
        self.private_subnets: list[ec2.ISubnet] = []
        for plan in private:
            cfn = self.cfn_subnets[plan.name]
            self.private_subnets.append(
                ec2.Subnet.from_subnet_attributes(
                    self,
                    f"{plan.name}View",
                    subnet_id=cfn.ref,
                    availability_zone=cfn.attr_availability_zone,
                    route_table_id=route_tables[plan.name].ref,
                    ipv4_cidr_block=plan.cidr,
                )
            )
        self.compute_subnet: ec2.ISubnet = self.private_subnets[0]
        self.vpc: ec2.IVpc = ec2.Vpc.from_vpc_attributes(
            self,
            "View",
            vpc_id=self.vpc_id,
            vpc_cidr_block=props.cidr,
            availability_zones=[self.cfn_subnets[p.name].attr_availability_zone for p in private],
            private_subnet_ids=[self.cfn_subnets[p.name].ref for p in private],
            private_subnet_route_table_ids=[route_tables[p.name].ref for p in private],
        )

        ec2.CfnVPCEndpoint(
            self,
            "S3GatewayEndpoint",
            vpc_id=self.vpc_id,
            service_name=f"com.amazonaws.{cdk.Aws.REGION}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[route_tables[p.name].ref for p in private],
        )
        endpoint_sg = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=self.vpc,
            description="HTTPS from inside the VPC to interface endpoints",
            allow_all_outbound=False,
        )
        endpoint_sg.add_ingress_rule(ec2.Peer.ipv4(props.cidr), ec2.Port.tcp(443), "HTTPS from the VPC")
        endpoint_subnets = ec2.SubnetSelection(subnets=self.private_subnets)
        for name in props.interface_endpoints:
            service = getattr(ec2.InterfaceVpcEndpointAwsService, name, None)
            if service is None:
                raise ValidationError(f"interface_endpoints: {name!r} is not an ec2.InterfaceVpcEndpointAwsService member")
            ec2.InterfaceVpcEndpoint(
                self,
                f"{name.title().replace('_', '')}Endpoint",
                vpc=self.vpc,
                service=service,
                subnets=endpoint_subnets,
                security_groups=[endpoint_sg],
                private_dns_enabled=True,
                open=False,
            )

        # Flow logs name every address that talks in the VPC: encrypted with a key of the account
        # (docs/facts/observability.md#cloudwatch-logs-kms-key-policy). The group's name is
        # CloudFormation's, so the key policy names the account's and region's log groups.
        self.flow_log_key = kms.Key(
            self,
            "FlowLogKey",
            description=f"{props.name_prefix} VPC flow logs",
            enable_key_rotation=True,
            removal_policy=props.removal_policy,
        )
        self.flow_log_key.add_to_resource_policy(logs_key_statement(cdk.Stack.of(self), "*"))
        flow_log_group = logs.CfnLogGroup(
            self,
            "FlowLogGroup",
            retention_in_days=props.flow_log_retention_days,
            kms_key_id=self.flow_log_key.key_arn,
        )
        flow_log_group.apply_removal_policy(props.removal_policy)
        flow_log_role = iam.Role(self, "FlowLogRole", assumed_by=iam.ServicePrincipal("vpc-flow-logs.amazonaws.com"))
        flow_log_role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[flow_log_group.attr_arn],
            )
        )
        ec2.CfnFlowLog(
            self,
            "FlowLog",
            resource_id=self.vpc_id,
            resource_type="VPC",
            traffic_type="ALL",
            log_destination_type="cloud-watch-logs",
            log_group_name=flow_log_group.ref,
            deliver_logs_permission_arn=flow_log_role.role_arn,
        )

    def _restrict_default_security_group(self) -> None:
        """Removes the default security group's rules (AWS adds all traffic from itself and all
        outbound: docs/facts/network.md#vpc-default-security-group-rules), so that anything launched
        without a group reaches nothing. CloudFormation cannot remove rules, so two SDK calls run
        as a custom resource (`Custom::VpcRestrictDefaultSG`, the type CDK's own feature uses), one
        for each direction; `scripts/deploy_local.py` emulates the type on moto."""
        stack = cdk.Stack.of(self)
        group_id = self.cfn_vpc.attr_default_security_group
        group_arn = stack.format_arn(service="ec2", resource="security-group", resource_name=group_id)
        calls = {
            "Ingress": ("revokeSecurityGroupIngress", {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id}]}),
            "Egress": ("revokeSecurityGroupEgress", {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}),
        }
        for direction, (action, permission) in calls.items():
            call = cr.AwsSdkCall(
                service="EC2",
                action=action,
                parameters={"GroupId": group_id, "IpPermissions": [permission]},
                physical_resource_id=cr.PhysicalResourceId.of(f"{direction.lower()}-rules-removed"),
            )
            cr.AwsCustomResource(
                self,
                f"RestrictDefaultSecurityGroup{direction}",
                resource_type=RESTRICT_DEFAULT_SG_TYPE,
                on_create=call,
                on_update=call,
                policy=cr.AwsCustomResourcePolicy.from_statements(
                    [iam.PolicyStatement(actions=[f"ec2:{action[0].upper()}{action[1:]}"], resources=[group_arn])]
                ),
                install_latest_aws_sdk=False,
            )
        # AwsCustomResource's one Lambda function per stack (a CDK singleton), made by aws-cdk-lib.
        provider = stack.node.try_find_child(PROVIDER_ID)
        assert isinstance(provider, Construct)
        role = provider.node.try_find_child("ServiceRole")
        assert role is not None
        acknowledge(
            role,
            "IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "CDK's AwsCustomResource handler role; this AWS managed policy only lets it write its own CloudWatch logs",
        )
        drop_redundant_role_dependency(provider)
