"""The `compute` section: instance groups, capacity, Slurm, EKS and inference node groups
(mirrors compute/stack/)."""

from __future__ import annotations

import ipaddress
import re
from datetime import UTC, date, datetime, timedelta
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from fminfra import catalog
from fminfra.capacity.rules import (
    BLOCK_PLACEMENT,
    DEFAULT_DRAIN,
    EC2_CAPACITY_TYPES,
    EKS_DRAIN_MINUTES_PROBLEM,
    GB200_INSTANCE_TYPE,
    GB200_SUPPORT,
    HYPERPOD_CAPACITY_TYPES,
    MAX_BLOCK_LENGTH,
    MAX_DRAIN_MINUTES,
    MAX_DURATION_DAYS,
    ONE_BLOCK_PER_GROUP,
    RESERVATION_ID,
    RESERVATION_PLACEMENT_WARNING,
    TRAINING_PLAN_ARN_RULE,
    end_time_problem,
    ended_problem,
    reservation_shared_problem,
    scale_in_time,
)
from fminfra.compute.rules import EC2_INSTANCE_TYPE_RULE
from fminfra.core.config_base import Model, Problems, _raise_problems
from fminfra.core.findings import Finding, error, warning
from fminfra.core.versions import version
from fminfra.eks.rules import (
    ACCEPT_NEEDS_TEAM,
    ADDON_BUILD,
    ADDON_NAME,
    CORE_ADDONS,
    DEFAULT_EXTENSION_ANCHOR,
    DEFAULT_GPU_TAINT,
    DEFAULT_TEAM,
    DNS_LABEL,
    ENDING_CAPACITY_TYPES,
    EXTENDED_SUPPORT_USD_PER_HOUR,
    EXTENSION_ANCHORS,
    KARPENTER_CAPACITY_TYPES,
    KARPENTER_GROUP_CAPACITY,
    KARPENTER_NEEDS_SYSTEM_NODES,
    KARPENTER_SPOT_ROLE,
    KARPENTER_ULTRASERVER_PROBLEM,
    LBC_WITHOUT_OWN_NODES,
    REPELLING_EFFECTS,
    RESERVED_NAMESPACES,
    STANDARD_SUPPORT_USD_PER_HOUR,
    SUPPORT_END_WARNING_DAYS,
    addon_taken_problem,
    anchor_problem,
    k8s_problems,
    open_endpoint_problem,
    pod_identity_problems,
    principal_arn_problem,
    reserved_label_problem,
    unquoted_version_problem,
)
from fminfra.hyperpod.rules import (
    AUTOSCALING_GROUPS_WITHOUT_ENABLED,
    AUTOSCALING_MAX_GROUPS,
    AUTOSCALING_NEEDS_GROUPS,
    AUTOSCALING_ONLY_EKS,
    CONNECTIVITY_MIN_INSTANCES,
    MAX_INSTANCES,
    PRIORITY_CLASSES_MAX,
    PRIORITY_WEIGHT_MAX,
    QUOTA_MAX_INSTANCE_TYPES,
    TEAM_NAME,
    autoscaled_group_problems,
    controller_gpu_problem,
    hyperpod_instance_types,
    not_a_group_problem,
)
from fminfra.hyperpod.rules import NAME as HYPERPOD_NAME
from fminfra.topology.rules import kueue_topology_types, network_layers

GROUP_NAME_RULE = HYPERPOD_NAME.regex  # the public name of earlier releases
CONTROLLER_GROUP_NAME = "controller"
LOGIN_GROUP_NAME = "login"
HYPERPOD_MAX_INSTANCES = MAX_INSTANCES  # the public name of earlier releases


class CapacityConfig(Model):
    """Where a group's instances come from. Which fields apply depends on `type`."""

    type: Literal["on-demand", "odcr", "reservation", "capacity-block", "training-plan"] = "on-demand"
    end_date: datetime | None = Field(default=None, description="odcr: when the reservation ends (none: open-ended).")
    reservation_ids: list[str] | None = Field(default=None, description="reservation, capacity-block: cr-... ids.")
    starts_at: datetime | None = Field(default=None, description="capacity-block: start of the block.")
    ends_at: datetime | None = Field(default=None, description="capacity-block: end of the block (11:30 UTC).")
    drain_minutes: int | None = Field(
        default=None,
        ge=1,
        le=MAX_DRAIN_MINUTES,
        description="capacity-block with starts_at/ends_at: minutes between the scale-in and EC2's terminations; "
        "training-plan: minutes the nodes drain before SageMaker starts terminating the plan's instances (default 10).",
    )
    training_plan_arn: str | None = Field(default=None, description="training-plan: SageMaker training plan ARN.")
    upfront_fee_usd: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="capacity-block, training-plan: the fee paid up front (in no template); `fminfra cost` shows it.",
    )

    @model_validator(mode="after")
    def _fields_for_type(self) -> CapacityConfig:
        allowed = {
            "on-demand": set(),
            "odcr": {"end_date"},
            "reservation": {"reservation_ids"},
            "capacity-block": {"reservation_ids", "starts_at", "ends_at", "drain_minutes", "upfront_fee_usd"},
            "training-plan": {"training_plan_arn", "drain_minutes", "upfront_fee_usd"},
        }[self.type]
        required = {"reservation": {"reservation_ids"}, "capacity-block": {"reservation_ids"}, "training-plan": {"training_plan_arn"}}.get(
            self.type, set()
        )
        problems: list[Finding] = []
        for field in ("end_date", "reservation_ids", "starts_at", "ends_at", "drain_minutes", "training_plan_arn", "upfront_fee_usd"):
            value = getattr(self, field)
            if value is not None and field not in allowed:
                problems.append(
                    error(field, f"not allowed with type {self.type} (it takes: {', '.join(sorted(allowed)) or 'no other field'})")
                )
            if value is None and field in required:
                problems.append(error(field, f"required with type {self.type}"))
        for i, rid in enumerate(self.reservation_ids or []):
            if problem := RESERVATION_ID.problem(rid):
                problems.append(error(f"reservation_ids[{i}]", problem))
        if self.reservation_ids is not None and not self.reservation_ids:
            problems.append(error("reservation_ids", "must list at least one reservation id"))
        if self.reservation_ids and len(set(self.reservation_ids)) != len(self.reservation_ids):
            problems.append(error("reservation_ids", "reservation ids must be unique"))
        elif self.type == "capacity-block" and self.reservation_ids and len(self.reservation_ids) > 1:
            problems.append(error("reservation_ids", f"{ONE_BLOCK_PER_GROUP}, got {', '.join(self.reservation_ids)}"))
        if self.training_plan_arn is not None and not TRAINING_PLAN_ARN_RULE.match(self.training_plan_arn):
            problems.append(
                error(
                    "training_plan_arn",
                    f"must be arn:aws:sagemaker:REGION:ACCOUNT:training-plan/NAME, got {self.training_plan_arn!r}",
                )
            )
        for field in ("end_date", "starts_at", "ends_at"):
            value = getattr(self, field)
            if value is not None and value.tzinfo is None:
                problems.append(error(field, f"must carry a time zone, e.g. 2026-12-01T11:30:00Z, got {value.isoformat()}"))
        problems.extend(self._block_window_problems())
        if (self.starts_at is None) != (self.ends_at is None) and self.type == "capacity-block":
            given, missing = ("starts_at", "ends_at") if self.ends_at is None else ("ends_at", "starts_at")
            problems.append(error(missing, f"starts_at and ends_at go together: {given} is given, so {missing} is required (or drop both)"))
        _raise_problems(problems)
        return self

    @property
    def drain(self) -> timedelta:
        """The drain window before EC2 terminates a block's instances (capacity-block), or before
        SageMaker terminates a training plan's instances (training-plan)."""
        return timedelta(minutes=self.drain_minutes) if self.drain_minutes is not None else DEFAULT_DRAIN

    def _block_window_problems(self) -> list[Finding]:
        """A Capacity Block's window: blocks end at 11:30 UTC and an offering can be a little
        shorter or longer than the duration asked for (docs/facts/capacity.md#capacity-block-end-time),
        so the window is checked against that, not against whole days."""
        start, end = self.starts_at, self.ends_at
        if not (start and end and start.tzinfo and end.tzinfo):
            if self.drain_minutes is not None and self.type == "capacity-block" and start is None and end is None:
                return [error("drain_minutes", "applies only with starts_at and ends_at (the scheduled scale-in)")]
            return []
        if end <= start:
            return [error("ends_at", f"must be after starts_at ({start.isoformat()}), got {end.isoformat()}")]
        problems: list[Finding] = []
        if problem := end_time_problem(end):
            problems.append(error("ends_at", f"{problem}: copy the end from the purchase (capacity-blocks purchase prints it)"))
        if end - start > MAX_BLOCK_LENGTH:
            problems.append(
                error("ends_at", f"a Capacity Block lasts at most {MAX_DURATION_DAYS} days (and up to a day more), got {end - start}")
            )
        if scale_in_time(end, self.drain) <= start:
            problems.append(
                error(
                    "ends_at",
                    f"the block ({end - start}) must outlast EC2's 30-minute reclaim and the {self.drain} drain, "
                    f"or the group scales in before it scales out",
                )
            )
        return problems


def _capacity_problems(
    path: str, group: InstanceGroupConfig | InferenceNodeGroupConfig, kind: str, allowed: tuple[str, ...]
) -> list[Finding]:
    """A group's capacity type: one `kind` of group takes (`allowed`), and one AWS sells its instance type through."""
    problems = []
    if group.capacity.type not in allowed:
        problems.append(
            error(
                f"{path}.capacity.type",
                f"group {group.name!r}: {group.capacity.type} is not available to {kind}; allowed: {', '.join(allowed)}",
            )
        )
    if purchase := _purchase_problem(path, group.name, group.instance_type, group.capacity.type):
        problems.append(purchase)
    return problems


def _purchase_problem(path: str, name: str, instance_type: str, capacity_type: str) -> Finding | None:
    """A group whose capacity type AWS does not sell its instance type through
    (docs/facts/capacity.md#p6e-gb200-ultraserver-purchase), or a GB200 Capacity Block, which fminfra does not deploy."""
    if capacity_type == "capacity-block" and catalog.normalize_instance_type(instance_type) == GB200_INSTANCE_TYPE:
        return error(
            f"{path}.capacity.type",
            f"group {name!r}: {GB200_INSTANCE_TYPE} Capacity Blocks are not deployable: {GB200_SUPPORT}; "
            "run p6e-gb200 on HyperPod (orchestrator slurm or eks) with capacity type training-plan",
        )
    allowed = catalog.capacity_types(instance_type)
    if allowed is None or capacity_type in allowed:
        return None
    return error(
        f"{path}.capacity.type",
        f"group {name!r}: AWS sells {catalog.normalize_instance_type(instance_type)} only through {', '.join(allowed)}, "
        f"not {capacity_type}; allowed: {', '.join(allowed)}",
    )


class _GroupConfig(Model):
    """What training and inference groups share: a HyperPod-style name and a catalog type (EC2 form)."""

    _training: ClassVar[bool]

    @field_validator("name", check_fields=False)
    @classmethod
    def _name(cls, value: str) -> str:
        if problem := HYPERPOD_NAME.problem(value):
            raise ValueError(problem)
        return value

    @field_validator("instance_type", check_fields=False)
    @classmethod
    def _instance_type(cls, value: str) -> str:
        if problem := _instance_type_problem(value, training=cls._training):
            raise ValueError(problem)
        return catalog.normalize_instance_type(value)


def _instance_type_problem(value: str, *, training: bool) -> str | None:
    name = catalog.normalize_instance_type(value)
    spec = catalog.CATALOG.get(name)
    if spec is None:
        known = catalog.TRAINING_TYPES if training else tuple(catalog.CATALOG)
        return f"{value!r} is not in the GPU catalog; allowed: {', '.join(known)}"
    if training and not spec.training:
        return f"{value!r} is not an EFA training type; allowed: {', '.join(catalog.TRAINING_TYPES)}"
    return None


class InstanceGroupConfig(_GroupConfig):
    """A training group: a HyperPod instance group (slurm, eks) or an Auto Scaling group (ec2)."""

    _training: ClassVar[bool] = True

    name: str = Field(description="1-63 letters, digits and hyphens (HyperPod's rule); unique.")
    instance_type: str = Field(
        description="EFA training type, EC2 or ml. form (p5.48xlarge, ml.p5.48xlarge).",
        json_schema_extra={"enum": [*catalog.TRAINING_TYPES, *(f"ml.{n}" for n in catalog.TRAINING_TYPES)]},
    )
    count: int = Field(ge=0, le=MAX_INSTANCES, description="Number of instances.")
    placement: Literal["cluster", "none"] | None = Field(
        default=None, description="ec2 groups: cluster (default) or none; capacity-block defaults to none."
    )
    root_volume_gib: int | None = Field(default=None, ge=8, le=16384, description="ec2 groups: root gp3 volume (default 500).")
    instance_storage_gib: int | None = Field(
        default=None, ge=1, le=16384, description="HyperPod groups: extra EBS volume per node (default 500)."
    )
    threads_per_core: Literal[1, 2] = Field(default=1, description="1 (no hyper-threading) or 2.")
    deep_health_checks: list[Literal["instance_stress", "instance_connectivity"]] | None = Field(
        default=None,
        description="HyperPod groups: deep health checks on start (default both; instance_connectivity only with count >= 2).",
    )
    capacity: CapacityConfig = Field(default_factory=CapacityConfig)

    @property
    def spec(self) -> catalog.GpuInstanceType:
        return catalog.get(self.instance_type)


class Taint(Model):
    """A Kubernetes taint on inference nodes."""

    key: str = Field(min_length=1, max_length=317)
    value: str = Field(default="", max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class InferenceNodeGroupConfig(_GroupConfig):
    """An EKS managed node group of GPU instances for serving."""

    _training: ClassVar[bool] = False

    name: str = Field(description="1-63 letters, digits and hyphens; unique across all groups.")
    instance_type: str = Field(
        description="Any GPU type of the catalog (g5, g6, g6e, p4, p5, p6).", json_schema_extra={"enum": [*sorted(catalog.CATALOG)]}
    )
    min_size: int = Field(default=0, ge=0, le=1000)
    desired_size: int = Field(default=1, ge=0, le=1000)
    max_size: int = Field(default=1, ge=1, le=1000)
    placement: Literal["cluster", "none"] = Field(default="none", description="cluster puts the nodes in a placement group.")
    root_volume_gib: int = Field(default=200, ge=20, le=16384)
    capacity: CapacityConfig = Field(default_factory=CapacityConfig)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(
        default_factory=lambda: [Taint.model_validate(dict(zip(("key", "value", "effect"), DEFAULT_GPU_TAINT, strict=True)))],
        description="Default: the GPU taint nvidia.com/gpu=true:NoSchedule; [] for none.",
    )

    @model_validator(mode="after")
    def _sizes(self) -> InferenceNodeGroupConfig:
        k8s = [error("labels", p) for key, value in self.labels.items() for p in k8s_problems(key, value)]
        k8s += [error("labels", p) for key in self.labels if (p := reserved_label_problem(key))]
        k8s += [error(f"taints[{i}]", p) for i, taint in enumerate(self.taints) for p in k8s_problems(taint.key, taint.value)]
        _raise_problems(k8s)
        if self.capacity.type == "capacity-block" and self.capacity.drain_minutes is not None:
            raise Problems([error("capacity.drain_minutes", EKS_DRAIN_MINUTES_PROBLEM)])
        if self.capacity.type == "capacity-block" and self.capacity.starts_at is not None and self.desired_size == 0:
            raise Problems(
                [
                    error(
                        "desired_size",
                        "must be 1 or more with capacity.starts_at: the block's start sets the node group to desired_size, got 0",
                    )
                ]
            )
        if not self.min_size <= self.desired_size <= self.max_size:
            raise Problems(
                [
                    error(
                        "desired_size",
                        f"must satisfy min_size <= desired_size <= max_size, got {self.min_size} <= {self.desired_size} <= {self.max_size}",
                    )
                ]
            )
        return self

    @property
    def spec(self) -> catalog.GpuInstanceType:
        return catalog.get(self.instance_type)


class SlurmNodeConfig(Model):
    """The Slurm controller group (always one node)."""

    instance_type: str = Field(default="ml.m5.12xlarge", description="HyperPod instance type of the controller.")
    instance_storage_gib: int = Field(default=500, ge=1, le=16384)

    _gpu_allowed: ClassVar[bool] = False  # the controller: slurmctld only

    @field_validator("instance_type")
    @classmethod
    def _ml(cls, value: str) -> str:
        name = value if value.startswith("ml.") else f"ml.{value}"
        if name not in hyperpod_instance_types():
            raise ValueError(
                f"{value!r} is not an instance type SageMaker HyperPod supports (botocore's ClusterInstanceType), e.g. ml.m5.12xlarge, ml.c5.4xlarge"
            )
        gpu = catalog.CATALOG.get(catalog.normalize_instance_type(name))
        if gpu is not None and not cls._gpu_allowed:
            raise ValueError(controller_gpu_problem(name, gpu.gpus))
        return name


class SlurmLoginConfig(SlurmNodeConfig):
    """The optional Slurm login group."""

    _gpu_allowed: ClassVar[bool] = True  # login nodes may build and debug GPU code

    instance_type: str = Field(default="ml.m5.4xlarge", description="HyperPod instance type of the login nodes.")
    count: int = Field(default=0, ge=0, le=16, description="Login nodes (0: no login group).")


class SlurmConfig(Model):
    controller: SlurmNodeConfig = Field(default_factory=SlurmNodeConfig)
    login: SlurmLoginConfig = Field(default_factory=SlurmLoginConfig)


def _minor_versions(key: str) -> tuple[str, ...]:
    return tuple(v for v in version(key).split(",") if v)


def supported_kubernetes_versions() -> tuple[str, ...]:
    """Kubernetes versions fminfra builds EKS clusters with (the version manifest's list)."""
    return _minor_versions("EKS_SUPPORTED_KUBERNETES_VERSIONS")


def hyperpod_kubernetes_versions() -> tuple[str, ...]:
    """Those of them on HyperPod's documented list: the versions of a HyperPod EKS cluster
    (docs/facts/hyperpod.md#hyperpod-eks-kubernetes-versions)."""
    return tuple(v for v in _minor_versions("HYPERPOD_EKS_KUBERNETES_VERSIONS") if v in supported_kubernetes_versions())


def standard_support_end(kubernetes_version: str) -> date:
    """The day EKS standard support of a supported version ends (the manifest's
    EKS_KUBERNETES_<major>_<minor>_STANDARD_SUPPORT_END; docs/facts/eks.md#eks-kubernetes-version)."""
    return date.fromisoformat(version(f"EKS_KUBERNETES_{kubernetes_version.replace('.', '_')}_STANDARD_SUPPORT_END"))


def default_kubernetes_version(hyperpod: bool = False) -> str:
    """The newest version of the manifest's list (every one was pinned in EKS standard support); for
    HyperPod EKS the newest on HyperPod's list."""
    versions = hyperpod_kubernetes_versions() if hyperpod else supported_kubernetes_versions()
    return max(versions, key=lambda v: tuple(int(x) for x in v.split(".")))


class SystemNodesConfig(Model):
    """A small untainted CPU node group for CoreDNS and other system pods (EKS managed node group)."""

    count: int | None = Field(
        default=None,
        ge=0,
        le=10,
        description="Nodes (0: none). Default: 2 when every node group of the cluster is tainted (inference-only), "
        "0 when untainted nodes exist (HyperPod instance groups, untainted inference groups).",
    )
    instance_type: str = Field(default="m6i.large", description="EC2 instance type (CPU), e.g. m6i.large.")

    @field_validator("instance_type")
    @classmethod
    def _instance_type(cls, value: str) -> str:
        if not EC2_INSTANCE_TYPE_RULE.match(value) or value.startswith("ml."):
            raise ValueError(f"must be an EC2 instance type such as m6i.large (no ml. prefix), got {value!r}")
        if value in catalog.CATALOG:
            raise ValueError(
                f"{value!r} is a GPU type; system nodes are for CoreDNS and other system pods, use a CPU type such as m6i.large"
            )
        return value


class TeamConfig(Model):
    """A team: its own namespace and queue, and a quota of training instances."""

    name: str = Field(description="1-40 lowercase letters, digits and hyphens (the team's namespace is hyperpod-ns-<name>).")
    instances: dict[str, int] = Field(
        default_factory=dict,
        description="Instance group name -> instances of that group in the team's quota; all teams together hold at most the group's count.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if problem := TEAM_NAME.problem(value):
            raise ValueError(problem)
        return value

    @field_validator("instances")
    @classmethod
    def _instances(cls, value: dict[str, int]) -> dict[str, int]:
        _raise_problems([error(f"[{group!r}]", f"must be 0 or more instances, got {n}") for group, n in value.items() if n < 0])
        return value


class SchedulingConfig(Model):
    """Who may use the training instances of a HyperPod EKS cluster, through HyperPod task governance."""

    task_governance: bool | None = Field(
        default=None,
        description="orchestrator eks: install HyperPod task governance (its Kueue) and a compute quota per team. "
        "Default: on where both region sources list compute quotas, off elsewhere (with a warning; docs/compute.md).",
    )
    teams: list[TeamConfig] | None = Field(
        default=None,
        description="Teams and their quotas. Default: one team 'training' holding every instance of every instance group.",
    )
    priority_classes: dict[str, int] = Field(
        default_factory=dict,
        description="Cluster policy: priority class name -> weight 0-100 (at most 10); none: no cluster policy (tasks rank 0, FIFO).",
    )
    kueue: bool = Field(
        default=False,
        description="EKS without HyperPod: install a pinned Kueue (waitForPodsReady on) and a queue per team over the "
        "inference node groups' GPUs. Default: off (no Kueue).",
    )
    kueue_topology: bool = Field(
        default=False,
        description="With kueue: topology-aware flavors (Kueue's Topology Aware Scheduling over the network-node-layer "
        "labels) for the GPU types with an EC2 topology, where the region has one. In a queue of such flavors every pod "
        "set must request GPUs or share a kueue.x-k8s.io/podset-group-name with one that does (an MPIJob launcher "
        "otherwise waits forever: docs/compute.md). Not with Karpenter. Default: off.",
    )

    @field_validator("teams")
    @classmethod
    def _teams(cls, value: list[TeamConfig] | None) -> list[TeamConfig] | None:
        if value is None:
            return None
        problems: list[Finding] = [] if value else [error("", "list at least one team, or leave teams out for the default team")]
        seen: set[str] = set()
        for i, team in enumerate(value):
            if team.name in seen:
                problems.append(error(f"[{i}].name", f"{team.name!r} is already a team; team names must be unique"))
            seen.add(team.name)
        _raise_problems(problems)
        return value

    @field_validator("priority_classes")
    @classmethod
    def _priority_classes(cls, value: dict[str, int]) -> dict[str, int]:
        problems: list[Finding] = []
        if len(value) > PRIORITY_CLASSES_MAX:
            problems.append(error("", f"at most {PRIORITY_CLASSES_MAX} priority classes, got {len(value)}"))
        for name, weight in value.items():
            if problem := TEAM_NAME.problem(name):
                problems.append(error(f"[{name!r}]", problem))
            if not 0 <= weight <= PRIORITY_WEIGHT_MAX:
                problems.append(error(f"[{name!r}]", f"weight must be 0-{PRIORITY_WEIGHT_MAX}, got {weight}"))
        _raise_problems(problems)
        return value


class EksAddonPodIdentityConfig(Model):
    """A role for one of the add-on's service accounts, through EKS Pod Identity."""

    service_account: str = Field(description="The add-on's Kubernetes service account (its documentation names it).")
    managed_policies: list[str] = Field(
        description="AWS managed policies of its role, by name with path (such as service-role/AmazonEBSCSIDriverPolicy)."
    )


class EksAddonConfig(Model):
    """An extra EKS add-on, at a pinned build, installed after an fminfra component and before fminfra's workloads."""

    name: str = Field(description="EKS add-on name, as `aws eks describe-addon-versions` lists it.")
    version: str = Field(description="The pinned build, such as v1.2.3-eksbuild.1.")
    after: str = Field(
        default=DEFAULT_EXTENSION_ANCHOR, description=f"The fminfra component it installs after: {', '.join(EXTENSION_ANCHORS)}."
    )

    pod_identity: list[EksAddonPodIdentityConfig] = Field(
        default_factory=list,
        description="Roles for the add-on's service accounts, for an add-on that calls AWS (docs/compute.md); default none.",
    )

    @field_validator("pod_identity")
    @classmethod
    def _pod_identity(cls, value: list[EksAddonPodIdentityConfig]) -> list[EksAddonPodIdentityConfig]:
        if problems := pod_identity_problems([(i.service_account, i.managed_policies) for i in value]):
            raise ValueError("; ".join(problems))
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if problem := ADDON_NAME.problem(value):
            raise ValueError(problem)
        # the core add-ons are on every cluster; the others depend on the environment (EnvironmentConfig's check)
        if problem := addon_taken_problem(value, CORE_ADDONS):
            raise ValueError(problem)
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if problem := ADDON_BUILD.problem(value):
            raise ValueError(problem)
        return value

    @field_validator("after")
    @classmethod
    def _after(cls, value: str) -> str:
        if problem := anchor_problem(value):
            raise ValueError(problem)
        return value


KarpenterCapacityType = Literal["on-demand", "spot"]  # KARPENTER_CAPACITY_TYPES


class KarpenterConfig(Model):
    """Karpenter on EKS without HyperPod: every inference node group becomes a NodePool and an
    EC2NodeClass instead of a managed node group (docs/compute.md#karpenter)."""

    enabled: bool = Field(
        default=False,
        description="Provision the inference groups' nodes with Karpenter (pinned chart, Pod Identity role and interruption "
        "queue from its getting-started template) instead of managed node groups; needs the system node group.",
    )
    capacity_types: list[KarpenterCapacityType] = Field(
        default_factory=lambda: list[KarpenterCapacityType](["on-demand"]),
        description="Capacity types of the pools of on-demand groups: on-demand, spot or both (Karpenter prefers "
        "reserved, then the cheaper); groups on a reservation or a Capacity Block get reserved.",
    )

    @field_validator("capacity_types")
    @classmethod
    def _capacity_types(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError(f"must list at least one capacity type; allowed: {', '.join(KARPENTER_CAPACITY_TYPES)}")
        _raise_problems([error(f"[{i}]", f"{v!r} is listed twice") for i, v in enumerate(value) if v in value[:i]])
        return value


class HyperPodAutoscalingConfig(Model):
    """HyperPod EKS: HyperPod's managed autoscaling, a Karpenter HyperPod runs itself, on continuous
    provisioning, that scales the named instance groups from 0 nodes for pending pods
    (docs/compute.md#hyperpod-autoscaling)."""

    enabled: bool = Field(
        default=False,
        description="orchestrator eks: turn on HyperPod's managed autoscaling (AutoScaling Karpenter, NodeProvisioningMode "
        "Continuous, the autoscaler's role) with a HyperpodNodeClass and a NodePool of instance_groups.",
    )
    instance_groups: list[str] = Field(
        default_factory=list,
        description=f"The compute.instance_groups HyperPod's Karpenter scales (1-{AUTOSCALING_MAX_GROUPS}): each count 0, "
        "on-demand, without deep health checks; the other groups keep their count.",
    )

    @field_validator("instance_groups")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        _raise_problems([error(f"[{i}]", f"{v!r} is listed twice") for i, v in enumerate(value) if v in value[:i]])
        return value


class EksConfig(Model):
    kubernetes_version: str = Field(
        default_factory=default_kubernetes_version,
        description="EKS Kubernetes version (default: with orchestrator eks the newest on HyperPod's list, else the newest supported).",
    )
    admin_principal_arns: list[str] = Field(default_factory=list, description="IAM roles/users given cluster admin.")
    public_access_cidrs: list[str] = Field(
        default_factory=list, description="CIDRs allowed to the public API endpoint; empty: private endpoint only."
    )
    system_nodes: SystemNodesConfig = Field(default_factory=SystemNodesConfig, description="CPU nodes for system pods.")
    scheduling: SchedulingConfig = Field(
        default_factory=SchedulingConfig, description="orchestrator eks: teams and their quotas (HyperPod task governance)."
    )
    accept_access: bool = Field(
        default=False,
        description="HyperPod EKS only: give the acceptance gate's role fminfra-ENV-accept (GitHub OIDC stack, deployed first) "
        "an access entry and a Role in the namespace of the team its jobs queue in, what `fminfra accept` needs (docs/compute.md).",
    )
    load_balancer_controller: bool = Field(
        default=False,
        description="Install the AWS Load Balancer Controller (pinned chart, Pod Identity role from its own IAM policy); load "
        "balancers are internal unless a Service or Ingress asks otherwise, in the private subnets it finds by their "
        "kubernetes.io/role/internal-elb tag (docs/compute.md).",
    )
    karpenter: KarpenterConfig = Field(
        default_factory=KarpenterConfig, description="EKS without HyperPod: Karpenter NodePools for the inference groups."
    )
    addons: list[EksAddonConfig] = Field(
        default_factory=list, description="Extra EKS add-ons at pinned builds, each after an fminfra component (docs/compute.md)."
    )
    autoscaling: HyperPodAutoscalingConfig = Field(
        default_factory=HyperPodAutoscalingConfig,
        description="orchestrator eks: HyperPod's managed autoscaling (Karpenter run by HyperPod) of some instance groups.",
    )

    @field_validator("addons")
    @classmethod
    def _unique_addons(cls, value: list[EksAddonConfig]) -> list[EksAddonConfig]:
        names = [a.name for a in value]
        _raise_problems([error(f"[{i}].name", f"{n!r} is listed twice") for i, n in enumerate(names) if n in names[:i]])
        return value

    @field_validator("kubernetes_version", mode="before")
    @classmethod
    def _quoted(cls, value: object) -> object:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise ValueError(unquoted_version_problem(value))
        return value

    @field_validator("kubernetes_version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not re.match(r"^1\.[0-9]{2}$", value):
            raise ValueError(f"must be a Kubernetes minor version such as '1.34' (quote it in YAML), got {value!r}")
        supported = supported_kubernetes_versions()
        if value not in supported:
            raise ValueError(
                f"{value!r} is not a supported version; allowed: {', '.join(supported)} "
                "(pinned in EKS standard support with their add-ons; EKS_SUPPORTED_KUBERNETES_VERSIONS in scripts/node/versions.env)"
            )
        return value

    @field_validator("admin_principal_arns")
    @classmethod
    def _arns(cls, value: list[str]) -> list[str]:
        _raise_problems([error(f"[{i}]", problem) for i, arn in enumerate(value) if (problem := principal_arn_problem(arn))])
        return value

    @field_validator("public_access_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        problems = []
        for i, cidr in enumerate(value):
            try:
                ipaddress.IPv4Network(cidr, strict=True)
            except ValueError as exc:
                problems.append(error(f"[{i}]", f"must be an IPv4 CIDR, got {cidr!r} ({exc})"))
        _raise_problems(problems)
        return value


class ComputeConfig(Model):
    """Training groups, the orchestrator that runs them, and inference node groups."""

    orchestrator: Literal["slurm", "eks", "ec2", "none"] = Field(
        default="none",
        description="slurm | eks (HyperPod) | ec2 (Auto Scaling groups) | none (no training cluster: inference_node_groups only).",
    )
    instance_groups: list[InstanceGroupConfig] = Field(default_factory=list)
    slurm: SlurmConfig | None = Field(default=None, description="orchestrator slurm only.")
    eks: EksConfig | None = Field(default=None, description="orchestrator eks, or when inference_node_groups exist.")
    inference_node_groups: list[InferenceNodeGroupConfig] = Field(default_factory=list)

    @property
    def hyperpod(self) -> bool:
        return self.orchestrator in ("slurm", "eks")

    @property
    def needs_eks(self) -> bool:
        return self.orchestrator == "eks" or bool(self.inference_node_groups)

    @property
    def karpenter(self) -> bool:
        """Karpenter provisions the inference groups' nodes (compute.eks.karpenter.enabled)."""
        return self.eks is not None and self.eks.karpenter.enabled

    def untainted_node_sources(self) -> list[str]:
        """Node groups of the EKS cluster on which CoreDNS and other system pods can run for good: HyperPod
        instance groups with nodes (fminfra sets no Kubernetes taints on them) and inference groups
        with nodes whose taints (the GPU taint by default) keep no pod off; neither on capacity that
        ends by itself (a training plan, a Capacity Block: `ENDING_CAPACITY_TYPES`)."""
        sources: list[str] = []
        if self.orchestrator == "eks":
            sources += [
                f"HyperPod instance group {g.name!r}"
                for g in self.instance_groups
                if g.count > 0 and g.capacity.type not in ENDING_CAPACITY_TYPES
            ]
        for g in self.inference_node_groups:
            taints = [(t.key, t.value, t.effect) for t in g.taints]
            if g.capacity.type in ENDING_CAPACITY_TYPES or self.karpenter:
                # Karpenter's nodes come and go with the pods that need them
                continue
            if g.desired_size > 0 and not any(effect in REPELLING_EFFECTS for _, _, effect in taints):
                sources.append(f"inference node group {g.name!r}")
        return sources

    def system_node_count(self) -> int:
        """Nodes of the system node group: the config's count, or 2 when nothing else could run
        CoreDNS and 0 otherwise (HyperPod EKS with nodes, untainted inference groups)."""
        assert self.eks is not None
        if self.eks.system_nodes.count is not None:
            return self.eks.system_nodes.count
        return 0 if self.untainted_node_sources() and not self.karpenter else 2

    def warnings(self, today: date | None = None) -> list[Finding]:
        """(field path, message) for what does not reject the config: a Kubernetes version within
        SUPPORT_END_WARNING_DAYS of the end of its EKS standard support; an inference node group whose
        sizes promise scaling that nothing does."""
        out = self._unscaled_group_warnings() + self._ended_capacity_warnings(today)
        out += [
            warning(f"{path}.placement", f"group {g.name!r}: {RESERVATION_PLACEMENT_WARNING}")
            for path, g in self.groups_with_paths()
            if g.capacity.type == "reservation" and self.placement_of(g) == "cluster"
        ]
        if self.eks is None:
            return out
        out += self._acceptance_team_warnings() + self._kueue_topology_warnings()
        if (
            self.orchestrator == "eks"
            and self.eks.load_balancer_controller
            and self.system_node_count() == 0
            and not any(s.startswith("inference") for s in self.untainted_node_sources())
        ):
            out.append(warning("eks.load_balancer_controller", LBC_WITHOUT_OWN_NODES))
        out += [
            warning(f"eks.public_access_cidrs[{i}]", open_endpoint_problem(cidr))
            for i, cidr in enumerate(self.eks.public_access_cidrs)
            if ipaddress.IPv4Network(cidr).prefixlen == 0
        ]
        today = today or datetime.now(UTC).date()
        end = standard_support_end(self.eks.kubernetes_version)
        left = (end - today).days
        if left > SUPPORT_END_WARNING_DAYS:
            return out
        when = f"ended on {end.isoformat()}" if left < 0 else f"ends on {end.isoformat()} ({left} days)"
        return [
            *out,
            warning(
                "eks.kubernetes_version",
                f"{self.eks.kubernetes_version}: EKS standard support {when}; after it EKS bills extended support, "
                f"${EXTENDED_SUPPORT_USD_PER_HOUR:.2f} instead of ${STANDARD_SUPPORT_USD_PER_HOUR:.2f} per cluster hour "
                "(docs/facts/eks.md#eks-extended-support-price). "
                + (
                    "Move to a newer version once HyperPod lists one (HYPERPOD_EKS_KUBERNETES_VERSIONS in scripts/node/versions.env)"
                    if self.orchestrator == "eks"
                    else f"Move to {default_kubernetes_version()} (the newest supported; EKS_SUPPORTED_KUBERNETES_VERSIONS in scripts/node/versions.env)"
                ),
            ),
        ]

    def groups_with_paths(self) -> list[tuple[str, InstanceGroupConfig | InferenceNodeGroupConfig]]:
        """Every training and inference group, with its path under `compute`."""
        return [
            *((f"instance_groups[{i}]", g) for i, g in enumerate(self.instance_groups)),
            *((f"inference_node_groups[{i}]", g) for i, g in enumerate(self.inference_node_groups)),
        ]

    def _ended_capacity_warnings(self, today: date | None) -> list[Finding]:
        """An ODCR's end_date or a Capacity Block's ends_at that has passed (before TODAY, or now)."""
        now = datetime.now(UTC) if today is None else datetime.combine(today, datetime.min.time(), UTC)
        out = []
        for path, group in self.groups_with_paths():
            cap = group.capacity
            field = "end_date" if cap.type == "odcr" else "ends_at"
            end = cap.end_date if cap.type == "odcr" else cap.ends_at if cap.type == "capacity-block" else None
            if end is not None and end.tzinfo is not None and (problem := ended_problem(field, cap.type, end, now)):
                out.append(warning(f"{path}.capacity.{field}", f"group {group.name!r}: {problem}"))
        return out

    def _unscaled_group_warnings(self) -> list[Finding]:
        """EKS keeps a managed node group at desired_size: only a node autoscaler (the Cluster
        Autoscaler, Karpenter) moves it between min_size and max_size; fminfra's Karpenter replaces the
        node groups when asked (EKS without HyperPod), else none moves them
        (docs/facts/eks.md#eks-nodegroup-desired-size-without-autoscaler)."""
        return (
            [
                warning(
                    f"inference_node_groups[{i}].max_size",
                    f"{g.name}: min_size {g.min_size} < max_size {g.max_size}, but nothing scales the group: a managed node group "
                    f"has no autoscaler, so EKS keeps desired_size ({g.desired_size}) nodes until you change it"
                    + ("; with 0 no pod of this group's type ever runs" if g.desired_size == 0 else "")
                    + ("" if self.orchestrator == "eks" else "; compute.eks.karpenter.enabled provisions nodes for pending pods instead"),
                )
                for i, g in enumerate(self.inference_node_groups)
                if g.min_size < g.max_size and not self.karpenter
            ]
            + [
                warning(
                    f"inference_node_groups[{i}].min_size",
                    f"{g.name}: Karpenter starts nodes for pending pods and removes empty ones: min_size ({g.min_size}) and "
                    f"desired_size are not kept, only max_size ({g.max_size}) bounds the pool",
                )
                for i, g in enumerate(self.inference_node_groups)
                if self.karpenter and g.min_size > 0
            ]
            + (
                [warning("eks.karpenter.capacity_types", KARPENTER_SPOT_ROLE)]
                if self.karpenter and self.eks is not None and "spot" in self.eks.karpenter.capacity_types
                else []
            )
        )

    def _kueue_topology_warnings(self) -> list[Finding]:
        """fminfra's Kueue (EKS without HyperPod): a type with an EC2 topology whose flavor stays plain
        because a team holds it beside a type without one (docs/compute.md#kubernetes-kueue-and-task-governance)."""
        quotas = self.kueue_quotas()
        if not quotas or self.eks is None or not self.eks.scheduling.kueue_topology:  # validated: not with Karpenter
            return []
        held = {team: {t for t, gpus in q.items() if gpus > 0} for team, q in quotas.items()}
        layers = {t: n for types in held.values() for t in types if (n := network_layers(t))}
        kept = kueue_topology_types(layers, held.values())
        return [
            warning(
                "eks.scheduling.teams",
                f"{instance_type}: its Kueue flavor stays plain (no topology-aware placement): team(s) "
                f"{', '.join(sorted(team for team, types in held.items() if instance_type in types and types - {instance_type} - kept.keys()))} "
                "also hold a type whose flavor is plain, and Kueue would refuse their jobs without a topology annotation in a queue "
                "mixing both; "
                "give it to teams holding only types with an EC2 topology",
            )
            for instance_type in sorted(layers.keys() - kept.keys())
        ]

    def _acceptance_team_warnings(self) -> list[Finding]:
        """`fminfra accept` runs each group's DDP and FSx jobs on all its nodes (NCCL on two) in one
        team's queue: a team holding fewer waits on borrowed quota, which task governance's default
        sharing may never lend (docs/compute.md, scheduling)."""
        team = self.acceptance_team()
        if team is None:
            return []
        held = next(t for t in self.scheduling_teams() if t.name == team).instances
        return [
            warning(
                "eks.scheduling.teams",
                f"`fminfra accept` queues in team {team!r}, which holds {held.get(g.name, 0)} of group {g.name!r}'s {g.count} instances: "
                "its acceptance jobs need them all at once and may never be admitted; give that team the whole group",
            )
            for g in self.instance_groups
            if g.count > 0 and held.get(g.name, 0) < g.count
        ]

    @model_validator(mode="after")
    def _rules(self) -> ComputeConfig:
        problems: list[Finding] = []
        if self.orchestrator == "eks" and self.eks is not None and self.eks.kubernetes_version not in hyperpod_kubernetes_versions():
            problems.append(
                error(
                    "eks.kubernetes_version",
                    f"{self.eks.kubernetes_version!r} is not on SageMaker HyperPod's list of Kubernetes versions; allowed with "
                    f"orchestrator eks: {', '.join(hyperpod_kubernetes_versions())} (HYPERPOD_EKS_KUBERNETES_VERSIONS in scripts/node/versions.env)",
                )
            )
        if self.hyperpod and not self.instance_groups:
            problems.append(error("instance_groups", f"orchestrator {self.orchestrator} needs at least one instance group"))
        if self.orchestrator == "none":
            if self.instance_groups:
                problems.append(
                    error("orchestrator", "instance_groups need an orchestrator: slurm or eks (HyperPod) or ec2 (Auto Scaling groups)")
                )
            elif not self.inference_node_groups:
                problems.append(
                    error(
                        "",
                        "give instance_groups with an orchestrator (slurm, eks, ec2), or inference_node_groups for an inference-only EKS cluster",
                    )
                )
        if self.slurm is not None and self.orchestrator != "slurm":
            problems.append(error("slurm", f"only with orchestrator slurm, got orchestrator {self.orchestrator}"))
        if self.eks is not None and not self.needs_eks:
            problems.append(error("eks", "only with orchestrator eks or when inference_node_groups exist"))
        if self.eks is not None and self.eks.accept_access and self.orchestrator != "eks":
            problems.append(
                error("eks.accept_access", f"only with orchestrator eks (HyperPod EKS runs the acceptance jobs), got {self.orchestrator}")
            )
        seen: dict[str, str] = {}
        reserved = (CONTROLLER_GROUP_NAME, LOGIN_GROUP_NAME) if self.orchestrator == "slurm" else ()
        groups = self.groups_with_paths()
        for path, group in groups:
            if group.name in reserved:
                problems.append(error(f"{path}.name", f"{group.name!r} is the Slurm {group.name} group's name; choose another"))
            elif group.name in seen:
                problems.append(error(f"{path}.name", f"{group.name!r} is already used by {seen[group.name]}; group names must be unique"))
            seen.setdefault(group.name, path)
        owners: dict[str, str] = {}
        for path, group in groups:
            for j, rid in enumerate(group.capacity.reservation_ids or []):
                if rid in owners:
                    problems.append(error(f"{path}.capacity.reservation_ids[{j}]", reservation_shared_problem(rid, owners[rid])))
                owners.setdefault(rid, f"group {group.name!r}")
        for i, group in enumerate(self.instance_groups):
            problems.extend(self._training_group_problems(f"instance_groups[{i}]", group))
        for i, igroup in enumerate(self.inference_node_groups):
            path = f"inference_node_groups[{i}]"
            problems.extend(_capacity_problems(path, igroup, "EKS inference node groups", EC2_CAPACITY_TYPES))
            if igroup.capacity.type == "capacity-block" and igroup.placement == "cluster":
                problems.append(error(f"{path}.placement", f"group {igroup.name!r}: {BLOCK_PLACEMENT}"))
        problems.extend(self._karpenter_problems())
        problems.extend(self._autoscaling_problems())
        _raise_problems(problems)
        if self.eks is not None:
            _raise_problems(self._scheduling_problems())
        if self.eks is not None and self.eks.accept_access and self.acceptance_team() is None:
            _raise_problems(
                [
                    error(
                        "eks.accept_access",
                        ACCEPT_NEEDS_TEAM,
                    )
                ]
            )
        if self.eks is not None and self.system_node_count() == 0 and not self.untainted_node_sources():
            _raise_problems(
                [
                    error(
                        "eks.system_nodes.count",
                        "no node of the EKS cluster could run CoreDNS and the other system pods: every inference node group is tainted "
                        "(default nvidia.com/gpu=true:NoSchedule)"
                        + (" and no HyperPod instance group has nodes" if self.orchestrator == "eks" else "")
                        + " (on lasting capacity: a training plan or a Capacity Block ends, and its nodes with it)"
                        + "; set count to 1 or more (default 2), or give a node group no NoSchedule/NoExecute taint",
                    )
                ]
            )
        return self

    @property
    def autoscaled_groups(self) -> list[str]:
        """The HyperPod instance groups HyperPod's managed autoscaling scales (compute.eks.autoscaling)."""
        if self.orchestrator != "eks" or self.eks is None or not self.eks.autoscaling.enabled:
            return []
        return list(self.eks.autoscaling.instance_groups)

    def _autoscaling_problems(self) -> list[Finding]:
        """compute.eks.autoscaling: orchestrator eks only; 1-10 existing groups, each at count 0, on
        demand, without deep health checks (docs/facts/hyperpod.md#hyperpod-autoscaling-node-class)."""
        if self.eks is None:
            return []
        scaling = self.eks.autoscaling
        base = "eks.autoscaling"
        if self.orchestrator != "eks":
            if scaling.enabled or scaling.instance_groups:
                return [error(base, AUTOSCALING_ONLY_EKS.format(orchestrator=self.orchestrator))]
            return []
        if not scaling.enabled:
            return [error(f"{base}.instance_groups", AUTOSCALING_GROUPS_WITHOUT_ENABLED)] if scaling.instance_groups else []
        if not 1 <= len(scaling.instance_groups) <= AUTOSCALING_MAX_GROUPS:
            return [error(f"{base}.instance_groups", f"{AUTOSCALING_NEEDS_GROUPS}, got {len(scaling.instance_groups)}")]
        problems: list[Finding] = []
        index = {g.name: i for i, g in enumerate(self.instance_groups)}
        for j, name in enumerate(scaling.instance_groups):
            if name not in index:
                problems.append(error(f"{base}.instance_groups[{j}]", not_a_group_problem(name, list(index))))
                continue
            group = self.instance_groups[index[name]]
            for field, problem in autoscaled_group_problems(name, group.count, group.capacity.type, group.deep_health_checks):
                problems.append(error(f"instance_groups[{index[name]}].{field}", problem))
        return problems

    def _karpenter_problems(self) -> list[Finding]:
        """compute.eks.karpenter: EKS without HyperPod only; the system node group on; each inference
        group on capacity a pool can take, spread over zones, and no UltraServer."""
        if not self.karpenter:
            return []
        assert self.eks is not None
        base = "eks.karpenter.enabled"
        if self.orchestrator == "eks":
            return [
                error(
                    base,
                    "HyperPod EKS scales its nodes with HyperPod's own managed autoscaling (compute.eks.autoscaling), not a "
                    "second Karpenter; "
                    "allowed with orchestrator eks: false",
                )
            ]
        problems: list[Finding] = []
        if self.eks.system_nodes.count == 0:
            problems.append(error("eks.system_nodes.count", KARPENTER_NEEDS_SYSTEM_NODES))
        for i, g in enumerate(self.inference_node_groups):
            path = f"inference_node_groups[{i}]"
            if name_problem := DNS_LABEL.problem(g.name):
                problems.append(error(f"{path}.name", f"group {g.name!r} names its NodePool and EC2NodeClass: {name_problem}"))
            if catalog.normalize_instance_type(g.instance_type) == GB200_INSTANCE_TYPE:
                problems.append(error(f"{path}.instance_type", f"group {g.name!r}: {KARPENTER_ULTRASERVER_PROBLEM}"))
            if g.capacity.type not in KARPENTER_GROUP_CAPACITY:
                problems.append(
                    error(
                        f"{path}.capacity.type",
                        f"group {g.name!r}: a Karpenter pool takes {', '.join(KARPENTER_GROUP_CAPACITY)}, not {g.capacity.type} "
                        "(for a reservation of your own use reservation with its id)",
                    )
                )
            if g.capacity.starts_at is not None:
                problems.append(
                    error(
                        f"{path}.capacity.starts_at",
                        f"group {g.name!r}: Karpenter launches into a Capacity Block while it is active and drains its nodes "
                        "before EC2 reclaims them; drop starts_at and ends_at (they schedule a node group)",
                    )
                )
            if g.placement == "cluster":
                problems.append(
                    error(
                        f"{path}.placement",
                        f"group {g.name!r}: fminfra's Karpenter pools spread over the network's zones; allowed with karpenter: none",
                    )
                )
        return problems

    def scheduling_teams(self) -> list[TeamConfig]:
        """The teams of the cluster's Kueue: on HyperPod EKS with task governance, the config's or one
        team (`DEFAULT_TEAM`) holding every instance of every instance group; on EKS without HyperPod
        with `kueue`, the config's or one team holding every inference group at its max_size; none otherwise."""
        if self.eks is None:
            return []
        scheduling = self.eks.scheduling
        if self.orchestrator == "eks":
            if scheduling.task_governance is False:
                return []
            default = {g.name: g.count for g in self.instance_groups}
        elif scheduling.kueue:
            default = {g.name: g.max_size for g in self.inference_node_groups}
        else:
            return []
        return list(scheduling.teams) if scheduling.teams is not None else [TeamConfig(name=DEFAULT_TEAM, instances=default)]

    def acceptance_team(self) -> str | None:
        """The team whose queue `fminfra accept` submits to on HyperPod EKS: `DEFAULT_TEAM` when the
        cluster has it, else the first configured team; None without task governance teams."""
        if self.orchestrator != "eks":
            return None
        names = [t.name for t in self.scheduling_teams()]
        if not names:
            return None
        return DEFAULT_TEAM if DEFAULT_TEAM in names else names[0]

    def kueue_quotas(self) -> dict[str, dict[str, int]]:
        """EKS without HyperPod, with `kueue`: team -> EC2 instance type -> GPUs."""
        if self.orchestrator == "eks":
            return {}
        groups = {g.name: g for g in self.inference_node_groups}
        quotas: dict[str, dict[str, int]] = {}
        for team in self.scheduling_teams():
            by_type = quotas.setdefault(team.name, {})
            for name, count in team.instances.items():
                spec = groups[name].spec
                by_type[spec.name] = by_type.get(spec.name, 0) + count * spec.gpus
        return quotas

    def team_quotas(self) -> dict[str, dict[str, int]]:
        """HyperPod EKS: team -> HyperPod (ml.) instance type -> instances, summed over the groups of that type."""
        if self.orchestrator != "eks":
            return {}
        types = {g.name: g.spec.hyperpod_name for g in self.instance_groups}
        quotas: dict[str, dict[str, int]] = {}
        for team in self.scheduling_teams():
            by_type = quotas.setdefault(team.name, {})
            for group, count in team.instances.items():
                by_type[types[group]] = by_type.get(types[group], 0) + count
        return quotas

    def _scheduling_problems(self) -> list[Finding]:
        assert self.eks is not None
        scheduling = self.eks.scheduling
        base = "eks.scheduling"
        problems: list[Finding] = []
        if self.orchestrator == "eks":
            if scheduling.kueue:
                # docs/facts/hyperpod.md#hyperpod-task-governance-addon: task governance is HyperPod EKS's one Kueue.
                problems.append(error(f"{base}.kueue", "HyperPod EKS runs task governance's Kueue and no second one; allowed: false"))
            if scheduling.kueue_topology:
                problems.append(
                    error(
                        f"{base}.kueue_topology",
                        "task governance places topology-aware with its own Kueue objects "
                        "(docs/facts/hyperpod.md#task-governance-tas-not-configurable); allowed: false",
                    )
                )
            if scheduling.task_governance is False:
                for name in ("teams", "priority_classes"):
                    if name in scheduling.model_fields_set:
                        problems.append(
                            error(f"{base}.{name}", "needs task_governance: true (teams and priority classes are task governance's)")
                        )
                return problems
            groups: dict[str, InstanceGroupConfig | InferenceNodeGroupConfig] = {g.name: g for g in self.instance_groups}
            capacity = {g.name: g.count for g in self.instance_groups}
        elif not scheduling.kueue:
            if scheduling != SchedulingConfig():
                return [
                    error(
                        base, f"only with orchestrator eks (HyperPod task governance) or kueue: true, got orchestrator {self.orchestrator}"
                    )
                ]
            return []
        else:
            if scheduling.task_governance:
                problems.append(
                    error(f"{base}.task_governance", "HyperPod task governance needs orchestrator eks; allowed here: false or unset")
                )
            if scheduling.priority_classes:
                problems.append(
                    error(f"{base}.priority_classes", "priority classes are task governance's (orchestrator eks); allowed here: none")
                )
            for i, team in enumerate(self.scheduling_teams()):
                if team.name in RESERVED_NAMESPACES:
                    problems.append(
                        error(
                            f"{base}.teams[{i}].name",
                            f"{team.name!r} is a reserved namespace; not allowed: {', '.join(RESERVED_NAMESPACES)}",
                        )
                    )
            if scheduling.kueue_topology and self.karpenter:
                # docs/facts/eks.md#kueue-tas-cluster-queue-mixing: topology-aware admission counts only nodes that exist
                problems.append(
                    error(
                        f"{base}.kueue_topology",
                        "Kueue places topology-aware only on nodes that exist, and Karpenter starts nodes only for "
                        "admitted pods; allowed with karpenter: false",
                    )
                )
            groups = {g.name: g for g in self.inference_node_groups}
            capacity = {g.name: g.max_size for g in self.inference_node_groups}
        held: dict[str, int] = {}
        for i, team in enumerate(self.scheduling_teams()):
            if scheduling.teams is not None and not any(team.instances.values()):
                # a quota of nothing: the team's queue could never admit a job
                problems.append(error(f"{base}.teams[{i}].instances", f"team {team.name!r} holds no instances; give it at least one"))
            for group, count in team.instances.items():
                if group not in groups:
                    problems.append(error(f"{base}.teams[{i}].instances", not_a_group_problem(group, list(groups))))
                    continue
                held[group] = held.get(group, 0) + count
            types = {groups[g].spec.name for g in team.instances if g in groups}
            if len(types) > QUOTA_MAX_INSTANCE_TYPES:
                problems.append(
                    error(
                        f"{base}.teams[{i}].instances",
                        f"a team's quota names at most {QUOTA_MAX_INSTANCE_TYPES} instance types, got {len(types)}",
                    )
                )
        most = "count" if self.orchestrator == "eks" else "max_size"
        for name, total in held.items():
            if total > capacity[name]:
                problems.append(
                    error(
                        f"{base}.teams",
                        f"the teams hold {total} instances of group {name!r}, whose {most} is {capacity[name]}; allowed: at most {capacity[name]} in all",
                    )
                )
        return problems

    def _training_group_problems(self, path: str, group: InstanceGroupConfig) -> list[Finding]:
        problems: list[Finding] = []
        kind = "HyperPod groups" if self.hyperpod else "ec2 groups"
        allowed = HYPERPOD_CAPACITY_TYPES if self.hyperpod else EC2_CAPACITY_TYPES
        problems.extend(_capacity_problems(path, group, f"{kind} (orchestrator {self.orchestrator})", allowed))
        if self.hyperpod:
            if group.spec.hyperpod_name not in hyperpod_instance_types():
                problems.append(
                    error(
                        f"{path}.instance_type",
                        f"group {group.name!r}: {group.spec.hyperpod_name} is not an instance type SageMaker HyperPod supports",
                    )
                )
            if "instance_connectivity" in (group.deep_health_checks or []) and group.count < CONNECTIVITY_MIN_INSTANCES:
                # docs/facts/hyperpod.md#hyperpod-instance-connectivity-min-nodes
                problems.append(
                    error(
                        f"{path}.deep_health_checks",
                        f"group {group.name!r}: instance_connectivity runs NCCL tests across nodes and needs count of at least 2, got {group.count}",
                    )
                )
            for field in ("placement", "root_volume_gib"):
                if getattr(group, field) is not None:
                    problems.append(
                        error(
                            f"{path}.{field}", f"group {group.name!r}: {kind} do not take {field} (HyperPod places and boots its own nodes)"
                        )
                    )
        else:
            if group.capacity.type == "odcr" and group.count == 0:
                problems.append(
                    error(f"{path}.count", f"group {group.name!r}: an odcr reserves count instances; count must be at least 1, got 0")
                )
            for field in ("instance_storage_gib", "deep_health_checks"):
                if getattr(group, field) is not None:
                    problems.append(error(f"{path}.{field}", f"group {group.name!r}: only HyperPod groups take {field}; ec2 groups do not"))
            if group.capacity.type == "capacity-block" and group.placement == "cluster":
                problems.append(error(f"{path}.placement", f"group {group.name!r}: {BLOCK_PLACEMENT}"))
        return problems

    def placement_of(self, group: InstanceGroupConfig | InferenceNodeGroupConfig) -> str:
        """Effective placement of an ec2 or inference group: cluster or none (HyperPod: managed)."""
        if isinstance(group, InstanceGroupConfig):
            if self.hyperpod:
                return "managed"
            if group.placement is not None:
                return group.placement
            return "none" if group.capacity.type == "capacity-block" else "cluster"
        return group.placement
