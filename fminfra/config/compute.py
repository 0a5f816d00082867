"""The `compute` section: instance groups, capacity, Slurm, EKS and inference node groups
(mirrors stacks/compute/)."""

from __future__ import annotations

import ipaddress
import re
from datetime import datetime, timedelta
from typing import Literal

from pydantic import Field, field_validator, model_validator

from fminfra import catalog
from fminfra.config.base import Model, Problems, _raise_problems
from fminfra.core.hyperpod_types import hyperpod_instance_types
from fminfra.core.versions import version

# HyperPod's rule for cluster and instance group names.
GROUP_NAME_RULE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
RESERVATION_ID_RULE = re.compile(r"^cr-[0-9a-f]{17}$")
TRAINING_PLAN_ARN_RULE = re.compile(r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:training-plan/[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}$")
IAM_PRINCIPAL_ARN_RULE = re.compile(r"^arn:aws[a-z-]*:(iam|sts)::[0-9]{12}:[a-zA-Z-]+/.+$")
CONTROLLER_GROUP_NAME = "controller"
LOGIN_GROUP_NAME = "login"
HYPERPOD_MAX_INSTANCES = 6758
CAPACITY_TYPES = ("on-demand", "odcr", "reservation", "capacity-block", "training-plan")
HYPERPOD_CAPACITY_TYPES = ("on-demand", "training-plan")
EC2_CAPACITY_TYPES = ("on-demand", "odcr", "reservation", "capacity-block")


class CapacityConfig(Model):
    """Where a group's instances come from. Which fields apply depends on `type`."""

    type: Literal["on-demand", "odcr", "reservation", "capacity-block", "training-plan"] = "on-demand"
    end_date: datetime | None = Field(default=None, description="odcr: when the reservation ends (none: open-ended).")
    reservation_ids: list[str] | None = Field(default=None, description="reservation, capacity-block: cr-... ids.")
    starts_at: datetime | None = Field(default=None, description="capacity-block: start of the block.")
    ends_at: datetime | None = Field(default=None, description="capacity-block: end of the block.")
    training_plan_arn: str | None = Field(default=None, description="training-plan: SageMaker training plan ARN.")

    @model_validator(mode="after")
    def _fields_for_type(self) -> CapacityConfig:
        allowed = {
            "on-demand": set(),
            "odcr": {"end_date"},
            "reservation": {"reservation_ids"},
            "capacity-block": {"reservation_ids", "starts_at", "ends_at"},
            "training-plan": {"training_plan_arn"},
        }[self.type]
        required = {"reservation": {"reservation_ids"}, "capacity-block": {"reservation_ids"}, "training-plan": {"training_plan_arn"}}.get(
            self.type, set()
        )
        problems: list[tuple[str, str]] = []
        for field in ("end_date", "reservation_ids", "starts_at", "ends_at", "training_plan_arn"):
            value = getattr(self, field)
            if value is not None and field not in allowed:
                problems.append((field, f"not allowed with type {self.type} (it takes: {', '.join(sorted(allowed)) or 'no other field'})"))
            if value is None and field in required:
                problems.append((field, f"required with type {self.type}"))
        for i, rid in enumerate(self.reservation_ids or []):
            if not RESERVATION_ID_RULE.match(rid):
                problems.append((f"reservation_ids[{i}]", f"must be 'cr-' followed by 17 lowercase hex digits, got {rid!r}"))
        if self.reservation_ids is not None and not self.reservation_ids:
            problems.append(("reservation_ids", "must list at least one reservation id"))
        if self.reservation_ids and len(set(self.reservation_ids)) != len(self.reservation_ids):
            problems.append(("reservation_ids", "reservation ids must be unique"))
        if self.training_plan_arn is not None and not TRAINING_PLAN_ARN_RULE.match(self.training_plan_arn):
            problems.append(
                (
                    "training_plan_arn",
                    f"must be arn:aws:sagemaker:REGION:ACCOUNT:training-plan/NAME, got {self.training_plan_arn!r}",
                )
            )
        for field in ("end_date", "starts_at", "ends_at"):
            value = getattr(self, field)
            if value is not None and value.tzinfo is None:
                problems.append((field, f"must carry a time zone, e.g. 2026-12-01T11:30:00Z, got {value.isoformat()}"))
        if self.starts_at and self.ends_at and self.starts_at.tzinfo and self.ends_at.tzinfo and self.ends_at <= self.starts_at:
            problems.append(("ends_at", f"must be after starts_at ({self.starts_at.isoformat()}), got {self.ends_at.isoformat()}"))
        elif (
            self.starts_at
            and self.ends_at
            and self.starts_at.tzinfo
            and self.ends_at.tzinfo
            and self.ends_at - self.starts_at < timedelta(days=1)
        ):
            problems.append(
                (
                    "ends_at",
                    f"a Capacity Block lasts 1 to 182 days; ends_at must be at least 1 day after starts_at, got {self.ends_at - self.starts_at}",
                )
            )
        if (self.starts_at is None) != (self.ends_at is None) and self.type == "capacity-block":
            given, missing = ("starts_at", "ends_at") if self.ends_at is None else ("ends_at", "starts_at")
            problems.append((missing, f"starts_at and ends_at go together: {given} is given, so {missing} is required (or drop both)"))
        _raise_problems(problems)
        return self


def _purchase_problem(path: str, name: str, instance_type: str, capacity_type: str) -> tuple[str, str] | None:
    """A group whose capacity type AWS does not sell its instance type through
    (docs/facts/capacity.md#p6e-gb200-ultraserver-purchase)."""
    allowed = catalog.capacity_types(instance_type)
    if allowed is None or capacity_type in allowed:
        return None
    return (
        f"{path}.capacity.type",
        f"group {name!r}: AWS sells {catalog.normalize_instance_type(instance_type)} only through {', '.join(allowed)}, "
        f"not {capacity_type}; allowed: {', '.join(allowed)}",
    )


def _check_group_name(value: str) -> str:
    if not GROUP_NAME_RULE.match(value):
        raise ValueError(f"must be 1-63 letters, digits and hyphens, starting and ending with a letter or digit, got {value!r}")
    return value


def _instance_type_problem(value: str, *, training: bool) -> str | None:
    name = catalog.normalize_instance_type(value)
    spec = catalog.CATALOG.get(name)
    if spec is None:
        known = catalog.TRAINING_TYPES if training else tuple(catalog.CATALOG)
        return f"{value!r} is not in the GPU catalog; allowed: {', '.join(known)}"
    if training and not spec.training:
        return f"{value!r} is not an EFA training type; allowed: {', '.join(catalog.TRAINING_TYPES)}"
    return None


class InstanceGroupConfig(Model):
    """A training group: a HyperPod instance group (slurm, eks) or an Auto Scaling group (ec2)."""

    name: str = Field(description="1-63 letters, digits and hyphens (HyperPod's rule); unique.")
    instance_type: str = Field(description="EFA training type, EC2 or ml. form (p5.48xlarge, ml.p5.48xlarge).")
    count: int = Field(ge=0, le=HYPERPOD_MAX_INSTANCES, description="Number of instances.")
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

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_group_name(value)

    @field_validator("instance_type")
    @classmethod
    def _instance_type(cls, value: str) -> str:
        problem = _instance_type_problem(value, training=True)
        if problem:
            raise ValueError(problem)
        return catalog.normalize_instance_type(value)

    @property
    def spec(self) -> catalog.GpuInstanceType:
        return catalog.get(self.instance_type)


class Taint(Model):
    """A Kubernetes taint on inference nodes."""

    key: str = Field(min_length=1, max_length=317)
    value: str = Field(default="", max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class InferenceNodeGroupConfig(Model):
    """An EKS managed node group of GPU instances for serving."""

    name: str = Field(description="1-63 letters, digits and hyphens; unique across all groups.")
    instance_type: str = Field(description="Any GPU type of the catalog (g5, g6, g6e, p4, p5, p6).")
    min_size: int = Field(default=0, ge=0, le=1000)
    desired_size: int = Field(default=1, ge=0, le=1000)
    max_size: int = Field(default=1, ge=1, le=1000)
    placement: Literal["cluster", "none"] = Field(default="none", description="cluster puts the nodes in a placement group.")
    root_volume_gib: int = Field(default=200, ge=20, le=16384)
    capacity: CapacityConfig = Field(default_factory=CapacityConfig)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_group_name(value)

    @field_validator("instance_type")
    @classmethod
    def _instance_type(cls, value: str) -> str:
        problem = _instance_type_problem(value, training=False)
        if problem:
            raise ValueError(problem)
        return catalog.normalize_instance_type(value)

    @model_validator(mode="after")
    def _sizes(self) -> InferenceNodeGroupConfig:
        if not self.min_size <= self.desired_size <= self.max_size:
            raise Problems(
                [
                    (
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

    @field_validator("instance_type")
    @classmethod
    def _ml(cls, value: str) -> str:
        name = value if value.startswith("ml.") else f"ml.{value}"
        if name not in hyperpod_instance_types():
            raise ValueError(
                f"{value!r} is not an instance type SageMaker HyperPod supports (botocore's ClusterInstanceType), e.g. ml.m5.12xlarge, ml.c5.4xlarge"
            )
        return name


class SlurmLoginConfig(SlurmNodeConfig):
    """The optional Slurm login group."""

    instance_type: str = Field(default="ml.m5.4xlarge", description="HyperPod instance type of the login nodes.")
    count: int = Field(default=0, ge=0, le=16, description="Login nodes (0: no login group).")


class SlurmConfig(Model):
    controller: SlurmNodeConfig = Field(default_factory=SlurmNodeConfig)
    login: SlurmLoginConfig = Field(default_factory=SlurmLoginConfig)


def supported_kubernetes_versions() -> tuple[str, ...]:
    """Kubernetes versions fminfra builds EKS clusters with (the version manifest's list)."""
    return tuple(v for v in version("EKS_SUPPORTED_KUBERNETES_VERSIONS").split(",") if v)


class EksConfig(Model):
    kubernetes_version: str = Field(default="1.34", description="EKS Kubernetes version.")
    admin_principal_arns: list[str] = Field(default_factory=list, description="IAM roles/users given cluster admin.")
    public_access_cidrs: list[str] = Field(
        default_factory=list, description="CIDRs allowed to the public API endpoint; empty: private endpoint only."
    )

    @field_validator("kubernetes_version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not re.match(r"^1\.[0-9]{2}$", value):
            raise ValueError(f"must be a Kubernetes minor version such as '1.34' (quote it in YAML), got {value!r}")
        supported = supported_kubernetes_versions()
        if value not in supported:
            raise ValueError(
                f"{value!r} is not a supported version; allowed: {', '.join(supported)} "
                "(in EKS standard support and supported by HyperPod; EKS_SUPPORTED_KUBERNETES_VERSIONS in scripts/node/versions.env)"
            )
        return value

    @field_validator("admin_principal_arns")
    @classmethod
    def _arns(cls, value: list[str]) -> list[str]:
        _raise_problems(
            [
                (f"[{i}]", f"must be an IAM role or user ARN, got {arn!r}")
                for i, arn in enumerate(value)
                if not IAM_PRINCIPAL_ARN_RULE.match(arn)
            ]
        )
        return value

    @field_validator("public_access_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        problems = []
        for i, cidr in enumerate(value):
            try:
                ipaddress.IPv4Network(cidr, strict=True)
            except ValueError as exc:
                problems.append((f"[{i}]", f"must be an IPv4 CIDR, got {cidr!r} ({exc})"))
        _raise_problems(problems)
        return value


class ComputeConfig(Model):
    """Training groups, the orchestrator that runs them, and inference node groups."""

    orchestrator: Literal["slurm", "eks", "ec2"] = Field(description="slurm | eks (HyperPod) | ec2 (Auto Scaling groups).")
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

    @model_validator(mode="after")
    def _rules(self) -> ComputeConfig:
        problems: list[tuple[str, str]] = []
        if self.hyperpod and not self.instance_groups:
            problems.append(("instance_groups", f"orchestrator {self.orchestrator} needs at least one instance group"))
        if self.slurm is not None and self.orchestrator != "slurm":
            problems.append(("slurm", f"only with orchestrator slurm, got orchestrator {self.orchestrator}"))
        if self.eks is not None and not self.needs_eks:
            problems.append(("eks", "only with orchestrator eks or when inference_node_groups exist"))
        seen: dict[str, str] = {}
        reserved = (CONTROLLER_GROUP_NAME, LOGIN_GROUP_NAME) if self.orchestrator == "slurm" else ()
        groups: list[tuple[str, InstanceGroupConfig | InferenceNodeGroupConfig]] = [
            *((f"instance_groups[{i}]", g) for i, g in enumerate(self.instance_groups)),
            *((f"inference_node_groups[{i}]", g) for i, g in enumerate(self.inference_node_groups)),
        ]
        for path, group in groups:
            if group.name in reserved:
                problems.append((f"{path}.name", f"{group.name!r} is the Slurm {group.name} group's name; choose another"))
            elif group.name in seen:
                problems.append((f"{path}.name", f"{group.name!r} is already used by {seen[group.name]}; group names must be unique"))
            seen.setdefault(group.name, path)
        for i, group in enumerate(self.instance_groups):
            problems.extend(self._training_group_problems(f"instance_groups[{i}]", group))
        for i, igroup in enumerate(self.inference_node_groups):
            path = f"inference_node_groups[{i}]"
            if igroup.capacity.type not in EC2_CAPACITY_TYPES:
                problems.append(
                    (
                        f"{path}.capacity.type",
                        f"group {igroup.name!r}: {igroup.capacity.type} is not available to EKS inference node groups; allowed: {', '.join(EC2_CAPACITY_TYPES)}",
                    )
                )
            if purchase := _purchase_problem(path, igroup.name, igroup.instance_type, igroup.capacity.type):
                problems.append(purchase)
            if igroup.capacity.type == "capacity-block" and igroup.placement == "cluster":
                problems.append(
                    (
                        f"{path}.placement",
                        f"group {igroup.name!r}: a Capacity Block brings its own placement; placement cluster is not allowed, use none",
                    )
                )
        _raise_problems(problems)
        if self.orchestrator == "slurm" and self.slurm is None:
            self.slurm = SlurmConfig()
        if self.needs_eks and self.eks is None:
            self.eks = EksConfig()
        return self

    def _training_group_problems(self, path: str, group: InstanceGroupConfig) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        kind = "HyperPod groups" if self.hyperpod else "ec2 groups"
        allowed = HYPERPOD_CAPACITY_TYPES if self.hyperpod else EC2_CAPACITY_TYPES
        if group.capacity.type not in allowed:
            problems.append(
                (
                    f"{path}.capacity.type",
                    f"group {group.name!r}: {group.capacity.type} is not available to {kind} (orchestrator {self.orchestrator}); allowed: {', '.join(allowed)}",
                )
            )
        if purchase := _purchase_problem(path, group.name, group.instance_type, group.capacity.type):
            problems.append(purchase)
        if self.hyperpod:
            if group.spec.hyperpod_name not in hyperpod_instance_types():
                problems.append(
                    (
                        f"{path}.instance_type",
                        f"group {group.name!r}: {group.spec.hyperpod_name} is not an instance type SageMaker HyperPod supports",
                    )
                )
            if "instance_connectivity" in (group.deep_health_checks or []) and group.count < 2:
                # docs/facts/hyperpod.md#hyperpod-instance-connectivity-min-nodes
                problems.append(
                    (
                        f"{path}.deep_health_checks",
                        f"group {group.name!r}: instance_connectivity runs NCCL tests across nodes and needs count of at least 2, got {group.count}",
                    )
                )
            for field in ("placement", "root_volume_gib"):
                if getattr(group, field) is not None:
                    problems.append(
                        (f"{path}.{field}", f"group {group.name!r}: {kind} do not take {field} (HyperPod places and boots its own nodes)")
                    )
        else:
            if group.capacity.type == "odcr" and group.count == 0:
                problems.append(
                    (f"{path}.count", f"group {group.name!r}: an odcr reserves count instances; count must be at least 1, got 0")
                )
            for field in ("instance_storage_gib", "deep_health_checks"):
                if getattr(group, field) is not None:
                    problems.append((f"{path}.{field}", f"group {group.name!r}: only HyperPod groups take {field}; ec2 groups do not"))
            if group.capacity.type == "capacity-block" and group.placement == "cluster":
                problems.append(
                    (
                        f"{path}.placement",
                        f"group {group.name!r}: a Capacity Block brings its own placement; placement cluster is not allowed, use none",
                    )
                )
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
