"""HyperPod task governance's quotas on an EKS-orchestrated HyperPod cluster: one compute quota per
team (`AWS::SageMaker::ComputeQuota`) and, when priority classes are given, the cluster policy
(`AWS::SageMaker::ClusterSchedulerConfig`).

Task governance itself is the EKS add-on `ADDON_NAME` (it installs and manages Kueue:
docs/facts/hyperpod.md#hyperpod-task-governance-addon), one of the EKS cluster's add-ons; make this
construct depend on it. Each quota makes task governance create the team's namespace and Kueue
LocalQueue (`fminfra.eks.rules.team_queue` spells them:
docs/facts/hyperpod.md#hyperpod-task-governance-names). Properties follow the CloudFormation schemas
(docs/facts/hyperpod.md#hyperpod-compute-quota-schema); the pinned aws-cdk-lib (2.275) has no L1 class for ComputeQuota (2.276 adds one), so
it is a `CfnResource`.

Topology-aware scheduling is task governance's own (from add-on v1.2.2; jobs ask with pod template
annotations over `fminfra.topology.rules.HYPERPOD_LEVELS`): neither the quotas nor the cluster policy
has a field for it (docs/facts/hyperpod.md#task-governance-tas-not-configurable), and fminfra writes
no Kueue object on this cluster (task governance may overwrite them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import aws_cdk as cdk
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from fminfra.core.errors import ValidationError
from fminfra.eks.rules import TASK_GOVERNANCE_ADDON_NAME, TEAMS_REQUIRED
from fminfra.hyperpod.rules import NAME, PRIORITY_CLASSES_MAX, PRIORITY_WEIGHT_MAX, QUOTA_MAX_INSTANCE_TYPES, TEAM_NAME

ADDON_NAME = TASK_GOVERNANCE_ADDON_NAME
ADDON_VERSION_KEY = "HYPERPOD_TASK_GOVERNANCE"  # EKS_ADDON_<this>_<major>_<minor>_VERSION in the manifest
COMPUTE_QUOTA_TYPE = "AWS::SageMaker::ComputeQuota"


@dataclass(frozen=True, kw_only=True)
class TeamQuota:
    """A team and the instances its quota holds: HyperPod (ml.) instance type -> instances."""

    team: str
    instances: Mapping[str, int]


@dataclass(frozen=True, kw_only=True)
class TaskGovernanceProps:
    """Props of `TaskGovernance`.

    cluster_arn: the HyperPod cluster's ARN (its `AttrClusterArn`).
    name_prefix: prefix of the quota and policy names (`<prefix>-<team>`, `<prefix>-policy`), e.g. the
      environment's physical name prefix; names are 1-63 letters, digits and hyphens.
    teams: one quota per team; the namespaces and queues follow the team names.
    priority_classes: the cluster policy's priority classes, name -> weight 0-100. Default: none, and
      no cluster policy (jobs without a priority class rank 0).
    tags: tags of the quotas. CDK's tag aspect does not reach them (no L1 class for the type in the pinned aws-cdk-lib), so
      they are written out; the cluster policy is an L1 and gets the scope's tags. Default: none.
    """

    cluster_arn: str
    name_prefix: str
    teams: Sequence[TeamQuota]
    priority_classes: Mapping[str, int] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)


class TaskGovernance(Construct):
    """Compute quotas per team and the optional cluster policy. Attributes: `quotas` (team -> the
    ComputeQuota resource), `cluster_policy` (or None)."""

    def __init__(self, scope: Construct, construct_id: str, props: TaskGovernanceProps) -> None:
        super().__init__(scope, construct_id)
        _validate(props)
        self.quotas: dict[str, cdk.CfnResource] = {}
        for quota in props.teams:
            resources = [{"InstanceType": t, "Count": n} for t, n in sorted(quota.instances.items())]
            self.quotas[quota.team] = cdk.CfnResource(
                self,
                f"Quota-{quota.team}",
                type=COMPUTE_QUOTA_TYPE,
                properties={
                    "Name": f"{props.name_prefix}-{quota.team}",
                    "Description": f"Instances of team {quota.team} (namespace hyperpod-ns-{quota.team})",
                    "ClusterArn": props.cluster_arn,
                    "ComputeQuotaConfig": {"ComputeQuotaResources": resources},
                    "ComputeQuotaTarget": {"TeamName": quota.team},
                    "ActivationState": "Enabled",
                    **({"Tags": [{"Key": k, "Value": v} for k, v in sorted(props.tags.items())]} if props.tags else {}),
                },
            )
            # CDK's own template validation lags the CloudFormation registry: cfn-lint's schemas (which
            # the tests hold this resource to) have the type, CDK 2.275's validator does not.
            cdk.Validations.of(self.quotas[quota.team]).acknowledge(
                cdk.Acknowledgment(
                    id="CloudFormation-Validate::F3006",
                    reason=f"{COMPUTE_QUOTA_TYPE} is in CloudFormation's registry (cfn-lint's schemas); CDK's validator does not know it yet",
                )
            )
        self.cluster_policy: sagemaker.CfnClusterSchedulerConfig | None = None
        if props.priority_classes:
            self.cluster_policy = sagemaker.CfnClusterSchedulerConfig(
                self,
                "ClusterPolicy",
                name=f"{props.name_prefix}-policy",
                cluster_arn=props.cluster_arn,
                scheduler_config=sagemaker.CfnClusterSchedulerConfig.SchedulerConfigProperty(
                    priority_classes=[
                        sagemaker.CfnClusterSchedulerConfig.PriorityClassProperty(name=name, weight=weight)
                        for name, weight in sorted(props.priority_classes.items())
                    ]
                ),
            )


def _validate(props: TaskGovernanceProps) -> None:
    """One check per rule of the schemas (docs/facts/hyperpod.md#hyperpod-compute-quota-schema)."""
    if not props.teams:
        raise ValidationError(TEAMS_REQUIRED)
    seen: set[str] = set()
    for quota in props.teams:
        if problem := TEAM_NAME.problem(quota.team):
            raise ValidationError(f"team names {problem}")
        if quota.team in seen:
            raise ValidationError(f"team names must be unique, got {quota.team!r} twice")
        seen.add(quota.team)
        name = f"{props.name_prefix}-{quota.team}"
        if not cdk.Token.is_unresolved(props.name_prefix) and (problem := NAME.problem(name)):
            raise ValidationError(f"quota names {problem}")
        if len(quota.instances) > QUOTA_MAX_INSTANCE_TYPES:
            raise ValidationError(
                f"a quota names at most {QUOTA_MAX_INSTANCE_TYPES} instance types, got {len(quota.instances)} for {quota.team!r}"
            )
        for instance_type, count in quota.instances.items():
            if not instance_type.startswith("ml."):
                raise ValidationError(f"quota instance types are HyperPod (ml.) types, got {instance_type!r}")
            if count < 0:
                raise ValidationError(f"quota instance counts must be 0 or more, got {count} for {quota.team!r}")
    if len(props.priority_classes) > PRIORITY_CLASSES_MAX:
        raise ValidationError(f"priority_classes allows at most {PRIORITY_CLASSES_MAX} classes, got {len(props.priority_classes)}")
    for name, weight in props.priority_classes.items():
        if problem := TEAM_NAME.problem(name):
            raise ValidationError(f"priority class names {problem}")
        if not 0 <= weight <= PRIORITY_WEIGHT_MAX:
            raise ValidationError(f"priority class {name!r}: weight must be 0-{PRIORITY_WEIGHT_MAX}, got {weight}")
