"""An Amazon Managed Grafana (AMG) workspace that reads an AMP workspace and CloudWatch."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_grafana as grafana
from aws_cdk import aws_iam as iam
from constructs import Construct

from fminfra.core.errors import ValidationError
from fminfra.observability.constructs.prometheus_workspace import PrometheusWorkspace
from fminfra.observability.rules.inputs import GRAFANA_NAME
from fminfra.policy.constructs.acknowledge import acknowledge

AUTHENTICATION_PROVIDERS = ("AWS_SSO",)
# CloudWatch's read actions have no resource-level permissions: they take "*" only.
CLOUDWATCH_READ_ACTIONS = [
    "cloudwatch:DescribeAlarmsForMetric",
    "cloudwatch:DescribeAlarmHistory",
    "cloudwatch:DescribeAlarms",
    "cloudwatch:ListMetrics",
    "cloudwatch:GetMetricData",
    "cloudwatch:GetMetricStatistics",
    "cloudwatch:GetInsightRuleReport",
    "ec2:DescribeRegions",
]


@dataclass(frozen=True, kw_only=True)
class GrafanaWorkspaceProps:
    """Props of `GrafanaWorkspace`.

    name: the workspace name; include the environment name.
    prometheus: the AMP workspace the dashboards query.
    authentication: AWS_SSO (IAM Identity Center, which must be enabled in the account or its
      organization). Default: AWS_SSO.
    grafana_version: Default: 10.4.
    """

    name: str
    prometheus: PrometheusWorkspace
    authentication: str = "AWS_SSO"
    grafana_version: str = "10.4"


class GrafanaWorkspace(Construct):
    """Creates an AMG workspace with `PermissionType: CUSTOMER_MANAGED` (the form CloudFormation
    and the API take) and its own role, allowed to query the AMP workspace and read CloudWatch.

    Data sources and dashboards are not CloudFormation resources: `python -m fminfra grafana sync`
    creates them through the Grafana HTTP API.
    Attributes: `workspace` (the L1), `workspace_id`, `endpoint`, `role`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: GrafanaWorkspaceProps) -> None:
        super().__init__(scope, construct_id)
        if not cdk.Token.is_unresolved(props.name) and (problem := GRAFANA_NAME.problem(props.name)):
            raise ValidationError(f"name {problem}")
        if props.authentication not in AUTHENTICATION_PROVIDERS:
            raise ValidationError(
                f"authentication must be one of {', '.join(AUTHENTICATION_PROVIDERS)}, got {props.authentication!r}", path="authentication"
            )
        stack = cdk.Stack.of(self)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal(
                "grafana.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "StringLike": {"aws:SourceArn": stack.format_arn(service="grafana", resource="/workspaces", resource_name="*")},
                },
            ),
            description=f"AMG workspace {props.name}: query AMP, read CloudWatch",
        )
        props.prometheus.grant_query(self.role)
        self.role.add_to_policy(iam.PolicyStatement(actions=["aps:ListWorkspaces"], resources=["*"]))
        self.role.add_to_policy(iam.PolicyStatement(actions=CLOUDWATCH_READ_ACTIONS, resources=["*"]))
        acknowledge(
            self.role,
            "IAM5[Resource::*]",
            "CloudWatch read actions, ec2:DescribeRegions and aps:ListWorkspaces support no resource-level permissions",
        )
        self.workspace = grafana.CfnWorkspace(
            self,
            "Workspace",
            name=props.name,
            account_access_type="CURRENT_ACCOUNT",
            authentication_providers=[props.authentication],
            permission_type="CUSTOMER_MANAGED",
            role_arn=self.role.role_arn,
            grafana_version=props.grafana_version,
            description=f"fminfra {props.name}",
        )
        self.workspace_id: str = self.workspace.attr_id
        self.endpoint: str = self.workspace.attr_endpoint
