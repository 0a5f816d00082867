"""Alerting: the SNS topic alerts go to, the AMP alert manager and rules, and FSx alarms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from fminfra.core.errors import ValidationError
from fminfra.observability.constructs.prometheus_workspace import PrometheusWorkspace
from fminfra.observability.rules.inputs import EMAIL, NAMESPACE_NAME


@dataclass(frozen=True, kw_only=True)
class AlertTopicProps:
    """Props of `AlertTopic`.

    topic_name: physical name of a new topic; include the environment name.
    existing_topic_arn: use this standard topic instead of creating one. Its owner must let
      aps.amazonaws.com (sns:Publish and sns:GetTopicAttributes, from the workspace) and
      cloudwatch.amazonaws.com (sns:Publish, from this account's alarms) publish, and both use its
      KMS key, if any.
      Default: none, a new topic.
    emails: addresses subscribed to the topic. Default: none.
    removal_policy: of the new topic's KMS key. Default: RETAIN.
    """

    topic_name: str
    existing_topic_arn: str | None = None
    emails: Sequence[str] = field(default_factory=tuple)
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN


class AlertTopic(Construct):
    """Creates (unless given one) an SNS topic encrypted with a new customer-managed KMS key whose
    policy lets aps.amazonaws.com and cloudwatch.amazonaws.com use it, a topic policy letting
    CloudWatch alarms of this account and region publish (and requiring TLS), and email
    subscriptions. `allow_prometheus_workspace(arn)` adds the AMP alert manager's statement.

    Attributes: `topic`, `topic_arn`, `key` (None for an existing topic).
    """

    def __init__(self, scope: Construct, construct_id: str, props: AlertTopicProps) -> None:
        super().__init__(scope, construct_id)
        for i, email in enumerate(props.emails):
            if problem := EMAIL.problem(email):
                raise ValidationError(f"emails[{i}] {problem}")
        account = cdk.Stack.of(self).account
        self.key: kms.Key | None = None
        if props.existing_topic_arn:
            self.topic: sns.ITopic = sns.Topic.from_topic_arn(self, "Topic", props.existing_topic_arn)
        else:
            self.key = kms.Key(
                self,
                "Key",
                description=f"SNS topic {props.topic_name}: alerts from AMP and CloudWatch",
                enable_key_rotation=True,
                removal_policy=props.removal_policy,
            )
            # AMP's documented key statement for its alert manager has no condition: whether its
            # requests to KMS (made through SNS) carry aws:SourceAccount is not documented, so a
            # condition on it could refuse every alert. Publishing stays limited to this
            # workspace and account by the topic policy
            # (docs/facts/observability.md#amp-alert-manager-sns-key-policy).
            publishers = {
                "PrometheusAlertManagerUsesTheKey": ("aps.amazonaws.com", None),
                "CloudWatchAlarmsUseTheKey": ("cloudwatch.amazonaws.com", {"StringEquals": {"aws:SourceAccount": account}}),
            }
            for sid, (service, conditions) in publishers.items():
                self.key.add_to_resource_policy(
                    iam.PolicyStatement(
                        sid=sid,
                        principals=[iam.ServicePrincipal(service)],
                        actions=["kms:GenerateDataKey*", "kms:Decrypt"],
                        resources=["*"],
                        conditions=conditions,
                    )
                )
            topic = sns.Topic(self, "Topic", topic_name=props.topic_name, master_key=self.key, enforce_ssl=True)
            # CloudWatch alarms of this account and region publish (docs/facts/observability.md#cloudwatch-alarm-sns-topic-policy);
            # the AMP alert manager gets its own statement per workspace (`allow_prometheus_workspace`).
            stack = cdk.Stack.of(self)
            alarms_arn = stack.format_arn(
                service="cloudwatch", resource="alarm", resource_name="*", arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME
            )
            topic.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="CloudWatchAlarmsPublish",
                    principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                    actions=["sns:Publish"],
                    resources=[topic.topic_arn],
                    conditions={"ArnLike": {"aws:SourceArn": alarms_arn}, "StringEquals": {"aws:SourceAccount": account}},
                )
            )
            self.topic = topic
        self.topic_arn: str = self.topic.topic_arn
        for email in props.emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))

    def allow_prometheus_workspace(self, workspace_arn: str) -> None:
        """Lets the AMP alert manager of one workspace publish: `sns:Publish` and
        `sns:GetTopicAttributes` for aps.amazonaws.com, only from that workspace (`aws:SourceArn`)
        in this account (docs/facts/observability.md#amp-alert-manager-sns-topic-policy). Does
        nothing for an existing topic, whose owner grants the same."""
        if self.key is None:
            return
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="PrometheusAlertManagerPublish",
                principals=[iam.ServicePrincipal("aps.amazonaws.com")],
                actions=["sns:Publish", "sns:GetTopicAttributes"],
                resources=[self.topic.topic_arn],
                conditions={
                    "ArnEquals": {"aws:SourceArn": workspace_arn},
                    "StringEquals": {"aws:SourceAccount": cdk.Stack.of(self).account},
                },
            )
        )


@dataclass(frozen=True, kw_only=True)
class PrometheusAlertingProps:
    """Props of `PrometheusAlerting`.

    workspace: the AMP workspace whose alert manager and rules these are.
    topic: where the alert manager sends alerts.
    rules: the rule groups namespace's data: one Prometheus rule file (`groups:` ...).
    namespace_name: name of the rule groups namespace; include the environment name.
    """

    workspace: PrometheusWorkspace
    topic: AlertTopic
    rules: str
    namespace_name: str


class PrometheusAlerting(Construct):
    """Sets the workspace's alert manager definition (every alert to the SNS topic, signed with
    SigV4), lets the workspace publish to the topic, and creates a rule groups namespace holding
    the given rules.

    Attributes: `namespace` (the L1), `alert_manager_definition` (the YAML).
    """

    def __init__(self, scope: Construct, construct_id: str, props: PrometheusAlertingProps) -> None:
        super().__init__(scope, construct_id)
        if problem := NAMESPACE_NAME.problem(props.namespace_name):
            raise ValidationError(f"namespace_name {problem}", path="namespace_name")
        if "groups:" not in props.rules:
            raise ValidationError("rules must be a Prometheus rule file starting with groups:", path="rules")
        region = cdk.Stack.of(self).region
        self.alert_manager_definition = "\n".join(
            [
                "alertmanager_config: |",
                "  route:",
                "    receiver: sns",
                "    group_by: [alertname, instance]",
                "    group_wait: 30s",
                "    group_interval: 5m",
                "    repeat_interval: 4h",
                "  receivers:",
                "    - name: sns",
                "      sns_configs:",
                f"        - topic_arn: {props.topic.topic_arn}",
                "          sigv4:",
                f"            region: {region}",
                "          attributes:",
                "            severity: '{{ .CommonLabels.severity }}'",
                "",
            ]
        )
        props.workspace.workspace.alert_manager_definition = self.alert_manager_definition
        props.topic.allow_prometheus_workspace(props.workspace.workspace_arn)
        self.namespace = props.workspace.add_rule_groups_namespace(self, "Rules", name=props.namespace_name, data=props.rules)


@dataclass(frozen=True, kw_only=True)
class FsxLustreAlarmsProps:
    """Props of `FsxLustreAlarms`.

    file_system_id: the FSx for Lustre file system (a token from the Storage stack is fine).
    storage_capacity_gib: its storage capacity.
    throughput_mb_per_s: its total throughput capacity (TiB x MB/s/TiB).
    topic: where the alarms (and their recovery) go.
    throughput_alarm_percent: alarm when read+write throughput stays above this share of the
      capacity for 15 minutes. Default: 90.
    free_capacity_alarm_percent: alarm when free storage falls below this share. Default: 10.
    """

    file_system_id: str
    storage_capacity_gib: int
    throughput_mb_per_s: int
    topic: AlertTopic
    throughput_alarm_percent: int = 90
    free_capacity_alarm_percent: int = 10


class FsxLustreAlarms(Construct):
    """Creates CloudWatch alarms on `AWS/FSx` metrics of one file system: throughput near its
    capacity and free storage capacity low, both into the alert topic.

    Attributes: `throughput_alarm`, `free_capacity_alarm`.
    """

    def __init__(self, scope: Construct, construct_id: str, props: FsxLustreAlarmsProps) -> None:
        super().__init__(scope, construct_id)
        for name, value in (
            ("throughput_alarm_percent", props.throughput_alarm_percent),
            ("free_capacity_alarm_percent", props.free_capacity_alarm_percent),
        ):
            if not 1 <= value <= 99:
                raise ValidationError(f"{name} must be 1 to 99, got {value}")
        if props.storage_capacity_gib < 1200:
            raise ValidationError(
                f"storage_capacity_gib must be at least 1200 (the smallest Lustre file system), got {props.storage_capacity_gib}",
                path="storage_capacity_gib",
            )
        if props.throughput_mb_per_s < 1:
            raise ValidationError(f"throughput_mb_per_s must be positive, got {props.throughput_mb_per_s}", path="throughput_mb_per_s")
        period = cdk.Duration.minutes(5)
        dims = {"FileSystemId": props.file_system_id}

        def metric(name: str, statistic: str) -> cloudwatch.Metric:
            return cloudwatch.Metric(namespace="AWS/FSx", metric_name=name, dimensions_map=dims, statistic=statistic, period=period)

        throughput = cloudwatch.MathExpression(
            expression="(r + w) / PERIOD(r) / 1000000",
            using_metrics={"r": metric("DataReadBytes", "Sum"), "w": metric("DataWriteBytes", "Sum")},
            label="Read + write throughput (MB/s)",
            period=period,
        )
        action = cw_actions.SnsAction(props.topic.topic)
        self.throughput_alarm = throughput.create_alarm(
            self,
            "Throughput",
            alarm_description=(
                f"FSx {props.file_system_id}: read+write throughput above {props.throughput_alarm_percent}% of "
                f"{props.throughput_mb_per_s} MB/s for 15 minutes. Runbook: find the heavy job (checkpoint bursts?) "
                "or raise the file system's throughput per TiB."
            ),
            threshold=props.throughput_mb_per_s * props.throughput_alarm_percent / 100,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=3,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        free_bytes = props.storage_capacity_gib * 1024**3 * props.free_capacity_alarm_percent // 100
        # Sum is the whole file system's free bytes (Minimum: the fullest storage target's). FSx
        # emits one data point per storage target per minute, so the Sum takes a 1-minute period;
        # five of them in a row. docs/facts/observability.md#fsx-free-storage-capacity-statistics
        free = cloudwatch.Metric(
            namespace="AWS/FSx",
            metric_name="FreeDataStorageCapacity",
            dimensions_map=dims,
            statistic="Sum",
            period=cdk.Duration.minutes(1),
        )
        self.free_capacity_alarm = free.create_alarm(
            self,
            "FreeCapacity",
            alarm_description=(
                f"FSx {props.file_system_id}: free storage below {props.free_capacity_alarm_percent}% of "
                f"{props.storage_capacity_gib} GiB. Runbook: release files (lfs hsm_release with a data repository) "
                "or increase storage capacity."
            ),
            threshold=free_bytes,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=5,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        for alarm in (self.throughput_alarm, self.free_capacity_alarm):
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
