"""The HyperPod EKS training-plan drain, deployed: the Lambda `plan_drain_handler/index.py` in the
cluster VPC's private subnets, an EventBridge Scheduler schedule that invokes it every minute, and
its access to the cluster (docs/capacity.md, the HyperPod EKS timeline).

- The function runs as the installer of the dependency chart does (`HyperPodDependencies`): the
  same subnets (a NAT route to the SageMaker, EKS and STS APIs), the cluster security group (the
  private API endpoint), the same runtime. Its role may call `sagemaker:DescribeTrainingPlan` on the
  plans the groups name and `eks:DescribeCluster` on this cluster, nothing else of AWS.
- In Kubernetes it is the member of one group, `PLAN_DRAIN_GROUP`, through an EKS access entry with
  no access policy (docs/facts/eks.md#eks-access-entry-kubernetes-groups); a ClusterRole with
  `PLAN_DRAIN_RBAC_RULES` (nodes get/list/patch, pods list, pods/eviction create), bound to that
  group, is applied with the cluster's kubectl provider as the acceptance RBAC is
  (`fminfra/eks/constructs/accept_access.py`). Nodes and the pod list across namespaces are
  cluster-scoped requests, so a Role in one namespace could not allow them.
- The schedule (`PLAN_DRAIN_SCHEDULE`, a templated Lambda target: docs/facts/eks.md#scheduler-lambda-templated-target)
  delivers the handler's event as its input; its role, trusted by EventBridge Scheduler for this
  account only, may call `lambda:InvokeFunction` on this function only
  (docs/facts/eks.md#scheduler-execution-role). A run that fails is not retried: the next minute's
  run reads everything again. Scheduler makes no second delivery (the target's RetryPolicy), and
  Lambda's asynchronous queue none either: by default it runs a failed asynchronous invocation two
  more times, so the function's asynchronous invocation config sets 0 retries and a maximum event
  age of 60 s, the least Lambda allows (docs/facts/eks.md#lambda-async-retries).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from fminfra.core.errors import ValidationError
from fminfra.eks.rules import group_cluster_role
from fminfra.hyperpod.constructs.dependencies import vpc_lambda_role
from fminfra.hyperpod.rules import NAME, NAT_SUBNETS_PROBLEM, PLAN_DRAIN_RBAC_RULES, PLAN_DRAIN_SCHEDULE
from fminfra.policy.constructs.acknowledge import drop_redundant_role_dependency

HANDLER_DIR = Path(__file__).parent / "plan_drain_handler"
# The Kubernetes group of the drain's access entry (a ClusterRoleBinding subject, kind Group) and the ClusterRole's name.
PLAN_DRAIN_GROUP = "fminfra-plan-drain"
PLAN_DRAIN_ROLE = "fminfra-plan-drain"


@dataclass(frozen=True, kw_only=True)
class PlanDrainGroup:
    """One instance group the drain drains.

    instance_group: the HyperPod instance group's name (its nodes' label value).
    training_plan_arn: the plan the group runs on.
    instance_type: the group's `ml.` type (the plan's reserved capacities of that type give the end).
    drain_seconds: how long before SageMaker's terminations (end - 30 minutes) the drain starts.
    """

    instance_group: str
    training_plan_arn: str
    instance_type: str
    drain_seconds: int


@dataclass(frozen=True, kw_only=True)
class HyperPodPlanDrainProps:
    """Props of `HyperPodPlanDrain`.

    cluster: the EKS cluster HyperPod orchestrates (its API endpoint must be reachable from `subnets`).
    subnets: private subnets with a route to a NAT gateway (the SageMaker, EKS and STS APIs).
    groups: the training-plan groups to drain, at least one.
    """

    cluster: eks.Cluster
    subnets: Sequence[ec2.ISubnet]
    groups: Sequence[PlanDrainGroup]


def plan_drain_rbac() -> list[dict[str, Any]]:
    """The ClusterRole with PLAN_DRAIN_RBAC_RULES and its ClusterRoleBinding to PLAN_DRAIN_GROUP."""
    return group_cluster_role(PLAN_DRAIN_ROLE, PLAN_DRAIN_GROUP, PLAN_DRAIN_RBAC_RULES)


class HyperPodPlanDrain(Construct):
    """Drains the nodes of training-plan instance groups before SageMaker terminates them.
    Attributes: `function`, `role`, `access_entry`, `rbac`, `schedule`, `schedule_role`, `event`
    (what the schedule delivers)."""

    def __init__(self, scope: Construct, construct_id: str, props: HyperPodPlanDrainProps) -> None:
        super().__init__(scope, construct_id)
        if not props.groups:
            raise ValidationError("groups must list at least one training-plan instance group, got none", path="groups")
        if not props.subnets:
            raise ValidationError(NAT_SUBNETS_PROBLEM)
        for group in props.groups:
            if not cdk.Token.is_unresolved(group.instance_group) and (problem := NAME.problem(group.instance_group)):
                raise ValidationError(f"groups: instance_group {problem}")
            if group.drain_seconds <= 0:
                raise ValidationError(f"groups: drain_seconds must be positive, got {group.drain_seconds} for {group.instance_group}")
        stack = cdk.Stack.of(self)
        cluster = props.cluster
        plans = sorted({g.training_plan_arn for g in props.groups})
        self.role = vpc_lambda_role(self, "Drains HyperPod EKS training-plan nodes before the plan ends", "The plan drain Lambda")
        self.role.add_to_principal_policy(
            iam.PolicyStatement(sid="TrainingPlanEndRead", actions=["sagemaker:DescribeTrainingPlan"], resources=plans)
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(sid="ClusterEndpoint", actions=["eks:DescribeCluster"], resources=[cluster.cluster_arn])
        )
        # A group, no access policy: the access policies are fixed rule lists, none this narrow
        # (docs/facts/eks.md#eks-access-policy-permissions, #eks-access-entry-kubernetes-groups).
        self.access_entry = eks_l1.CfnAccessEntry(
            self,
            "AccessEntry",
            cluster_name=cluster.cluster_name,
            principal_arn=self.role.role_arn,
            type="STANDARD",
            kubernetes_groups=[PLAN_DRAIN_GROUP],
        )
        # overwrite: created with `kubectl apply` (docs/facts/eks.md#cdk-kubernetes-manifest-overwrite).
        self.rbac = eks.KubernetesManifest(self, "Rbac", cluster=cast(eks.ICluster, cluster), manifest=plan_drain_rbac(), overwrite=True)
        self.rbac.node.add_dependency(self.access_entry)
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=lambda_.Runtime.PYTHON_3_14,
            architecture=lambda_.Architecture.X86_64,
            handler="index.handler",
            code=lambda_.Code.from_asset(str(HANDLER_DIR), exclude=["__pycache__", "*.pyc", "__init__.py"]),
            role=self.role,
            # Under the schedule's minute, so that runs do not pile up.
            timeout=cdk.Duration.seconds(55),
            memory_size=256,
            vpc=cluster.vpc,
            vpc_subnets=ec2.SubnetSelection(subnets=list(props.subnets)),
            security_groups=[cluster.cluster_security_group],
            description="Cordons and drains HyperPod EKS training-plan nodes before the plan ends (every minute)",
            # Not Lambda's two retries of a failed asynchronous run (docs/facts/eks.md#lambda-async-retries).
            retry_attempts=0,
            max_event_age=cdk.Duration.seconds(60),
        )
        drop_redundant_role_dependency(self.function)
        self.event: dict[str, Any] = {
            "Region": stack.region,
            "ClusterName": cluster.cluster_name,
            "Groups": [
                {
                    "InstanceGroup": g.instance_group,
                    "TrainingPlanArn": g.training_plan_arn,
                    "InstanceType": g.instance_type,
                    "DrainSeconds": g.drain_seconds,
                }
                for g in props.groups
            ],
        }
        self.schedule_role = iam.Role(
            self,
            "ScheduleRole",
            assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": stack.account}}),
            description="EventBridge Scheduler: invoke the HyperPod EKS plan drain every minute",
        )
        self.schedule_role.add_to_principal_policy(
            iam.PolicyStatement(sid="InvokePlanDrain", actions=["lambda:InvokeFunction"], resources=[self.function.function_arn])
        )
        self.schedule = scheduler.CfnSchedule(
            self,
            "Schedule",
            description="Drain HyperPod EKS training-plan nodes before the plan ends",
            schedule_expression=PLAN_DRAIN_SCHEDULE,
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            target=scheduler.CfnSchedule.TargetProperty(
                arn=self.function.function_arn,
                role_arn=self.schedule_role.role_arn,
                input=stack.to_json_string(self.event),
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(maximum_retry_attempts=0, maximum_event_age_in_seconds=60),
            ),
        )
        # The first run needs its policies, its access entry and its RBAC.
        self.schedule.node.add_dependency(self.rbac)
        for role in (self.role, self.schedule_role):
            policy = role.node.try_find_child("DefaultPolicy")
            if policy is not None:
                self.schedule.node.add_dependency(policy)
