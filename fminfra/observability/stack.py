"""Observability stack: AMP workspace, alert rules and alert manager, the alert topic, Grafana."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct

from fminfra.config import EnvironmentConfig
from fminfra.network.stack import removal_policy
from fminfra.observability.constructs.alerting import (
    AlertTopic,
    AlertTopicProps,
    FsxLustreAlarms,
    FsxLustreAlarmsProps,
    PrometheusAlerting,
    PrometheusAlertingProps,
)
from fminfra.observability.constructs.grafana_workspace import GrafanaWorkspace, GrafanaWorkspaceProps
from fminfra.observability.constructs.prometheus_workspace import PrometheusWorkspace, PrometheusWorkspaceProps
from fminfra.observability.rules import environment_rules_document


class ObservabilityStack(cdk.Stack):
    """Deployed after Network (and Storage) and before Compute, which consumes it.

    Attributes for other stacks: `prometheus` (the `PrometheusWorkspace`, None with
    `prometheus: false`; `remote_write_url`, `grant_remote_write(role)`), `alert_topic`
    (`AlertTopic`), `grafana` (`GrafanaWorkspace` or None). `add_fsx_alarms(...)` adds the
    CloudWatch alarms of one FSx for Lustre file system.
    """

    def __init__(self, scope: Construct, construct_id: str, *, cfg: EnvironmentConfig, **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.cfg = cfg
        obs = cfg.observability
        policy = removal_policy(cfg)
        self.alert_topic = AlertTopic(
            self,
            "AlertTopic",
            AlertTopicProps(
                topic_name=cfg.physical_name("alerts"),
                existing_topic_arn=obs.alerts.sns_topic_arn,
                emails=tuple(obs.alerts.emails),
                removal_policy=policy,
            ),
        )
        cdk.CfnOutput(self, "AlertTopicArn", value=self.alert_topic.topic_arn, description="SNS topic alerts go to")
        self.prometheus: PrometheusWorkspace | None = None
        self.grafana: GrafanaWorkspace | None = None
        if obs.prometheus:
            self.prometheus = PrometheusWorkspace(
                self, "Prometheus", PrometheusWorkspaceProps(alias=cfg.physical_name("metrics"), removal_policy=policy)
            )
            self.alerting = PrometheusAlerting(
                self,
                "Alerting",
                PrometheusAlertingProps(
                    workspace=self.prometheus,
                    topic=self.alert_topic,
                    rules=environment_rules_document(cfg),
                    namespace_name=cfg.physical_name("rules"),
                ),
            )
            cdk.CfnOutput(self, "PrometheusWorkspaceId", value=self.prometheus.workspace_id, description="AMP workspace")
            cdk.CfnOutput(self, "RemoteWriteUrl", value=self.prometheus.remote_write_url, description="AMP remote-write URL")
        if obs.grafana.enabled and self.prometheus is not None:
            self.grafana = GrafanaWorkspace(
                self, "Grafana", GrafanaWorkspaceProps(name=cfg.physical_name("grafana"), prometheus=self.prometheus)
            )
            cdk.CfnOutput(self, "GrafanaWorkspaceId", value=self.grafana.workspace_id, description="AMG workspace (grafana sync reads it)")
            cdk.CfnOutput(self, "GrafanaUrl", value=cdk.Fn.join("", ["https://", self.grafana.endpoint]), description="Open Grafana here")
        self.fsx_alarms: dict[str, FsxLustreAlarms] = {}

    def add_fsx_alarms(
        self, construct_id: str, *, file_system_id: str, storage_capacity_gib: int, throughput_mb_per_s: int
    ) -> FsxLustreAlarms:
        """CloudWatch alarms (throughput near capacity, free capacity low) on one FSx for Lustre
        file system into the alert topic. Construct id: `FsxAlarms-<construct_id>`."""
        alarms = FsxLustreAlarms(
            self,
            f"FsxAlarms-{construct_id}",
            FsxLustreAlarmsProps(
                file_system_id=file_system_id,
                storage_capacity_gib=storage_capacity_gib,
                throughput_mb_per_s=throughput_mb_per_s,
                topic=self.alert_topic,
            ),
        )
        self.fsx_alarms[construct_id] = alarms
        return alarms
