"""Typed environment config: the one reader of the YAML files in config/.

Every section is a pydantic model with `extra="forbid"`, so a misspelled field is an error and
never a silently ignored value. Cross-field rules (AZ IDs of the region, capacity types per
orchestrator, subnet sizes) live here so that they fail before any synth. `load_config` turns
every problem into one line `FILE: field.path: message`.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError

from fminfra import catalog
from fminfra.errors import ConfigError, ValidationError
from fminfra.hyperpod_types import hyperpod_instance_types
from fminfra.regions import AZ_ID_PREFIX_BY_REGION, is_az_id, region_of_az_id
from fminfra.subnets import SubnetPlan, plan_subnets
from fminfra.versions import version

NAME_RULE = re.compile(r"^[a-z][a-z0-9-]{0,15}$")
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
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)


class Problems(ValueError):
    """Raised by validators: problems each with a path relative to the model that found them."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {msg}" if path else msg for path, msg in problems))
        self.problems = problems


def _raise_problems(problems: list[tuple[str, str]]) -> None:
    if problems:
        raise Problems(problems)


class Model(BaseModel):
    """Base of every config section: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def check_account(value: Any) -> Any:
    """An AWS account id: a quoted string of 12 digits (shared by every config that names one)."""
    if isinstance(value, int):
        raise ValueError("must be a quoted string of 12 digits (YAML reads an unquoted number as an integer)")
    if isinstance(value, str) and not re.match(r"^[0-9]{12}$", value):
        raise ValueError(f"must be 12 digits, got {value!r}")
    return value


def check_region(value: str) -> str:
    """A region fminfra knows the AZ IDs of."""
    if value not in AZ_ID_PREFIX_BY_REGION:
        raise ValueError(f"unknown region {value!r}; known: {', '.join(AZ_ID_PREFIX_BY_REGION)}")
    return value


# --------------------------------------------------------------------------------------------
# network


class NetworkConfig(Model):
    """The VPC: CIDR, the AZs (by AZ ID) it spans, and where the GPU capacity lives."""

    cidr: str = Field(default="10.0.0.0/16", description="IPv4 CIDR of the VPC, /16 to /24.")
    az_ids: list[str] = Field(min_length=1, max_length=6, description="AZ IDs of the region, e.g. usw2-az1.")
    compute_az_id: str = Field(description="AZ ID holding GPU capacity, FSx and the placement group.")
    compute_subnet_prefix: int = Field(default=18, ge=16, le=26, description="Prefix of the compute-AZ private subnet.")
    private_subnet_prefix: int = Field(default=20, ge=16, le=27, description="Prefix of each other private subnet.")
    public_subnet_prefix: int = Field(default=26, ge=16, le=28, description="Prefix of each public (NAT-only) subnet.")
    nat_gateways: Literal["one", "per-az"] = Field(
        default="one", description="one: a NAT gateway in the compute AZ; per-az: one in every AZ."
    )
    flow_log_retention_days: int = Field(default=90, description="CloudWatch Logs retention of VPC flow logs.")

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, value: str) -> str:
        try:
            network = ipaddress.IPv4Network(value, strict=True)
        except ValueError as exc:
            raise ValueError(f"must be an IPv4 network such as 10.0.0.0/16, got {value!r} ({exc})") from None
        if not 16 <= network.prefixlen <= 24:
            raise ValueError(f"prefix must be /16 to /24 (the VPC limits), got /{network.prefixlen}")
        return value

    @field_validator("az_ids")
    @classmethod
    def _az_ids(cls, value: list[str]) -> list[str]:
        problems = [(f"[{i}]", f"{az!r} is not an AZ ID such as usw2-az1") for i, az in enumerate(value) if not is_az_id(az)]
        _raise_problems(problems)
        duplicates = sorted({az for az in value if value.count(az) > 1})
        if duplicates:
            raise ValueError(f"AZ IDs must be unique, repeated: {', '.join(duplicates)}")
        return value

    @field_validator("flow_log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            raise ValueError(f"must be one of {', '.join(map(str, LOG_RETENTION_DAYS))}, got {value}")
        return value

    @model_validator(mode="after")
    def _compute_az(self) -> NetworkConfig:
        if self.compute_az_id not in self.az_ids:
            raise Problems([("compute_az_id", f"{self.compute_az_id!r} is not one of az_ids ({', '.join(self.az_ids)})")])
        try:
            self.subnets()
        except ValidationError as exc:
            raise Problems([("cidr", str(exc))]) from None
        return self

    def subnets(self) -> list[SubnetPlan]:
        """The subnet plan (see `fminfra.subnets`)."""
        return plan_subnets(
            cidr=self.cidr,
            az_ids=self.az_ids,
            compute_az_id=self.compute_az_id,
            compute_subnet_prefix=self.compute_subnet_prefix,
            private_subnet_prefix=self.private_subnet_prefix,
            public_subnet_prefix=self.public_subnet_prefix,
        )


# --------------------------------------------------------------------------------------------
# compute


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
        default=None, description="HyperPod groups: deep health checks on start (default both)."
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
        if self.hyperpod:
            if group.spec.hyperpod_name not in hyperpod_instance_types():
                problems.append(
                    (
                        f"{path}.instance_type",
                        f"group {group.name!r}: {group.spec.hyperpod_name} is not an instance type SageMaker HyperPod supports",
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


# --------------------------------------------------------------------------------------------
# storage and observability: their issues fill the rules; the names are the contract.


# FSx for Lustre rules (facts §3). SSD capacity: 1200, 2400 or a multiple of 2400 GiB.
LUSTRE_THROUGHPUT_TIERS_MB_PER_TIB = (125, 250, 500, 1000)
# PERSISTENT_2 tier used when neither throughput_mb_per_tib is given: 500 MB/s/TiB gives about
# 0.5 GB/s per TiB, a middle ground between the 125/250 tiers that starve GPU fleets and 1000.
LUSTRE_DEFAULT_THROUGHPUT_MB_PER_TIB = 500
# SCRATCH_2 has a fixed baseline of 200 MB/s/TiB (bursting higher): FSx performance table.
LUSTRE_SCRATCH_2_BASELINE_MB_PER_TIB = 200
# EFA-enabled file systems grow in these steps (FSx "increase storage capacity" page); documented
# for increases only, so a capacity off the step is a warning, not a rejection (facts §3 ⚠).
LUSTRE_EFA_CAPACITY_STEP_GIB = {125: 38400, 250: 19200, 500: 9600, 1000: 4800}
LUSTRE_METADATA_IOPS_SMALL = (1500, 3000, 6000)
LUSTRE_METADATA_IOPS_MAX = 192000
LUSTRE_MAX_REPOSITORIES = 8
BUCKET_NAME_RULE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
S3_PREFIX_RULE = re.compile(r"^[A-Za-z0-9!_.*'()=+,@ -][A-Za-z0-9!_.*'()=+,@ /-]*/$")
FILE_SYSTEM_PATH_RULE = re.compile(r"^/[A-Za-z0-9!_.*'()=+,@ /-]*$")


def lustre_capacity_valid(gib: int) -> bool:
    """1200, 2400 or a multiple of 2400 GiB (SSD SCRATCH_2 and PERSISTENT_2)."""
    return gib in (1200, 2400) or (gib > 0 and gib % 2400 == 0)


def lustre_throughput_gb_per_s(capacity_gib: int, mb_per_tib: int) -> float:
    """Total throughput: capacity in TiB times the per-TiB tier, in GB/s (1 GB = 1000 MB)."""
    return capacity_gib / 1024 * mb_per_tib / 1000


def lustre_capacity_for_throughput(target_gb_per_s: float, mb_per_tib: int) -> int:
    """The smallest valid capacity (1200, 2400, then multiples of 2400 GiB) reaching the target."""
    for gib in (1200, 2400):
        if lustre_throughput_gb_per_s(gib, mb_per_tib) >= target_gb_per_s:
            return gib
    # Smallest multiple of 2400 with capacity_gib / 1024 * mb_per_tib >= target * 1000.
    needed_gib = target_gb_per_s * 1000 * 1024 / mb_per_tib
    gib = max(2400, -(-int(needed_gib) // 2400) * 2400)
    while lustre_throughput_gb_per_s(gib, mb_per_tib) < target_gb_per_s:
        gib += 2400
    return gib


RepositoryEvent = Literal["new", "changed", "deleted"]


def _all_events() -> list[RepositoryEvent]:
    return ["new", "changed", "deleted"]


def _events(value: list[str]) -> list[str]:
    repeated = sorted({e for e in value if value.count(e) > 1})
    if repeated:
        raise ValueError(f"events must be unique, repeated: {', '.join(repeated)}")
    return value


class RepositoryConfig(Model):
    """A data repository association between an S3 prefix of the data bucket and a file system path."""

    s3_prefix: str = Field(description="Prefix in the data bucket, ending in '/', e.g. datasets/.")
    file_system_path: str = Field(description="Directory in the file system, starting with '/', e.g. /datasets.")
    import_events: list[RepositoryEvent] = Field(
        default_factory=_all_events,
        alias="import",
        description="S3 changes imported automatically: new, changed, deleted (default all; [] for none).",
    )
    export_events: list[RepositoryEvent] = Field(
        default_factory=list,
        alias="export",
        description="File system changes exported automatically to S3: new, changed, deleted (default none).",
    )

    @field_validator("s3_prefix")
    @classmethod
    def _s3_prefix(cls, value: str) -> str:
        if not S3_PREFIX_RULE.match(value) or "//" in value:
            raise ValueError(
                f"must be a prefix of the data bucket ending in '/' without a leading '/' or s3://, e.g. datasets/, got {value!r}"
            )
        return value

    @field_validator("file_system_path")
    @classmethod
    def _file_system_path(cls, value: str) -> str:
        if not FILE_SYSTEM_PATH_RULE.match(value) or "//" in value or len(value) > 4096:
            raise ValueError(f"must be an absolute path starting with '/', e.g. /datasets, got {value!r}")
        return value

    @field_validator("import_events", "export_events")
    @classmethod
    def _unique_events(cls, value: list[str]) -> list[str]:
        return _events(value)


class MetadataConfig(Model):
    """Metadata performance of a PERSISTENT_2 file system."""

    mode: Literal["automatic", "user_provisioned"] = Field(default="automatic", description="automatic | user_provisioned.")
    iops: int | None = Field(default=None, description="user_provisioned only: 1500, 3000, 6000, 12000 or multiples of 12000 up to 192000.")

    @model_validator(mode="after")
    def _iops(self) -> MetadataConfig:
        allowed = "1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000"
        if self.mode == "automatic" and self.iops is not None:
            raise Problems([("iops", "only with mode user_provisioned; mode automatic sizes metadata IOPS from the capacity")])
        if self.mode == "user_provisioned":
            if self.iops is None:
                raise Problems([("iops", f"required with mode user_provisioned: {allowed}")])
            if not (self.iops in LUSTRE_METADATA_IOPS_SMALL or (0 < self.iops <= LUSTRE_METADATA_IOPS_MAX and self.iops % 12000 == 0)):
                raise Problems([("iops", f"must be {allowed}, got {self.iops}")])
        return self


class LustreConfig(Model):
    """FSx for Lustre file system (Lustre 2.15) in the compute AZ's subnet.

    Size it by `storage_capacity_gib` or by `target_throughput_gb_per_s` (exclusive): total
    throughput = capacity in TiB x `throughput_mb_per_tib`.
    """

    deployment_type: Literal["persistent_2", "scratch_2"] = Field(
        default="persistent_2", description="persistent_2 (replicated, KMS, backups) | scratch_2 (cheap dev scratch)."
    )
    storage_capacity_gib: int | None = Field(default=None, description="1200, 2400 or a multiple of 2400 GiB.")
    target_throughput_gb_per_s: float | None = Field(
        default=None, allow_inf_nan=False, description="persistent_2: total GB/s wanted; derives the smallest valid capacity."
    )
    throughput_mb_per_tib: int | None = Field(default=None, description="persistent_2: 125, 250, 500 or 1000 (default 500).")
    efa: bool = Field(default=False, description="persistent_2: EFA-enabled file system (cannot be changed later).")
    compression: Literal["lz4", "none"] = Field(default="lz4", description="lz4 | none.")
    metadata: MetadataConfig | None = Field(default=None, description="persistent_2: metadata IOPS (default mode automatic).")
    backup_retention_days: int = Field(
        default=0, ge=0, le=90, description="persistent_2 without repositories: daily automatic backups kept (0: none)."
    )
    repositories: list[RepositoryConfig] = Field(default_factory=list, description="Data repository associations (at most 8).")

    @field_validator("throughput_mb_per_tib")
    @classmethod
    def _tier(cls, value: int | None) -> int | None:
        if value is not None and value not in LUSTRE_THROUGHPUT_TIERS_MB_PER_TIB:
            raise ValueError(f"must be 125, 250, 500 or 1000 (MB/s per TiB, persistent_2), got {value}")
        return value

    @model_validator(mode="after")
    def _rules(self) -> LustreConfig:
        problems: list[tuple[str, str]] = []
        persistent = self.deployment_type == "persistent_2"
        if self.storage_capacity_gib is not None and self.target_throughput_gb_per_s is not None:
            problems.append(
                ("target_throughput_gb_per_s", "storage_capacity_gib and target_throughput_gb_per_s exclude each other; give one")
            )
        elif self.storage_capacity_gib is None and self.target_throughput_gb_per_s is None:
            problems.append(
                ("storage_capacity_gib", "give storage_capacity_gib (1200, 2400 or a multiple of 2400) or target_throughput_gb_per_s")
            )
        if self.storage_capacity_gib is not None and not lustre_capacity_valid(self.storage_capacity_gib):
            problems.append(("storage_capacity_gib", f"must be 1200, 2400 or a multiple of 2400 GiB, got {self.storage_capacity_gib}"))
        if self.target_throughput_gb_per_s is not None and self.target_throughput_gb_per_s <= 0:
            problems.append(("target_throughput_gb_per_s", f"must be greater than 0 GB/s, got {self.target_throughput_gb_per_s}"))
        if not persistent:
            # scratch_2 takes only capacity, compression and repositories.
            for field, given in (
                ("target_throughput_gb_per_s", self.target_throughput_gb_per_s is not None),
                ("throughput_mb_per_tib", self.throughput_mb_per_tib is not None),
                ("efa", self.efa),
                ("metadata", self.metadata is not None),
                ("backup_retention_days", self.backup_retention_days > 0),
            ):
                if given:
                    problems.append(
                        (
                            field,
                            "only with deployment_type persistent_2; scratch_2 takes only storage_capacity_gib, compression and repositories",
                        )
                    )
        if persistent and self.backup_retention_days > 0 and self.repositories:
            problems.append(
                (
                    "backup_retention_days",
                    "must be 0 when repositories are set: FSx backs up only file systems not linked to S3 (the versioned bucket holds the durable copy)",
                )
            )
        if len(self.repositories) > LUSTRE_MAX_REPOSITORIES:
            problems.append(
                (
                    "repositories",
                    f"at most {LUSTRE_MAX_REPOSITORIES} data repository associations per file system, got {len(self.repositories)}",
                )
            )
        problems.extend(self._overlaps())
        _raise_problems(problems)
        if persistent and self.metadata is None:
            self.metadata = MetadataConfig()
        return self

    def _overlaps(self) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        for field, norm in (("file_system_path", lambda p: p.rstrip("/") + "/"), ("s3_prefix", lambda p: p)):
            for j, later in enumerate(self.repositories):
                for i in range(j):
                    a, b = norm(getattr(self.repositories[i], field)), norm(getattr(later, field))
                    if a.startswith(b) or b.startswith(a):
                        problems.append(
                            (
                                f"repositories[{j}].{field}",
                                f"{getattr(later, field)!r} overlaps repositories[{i}].{field} {getattr(self.repositories[i], field)!r}; "
                                f"{field} of repositories must not overlap",
                            )
                        )
        return problems

    @property
    def persistent(self) -> bool:
        return self.deployment_type == "persistent_2"

    @property
    def mb_per_tib(self) -> int:
        """The per-TiB throughput: the tier (persistent_2) or the SCRATCH_2 baseline."""
        if not self.persistent:
            return LUSTRE_SCRATCH_2_BASELINE_MB_PER_TIB
        return self.throughput_mb_per_tib or LUSTRE_DEFAULT_THROUGHPUT_MB_PER_TIB

    @property
    def capacity_gib(self) -> int:
        """The capacity given, or the smallest valid one reaching target_throughput_gb_per_s."""
        if self.storage_capacity_gib is not None:
            return self.storage_capacity_gib
        assert self.target_throughput_gb_per_s is not None  # the validator requires one of them
        return lustre_capacity_for_throughput(self.target_throughput_gb_per_s, self.mb_per_tib)

    @property
    def throughput_gb_per_s(self) -> float:
        return lustre_throughput_gb_per_s(self.capacity_gib, self.mb_per_tib)

    def warnings(self) -> list[tuple[str, str]]:
        """Problems that do not reject the config (relative paths, messages)."""
        out: list[tuple[str, str]] = []
        if self.efa:
            step = LUSTRE_EFA_CAPACITY_STEP_GIB[self.mb_per_tib]
            if self.capacity_gib % step:
                field = "storage_capacity_gib" if self.storage_capacity_gib is not None else "target_throughput_gb_per_s"
                out.append(
                    (
                        field,
                        f"an EFA-enabled file system at {self.mb_per_tib} MB/s/TiB grows in steps of {step} GiB; "
                        f"{self.capacity_gib} GiB is not a multiple (documented for increases only, so creation may still succeed)",
                    )
                )
        return out


class BucketConfig(Model):
    """The data bucket: created by the Data stack, or an existing one."""

    name: str | None = Field(default=None, description="Bucket name; default fminfra-ENV-data-ACCOUNT-REGION. Required with existing.")
    existing: bool = Field(default=False, description="true: use the existing bucket `name` instead of creating one.")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and (not BUCKET_NAME_RULE.match(value) or ".." in value):
            raise ValueError(
                f"must be an S3 bucket name: 3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit, got {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _existing(self) -> BucketConfig:
        if self.existing and self.name is None:
            raise Problems([("name", "required with existing: true (the name of the bucket to use)")])
        return self


class StorageConfig(Model):
    """The data bucket, the KMS key and the FSx for Lustre file system."""

    bucket: BucketConfig = Field(default_factory=BucketConfig)
    encryption: Literal["kms", "s3"] = Field(
        default="kms",
        description="kms: a rotating customer-managed key for the bucket and the persistent file system; s3: SSE-S3 and FSx's AWS-managed key.",
    )
    lustre: LustreConfig | None = Field(default=None, description="Omitted: no file system.")

    @model_validator(mode="after")
    def _key_has_a_use(self) -> StorageConfig:
        if self.encryption == "kms" and self.bucket.existing and not (self.lustre and self.lustre.persistent):
            raise Problems(
                [
                    (
                        "encryption",
                        "kms creates a key for a created bucket or a persistent_2 file system; with an existing bucket "
                        "and no persistent_2 file system it would encrypt nothing: use s3 (the existing bucket keeps its own encryption)",
                    )
                ]
            )
        return self

    def bucket_name(self, cfg: EnvironmentConfig) -> str:
        """The bucket's name: given, or fminfra-ENV-data-ACCOUNT-REGION (bucket names are global)."""
        return self.bucket.name or cfg.physical_name("data", cfg.account, cfg.region)

    def warnings(self) -> list[tuple[str, str]]:
        return [(f"lustre.{path}", msg) for path, msg in (self.lustre.warnings() if self.lustre else [])]


# Identity Center (identitystore) group ids, as botocore's ResourceId pattern has them.
IDENTITY_STORE_GROUP_ID_RULE = re.compile(r"^([0-9a-f]{10}-|)[A-Fa-f0-9]{8}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{12}$")
EMAIL_RULE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
SNS_TOPIC_ARN_RULE = re.compile(r"^arn:aws[a-z-]*:sns:(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):[A-Za-z0-9_-]{1,256}$")


class GrafanaConfig(Model):
    """Amazon Managed Grafana. Authentication through IAM Identity Center, which must be enabled
    in the account (or its organization) before the workspace is deployed."""

    enabled: bool = Field(default=False, description="true: an AMG workspace reading the AMP workspace and CloudWatch.")
    auth: Literal["sso"] = Field(default="sso", description="sso: IAM Identity Center (the only option for now).")
    admin_group_ids: list[str] = Field(default_factory=list, description="Identity Center group ids made Grafana admins by `grafana sync`.")

    @field_validator("admin_group_ids")
    @classmethod
    def _group_ids(cls, value: list[str]) -> list[str]:
        problems = [
            (
                f"[{i}]",
                f"must be an Identity Center group id such as 1234567890-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d or 0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, got {gid!r}",
            )
            for i, gid in enumerate(value)
            if not IDENTITY_STORE_GROUP_ID_RULE.match(gid)
        ]
        _raise_problems(problems)
        if len(set(value)) != len(value):
            raise ValueError("group ids must be unique")
        return value

    @model_validator(mode="after")
    def _groups_need_grafana(self) -> GrafanaConfig:
        if self.admin_group_ids and not self.enabled:
            raise Problems([("admin_group_ids", "only used with enabled: true; set enabled: true or remove the group ids")])
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
        problems = [
            (f"[{i}]", f"must be an email address such as oncall@example.com, got {e!r}")
            for i, e in enumerate(value)
            if not EMAIL_RULE.match(e)
        ]
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
    scrape_interval_seconds: int = Field(default=30, ge=5, le=300, description="How often exporters are scraped.")

    @model_validator(mode="after")
    def _grafana_needs_prometheus(self) -> ObservabilityConfig:
        if self.grafana.enabled and not self.prometheus:
            raise Problems(
                [("grafana.enabled", "Grafana's dashboards query the AMP workspace; set prometheus: true or grafana.enabled: false")]
            )
        return self


# --------------------------------------------------------------------------------------------
# environment


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

    _account = field_validator("account", mode="before")(check_account)
    _region = field_validator("region")(check_region)

    @model_validator(mode="after")
    def _cross_section(self) -> EnvironmentConfig:
        problems: list[tuple[str, str]] = []
        prefix = AZ_ID_PREFIX_BY_REGION[self.region]
        for i, az in enumerate(self.network.az_ids):
            owner = region_of_az_id(az)
            if owner != self.region:
                where = f"belongs to {owner}" if owner else "belongs to no known region"
                problems.append((f"network.az_ids[{i}]", f"{az!r} {where}, not {self.region} (its AZ IDs start with {prefix}-)"))
        if self.compute.needs_eks and len(self.network.az_ids) < 2:
            problems.append(("network.az_ids", "EKS needs subnets in at least two AZs; list at least two AZ IDs"))
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

    def warnings(self) -> list[tuple[str, str]]:
        """Problems that do not reject the config: (field path, message); validate and plan print them."""
        return [(f"storage.{path}", msg) for path, msg in (self.storage.warnings() if self.storage else [])]


# --------------------------------------------------------------------------------------------
# loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def resolve_config_path(arg: str, config_dir: Path | None = None) -> Path:
    """A config argument: a file path, or an environment name meaning config/NAME.yaml."""
    path = Path(arg)
    if path.suffix in (".yaml", ".yml") or path.exists() or "/" in arg:
        return path
    return (config_dir or Path("config")) / f"{arg}.yaml"


def _loc_to_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith("["):
            out += part
        else:
            out += f".{part}" if out else part
    return out


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class a location points into (for listing allowed field names)."""
    current: Any = EnvironmentConfig
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = next((f for n, f in current.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return None
        current = _unwrap(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    while get_origin(annotation) is not None:
        args = [a for a in get_args(annotation) if a is not type(None)]
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if models:
            return models[0]
        if get_origin(annotation) is dict:
            annotation = args[-1]
        elif args:
            annotation = args[0]
        else:
            return None
    return annotation


def _format_pydantic_errors(file: str, exc: PydanticValidationError) -> list[str]:
    lines: list[str] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        error = (err.get("ctx") or {}).get("error")
        if isinstance(error, Problems):
            for rel, msg in error.problems:
                rel_loc: tuple[int | str, ...] = tuple(p for p in re.split(r"\.(?![^\[]*\])", rel) if p) if rel else ()
                lines.append(f"{file}: {_loc_to_path(loc + rel_loc) or '(top level)'}: {msg}")
            continue
        if err["type"] == "extra_forbidden":
            model = _model_at(loc[:-1])
            allowed = ", ".join(f.alias or n for n, f in model.model_fields.items()) if model else "see `python -m fminfra schema`"
            lines.append(f"{file}: {_loc_to_path(loc)}: unknown field (allowed here: {allowed})")
            continue
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        elif err["type"] == "missing":
            msg = "required field is missing"
        else:
            given = err.get("input")
            if isinstance(given, (str, int, float, bool)) or given is None:
                msg += f", got {given!r}"
        lines.append(f"{file}: {_loc_to_path(loc) or '(top level)'}: {msg}")
    return lines


def parse_config(data: Any, file: str = "<config>") -> EnvironmentConfig:
    """Validate already-parsed YAML data; ConfigError with one line per problem."""
    if not isinstance(data, dict):
        raise ConfigError([f"{file}: (top level): must be a mapping of config sections, got {type(data).__name__}"])
    try:
        return EnvironmentConfig.model_validate(data)
    except PydanticValidationError as exc:
        raise ConfigError(_format_pydantic_errors(file, exc)) from None


def load_config(path: str | Path) -> EnvironmentConfig:
    """Read and validate one environment file; ConfigError with one line per problem."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{file}: (file): no such file"]) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{file}: (file): cannot read: {exc}"]) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(yaml)"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{file}: {where}: invalid YAML: {problem}"]) from None
    return parse_config(data, file)


def format_warnings(file: str | Path, cfg: EnvironmentConfig) -> list[str]:
    """The config's warnings, one line each: `FILE: field.path: warning: message`."""
    return [f"{file}: {path}: warning: {msg}" for path, msg in cfg.warnings()]


def config_files(config_dir: Path) -> list[Path]:
    """The environment files of a folder, in name order."""
    return sorted([*config_dir.glob("*.yaml"), *config_dir.glob("*.yml")])
