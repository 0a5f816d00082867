"""One environment file: the top-level model that holds every section, and the cross-section rules."""

from __future__ import annotations

import re
from datetime import date
from typing import Literal

from pydantic import Field, field_validator, model_validator

from fminfra.config.base import Model, _raise_problems, check_account, check_region
from fminfra.config.compute import HEALTH_MONITORING_AGENT_REGIONS, TRAINING_PLAN_ARN_RULE, ComputeConfig
from fminfra.config.network import NetworkConfig
from fminfra.config.observability import SNS_TOPIC_ARN_RULE, ObservabilityConfig
from fminfra.config.storage import StorageConfig
from fminfra.core.regions import az_id_problem

NAME_RULE = re.compile(r"^[a-z][a-z0-9-]{0,15}$")
# docs/facts/pipeline.md#aws-tag-restrictions: keys 1-128, values 1-256 (CloudFormation stack tags
# need a value), no aws: prefix, the characters every tagging service accepts, 50 tags a resource,
# less the two fminfra adds (fminfra:environment; SageMaker on the HyperPod cluster).
TAG_KEY_MAX, TAG_VALUE_MAX, TAG_COUNT_MAX = 128, 256, 48
TAG_CHARS = re.compile(r"^[\w .:/=+\-@]*$")


class EnvironmentConfig(Model):
    """One environment (dev, staging, prod): everything a Stage needs."""

    version: Literal[1] = Field(default=1, description="Config format version.")
    name: str = Field(description="1-16 lowercase letters, digits, hyphens; starts with a letter.")
    account: str = Field(description="12-digit AWS account id (quoted in YAML).")
    region: str = Field(description="AWS region, e.g. us-west-2.")
    tags: dict[str, str] = Field(default_factory=dict)
    removal_policy: Literal["retain", "destroy"] = Field(default="retain", description="For stateful resources.")
    network: NetworkConfig
    compute: ComputeConfig
    storage: StorageConfig | None = Field(default=None, description="Omitted: no data bucket, no file system.")
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_RULE.match(value) or value.endswith("-"):
            raise ValueError(f"must be 1-16 lowercase letters, digits and hyphens, starting with a letter, got {value!r}")
        return value

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: dict[str, str]) -> dict[str, str]:
        # docs/facts/pipeline.md#aws-tag-restrictions
        problems: list[tuple[str, str]] = []
        for key, tag_value in value.items():
            if not 1 <= len(key) <= TAG_KEY_MAX:
                problems.append((f"[{key[:40]!r}]", f"a tag key has 1 to {TAG_KEY_MAX} characters, got {len(key)}"))
            elif key.lower().startswith("aws:"):
                problems.append((f"[{key!r}]", "tag keys starting with aws: are reserved for AWS"))
            elif not TAG_CHARS.match(key):
                problems.append((f"[{key!r}]", "a tag key may hold letters, digits, spaces and _ . : / = + - @"))
            if not 1 <= len(tag_value) <= TAG_VALUE_MAX:
                problems.append((f"[{key[:40]!r}]", f"a tag value has 1 to {TAG_VALUE_MAX} characters, got {len(tag_value)}"))
            elif not TAG_CHARS.match(tag_value):
                problems.append((f"[{key[:40]!r}]", "a tag value may hold letters, digits, spaces and _ . : / = + - @"))
        if len(value) > TAG_COUNT_MAX:
            problems.append(("", f"at most {TAG_COUNT_MAX} tags, got {len(value)}"))
        _raise_problems(problems)
        return value

    _account = field_validator("account", mode="before")(check_account)
    _region = field_validator("region")(check_region)

    @model_validator(mode="after")
    def _cross_section(self) -> EnvironmentConfig:
        problems: list[tuple[str, str]] = []
        for i, az in enumerate(self.network.az_ids):
            if problem := az_id_problem(az, self.region):
                problems.append((f"network.az_ids[{i}]", problem))
        if self.compute.needs_eks and len(self.network.az_ids) < 2:
            problems.append(("network.az_ids", "EKS needs subnets in at least two AZs; list at least two AZ IDs"))
        for i, group in enumerate(self.compute.instance_groups):
            plan = TRAINING_PLAN_ARN_RULE.match(group.capacity.training_plan_arn or "")
            if plan and (plan["account"], plan["region"]) != (self.account, self.region):
                problems.append(
                    (
                        f"compute.instance_groups[{i}].capacity.training_plan_arn",
                        f"the training plan is in {plan['account']}, {plan['region']}; HyperPod uses plans of its own account and "
                        f"region ({self.account}, {self.region})",
                    )
                )
        topic = SNS_TOPIC_ARN_RULE.match(self.observability.alerts.sns_topic_arn or "")
        if topic and (topic["region"], topic["account"]) != (self.region, self.account):
            problems.append(
                (
                    "observability.alerts.sns_topic_arn",
                    f"CloudWatch alarms and the AMP alert manager publish only to a topic in their own account and region "
                    f"({self.account}, {self.region}), got {topic['account']}, {topic['region']}",
                )
            )
        _raise_problems(problems)
        return self

    # Names used for physical resources: every one includes the environment name.
    def physical_name(self, *parts: str) -> str:
        return "-".join(("fminfra", self.name, *parts))

    def warnings(self, today: date | None = None) -> list[tuple[str, str]]:
        """Problems that do not reject the config: (field path, message); validate and plan print them.
        `today` (default: the current UTC date) dates the Kubernetes support warning."""
        out = [(f"compute.{path}", msg) for path, msg in self.compute.warnings(today)]
        if self.compute.orchestrator == "eks" and self.region not in HEALTH_MONITORING_AGENT_REGIONS:
            out.append(
                (
                    "region",
                    f"HyperPod's dependency chart has no health-monitoring agent image in {self.region}; it pulls us-east-1's "
                    f"(regions with one: {', '.join(HEALTH_MONITORING_AGENT_REGIONS)})",
                )
            )
        return out + [(f"storage.{path}", msg) for path, msg in (self.storage.warnings() if self.storage else [])]
