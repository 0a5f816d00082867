"""An Amazon Managed Service for Prometheus (AMP) workspace."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_aps as aps
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from fminfra.core.errors import ValidationError
from fminfra.core.rules import LOG_RETENTION_DAYS, one_of_problem
from fminfra.observability.constructs.log_group_key import logs_key_statement
from fminfra.observability.rules import workspace_urls

# The retention periods CloudWatch Logs accepts (docs/facts/observability.md#cloudwatch-logs-retention-values).


@dataclass(frozen=True, kw_only=True)
class PrometheusWorkspaceProps:
    """Props of `PrometheusWorkspace`.

    alias: the workspace alias; include the environment name.
    log_retention_days: retention of the workspace's CloudWatch log group (rule and alert manager
      errors). Default: 90.
    removal_policy: of the workspace, its KMS key and log group. Default: RETAIN.
    """

    alias: str
    log_retention_days: int = 90
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN


class PrometheusWorkspace(Construct):
    """Creates an AMP workspace encrypted with a new customer-managed KMS key (rotation on), with
    logging to a new CloudWatch log group.

    Attributes: `workspace` (the L1), `workspace_arn`, `workspace_id`, `key`, `log_group`,
    `prometheus_endpoint` (the service's attribute, as returned), `remote_write_url`,
    `query_url` (the AMP API's URIs, built from the workspace id: see `workspace_urls`).
    """

    def __init__(self, scope: Construct, construct_id: str, props: PrometheusWorkspaceProps) -> None:
        super().__init__(scope, construct_id)
        if not cdk.Token.is_unresolved(props.alias) and not 1 <= len(props.alias) <= 100:
            raise ValidationError(f"alias must be 1-100 characters, got {len(props.alias)} ({props.alias!r})", path="alias")
        if problem := one_of_problem(LOG_RETENTION_DAYS, props.log_retention_days):
            raise ValidationError(f"log_retention_days {problem}", path="log_retention_days")
        self.key = kms.Key(
            self,
            "Key",
            description=f"AMP workspace {props.alias}",
            enable_key_rotation=True,
            removal_policy=props.removal_policy,
        )
        # The workspace's rule and alert-manager logs are encrypted with the workspace's key too.
        log_group_name = f"/aws/vendedlogs/prometheus/{props.alias}"
        self.key.add_to_resource_policy(logs_key_statement(cdk.Stack.of(self), log_group_name))
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            log_group_name=log_group_name,
            retention=logs.RetentionDays.INFINITE,
            encryption_key=self.key,
            removal_policy=props.removal_policy,
        )
        cfn_log_group = self.log_group.node.default_child
        assert isinstance(cfn_log_group, logs.CfnLogGroup)
        cfn_log_group.retention_in_days = props.log_retention_days
        self.workspace = aps.CfnWorkspace(
            self,
            "Workspace",
            alias=props.alias,
            kms_key_arn=self.key.key_arn,
            logging_configuration=aps.CfnWorkspace.LoggingConfigurationProperty(log_group_arn=self.log_group.log_group_arn),
        )
        self.workspace.apply_removal_policy(props.removal_policy)
        self.workspace_arn: str = self.workspace.attr_arn
        self.workspace_id: str = self.workspace.attr_workspace_id
        self.prometheus_endpoint: str = self.workspace.attr_prometheus_endpoint
        urls = workspace_urls(cdk.Stack.of(self).region, self.workspace_id, cdk.Aws.URL_SUFFIX)
        self.base_url: str = urls.base
        self.remote_write_url: str = urls.remote_write
        self.query_url: str = urls.query

    def key_statement(self, actions: list[str]) -> iam.PolicyStatement:
        """`actions` on the workspace's key, only through AMP in this region: a caller reads or
        writes a workspace encrypted with a customer managed key only with access to the key
        (docs/facts/observability.md#amp-workspace-cmk-key-access)."""
        region = cdk.Stack.of(self).region
        return iam.PolicyStatement(
            actions=actions,
            resources=[self.key.key_arn],
            conditions={"StringEquals": {"kms:ViaService": f"aps.{region}.{cdk.Aws.URL_SUFFIX}"}},
        )

    def grant_remote_write(self, grantee: iam.IRole) -> iam.Policy:
        """Gives `grantee` `aps:RemoteWrite` on this workspace only, as an inline policy (not the
        managed AmazonPrometheusRemoteWriteAccess, which grants it on every workspace), and the use
        of the workspace's key through AMP (`kms:GenerateDataKey`, `kms:Decrypt`).

        The policy is created under the role (in the role's stack), so a Compute stack that
        consumes this workspace depends on it and not the other way round. Construct id:
        `<this construct's id>RemoteWrite`.
        """
        if not isinstance(grantee, Construct):
            raise ValidationError(
                f"grant_remote_write needs a role construct (iam.Role or iam.Role.from_role_arn), got {type(grantee).__name__}",
                path="grant_remote_write",
            )
        policy = iam.Policy(
            grantee,
            f"{self.node.id}RemoteWrite",
            statements=[
                iam.PolicyStatement(actions=["aps:RemoteWrite"], resources=[self.workspace_arn]),
                self.key_statement(["kms:GenerateDataKey", "kms:Decrypt"]),
            ],
        )
        grantee.attach_inline_policy(policy)
        return policy

    def grant_query(self, grantee: iam.IGrantable) -> iam.Grant:
        """Gives `grantee` read access (queries, series, labels, metadata) to this workspace, and
        `kms:Decrypt` on its key through AMP (AMP's "Accessing data from other services", e.g.
        Amazon Managed Grafana: docs/facts/observability.md#amp-workspace-cmk-key-access)."""
        grantee.grant_principal.add_to_principal_policy(self.key_statement(["kms:Decrypt"]))
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["aps:QueryMetrics", "aps:GetSeries", "aps:GetLabels", "aps:GetMetricMetadata", "aps:DescribeWorkspace"],
            resource_arns=[self.workspace_arn],
        )

    def add_rule_groups_namespace(self, scope: Construct, construct_id: str, *, name: str, data: str) -> aps.CfnRuleGroupsNamespace:
        """A rule groups namespace of this workspace holding `data` (one Prometheus rule file)."""
        return aps.CfnRuleGroupsNamespace(scope, construct_id, name=name, workspace=self.workspace_arn, data=data)
