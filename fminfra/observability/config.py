"""The `observability` section: AMP, alerts and Grafana (mirrors observability/stack.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from fminfra.core.config_base import Model, Problems, _raise_problems
from fminfra.core.findings import error
from fminfra.observability.rules.inputs import (
    EMAIL,
    IDENTITY_STORE_GROUP_ID,
    SCRAPE_INTERVAL_MAX_SECONDS,
    SCRAPE_INTERVAL_MIN_SECONDS,
    SNS_TOPIC_ARN_RULE,
    scrape_interval_problem,
)

# Identity Center (identitystore) group ids, as botocore's ResourceId pattern has them.


class GrafanaConfig(Model):
    """Amazon Managed Grafana. Authentication through IAM Identity Center, which must be enabled
    in the account (or its organization) before the workspace is deployed."""

    enabled: bool = Field(default=False, description="true: an AMG workspace reading the AMP workspace and CloudWatch.")
    auth: Literal["sso"] = Field(default="sso", description="sso: IAM Identity Center (the only option for now).")
    admin_group_ids: list[str] = Field(default_factory=list, description="Identity Center group ids made Grafana admins by `grafana sync`.")

    @field_validator("admin_group_ids")
    @classmethod
    def _group_ids(cls, value: list[str]) -> list[str]:
        problems = [error(f"[{i}]", problem) for i, gid in enumerate(value) if (problem := IDENTITY_STORE_GROUP_ID.problem(gid))]
        _raise_problems(problems)
        if len(set(value)) != len(value):
            raise ValueError("group ids must be unique")
        return value

    @model_validator(mode="after")
    def _groups_need_grafana(self) -> GrafanaConfig:
        if self.admin_group_ids and not self.enabled:
            raise Problems([error("admin_group_ids", "only used with enabled: true; set enabled: true or remove the group ids")])
        return self


class AlertsConfig(Model):
    """Where alerts go: the AMP alert manager and the CloudWatch alarms publish to one SNS topic."""

    emails: list[str] = Field(default_factory=list, description="Addresses subscribed to the alert topic (each confirms by mail).")
    sns_topic_arn: str | None = Field(
        default=None, description="An existing standard topic in the environment's account and region; default: a new KMS-encrypted topic."
    )

    @field_validator("emails")
    @classmethod
    def _emails(cls, value: list[str]) -> list[str]:
        problems = [error(f"[{i}]", problem) for i, e in enumerate(value) if (problem := EMAIL.problem(e))]
        _raise_problems(problems)
        if len(set(value)) != len(value):
            raise ValueError("email addresses must be unique")
        return value

    @field_validator("sns_topic_arn")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        if value is not None and not SNS_TOPIC_ARN_RULE.match(value):
            raise ValueError(f"must be arn:aws:sns:REGION:ACCOUNT:NAME (a standard topic), got {value!r}")
        return value


class ObservabilityConfig(Model):
    """Amazon Managed Prometheus, Grafana and alerting. Omitted: Prometheus, alert rules and alerting on; Grafana off."""

    prometheus: bool = Field(default=True, description="true: AMP workspace, alert rules, alert manager and metrics collection.")
    grafana: GrafanaConfig = Field(default_factory=GrafanaConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    scrape_interval_seconds: int = Field(
        default=30, description=f"How often exporters are scraped: {SCRAPE_INTERVAL_MIN_SECONDS} to {SCRAPE_INTERVAL_MAX_SECONDS} seconds."
    )

    @field_validator("scrape_interval_seconds")
    @classmethod
    def _scrape_interval(cls, value: int) -> int:
        if problem := scrape_interval_problem(value):
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _grafana_needs_prometheus(self) -> ObservabilityConfig:
        if self.grafana.enabled and not self.prometheus:
            raise Problems(
                [error("grafana.enabled", "Grafana's dashboards query the AMP workspace; set prometheus: true or grafana.enabled: false")]
            )
        return self
