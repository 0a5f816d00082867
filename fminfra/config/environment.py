"""One environment file: the top-level model that holds every section, and the cross-section rules."""

from __future__ import annotations

import math
from datetime import date
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from fminfra.capacity.rules import TRAINING_PLAN_ARN_RULE
from fminfra.compute.config import ComputeConfig
from fminfra.compute.rules import ec2_region_problem
from fminfra.config.defaults import apply_defaults
from fminfra.core.config_base import Model, _raise_problems, check_account, check_region
from fminfra.core.findings import Finding, error, warning
from fminfra.core.regional import (
    SERVICE_NAMES,
    cdk_validate_refuses,
    compute_quota_sources,
    ec2_offers,
    ec2_types_anywhere,
    ec2_types_in,
    hyperpod_types_anywhere,
    hyperpod_types_in,
    regions_offering,
    regions_offering_any_ec2,
    regions_offering_ec2,
    resource_types_in,
)
from fminfra.core.regions import az_id_problem
from fminfra.core.rules import ENVIRONMENT_NAME, TAG_CHARS_RULE, TAG_COUNT_MAX, TAG_KEY_MAX, TAG_VALUE_MAX
from fminfra.eks.rules import CORE_ADDONS, NODEGROUP_NAME_MAX, addon_taken_problem, installed_addons, team_queue
from fminfra.hyperpod.rules import HEALTH_MONITORING_AGENT_REGIONS
from fminfra.network.config import NetworkConfig
from fminfra.observability.config import ObservabilityConfig
from fminfra.observability.rules.inputs import SNS_TOPIC_ARN_RULE, empty_stack_problem
from fminfra.serving.config import ServingConfig
from fminfra.serving.rules import parallelism_problems, replica_shape, replicas_per_node
from fminfra.storage.config import StorageConfig
from fminfra.storage.rules import FSX_MOUNT
from fminfra.topology.rules import topology_in_region


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
    serving: ServingConfig | None = Field(default=None, description="Models served on the EKS cluster (docs/serving.md). Omitted: none.")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if problem := ENVIRONMENT_NAME.problem(value):
            raise ValueError(problem)
        return value

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: dict[str, str]) -> dict[str, str]:
        # docs/facts/pipeline.md#aws-tag-restrictions
        problems: list[Finding] = []
        for key, tag_value in value.items():
            if not 1 <= len(key) <= TAG_KEY_MAX:
                problems.append(error(f"[{key[:40]!r}]", f"a tag key has 1 to {TAG_KEY_MAX} characters, got {len(key)}"))
            elif key.lower().startswith("aws:"):
                problems.append(error(f"[{key!r}]", "tag keys starting with aws: are reserved for AWS"))
            elif not TAG_CHARS_RULE.match(key):
                problems.append(error(f"[{key!r}]", "a tag key may hold letters, digits, spaces and _ . : / = + - @"))
            if not 1 <= len(tag_value) <= TAG_VALUE_MAX:
                problems.append(error(f"[{key[:40]!r}]", f"a tag value has 1 to {TAG_VALUE_MAX} characters, got {len(tag_value)}"))
            elif not TAG_CHARS_RULE.match(tag_value):
                problems.append(error(f"[{key[:40]!r}]", "a tag value may hold letters, digits, spaces and _ . : / = + - @"))
        if len(value) > TAG_COUNT_MAX:
            problems.append(error("", f"at most {TAG_COUNT_MAX} tags, got {len(value)}"))
        _raise_problems(problems)
        return value

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        return apply_defaults(data)

    _account = field_validator("account", mode="before")(check_account)
    _region = field_validator("region")(check_region)

    @model_validator(mode="after")
    def _cross_section(self) -> EnvironmentConfig:
        problems: list[Finding] = []
        for i, az in enumerate(self.network.az_ids):
            if problem := az_id_problem(az, self.region):
                problems.append(error(f"network.az_ids[{i}]", problem))
        problems.extend(self._regional_problems())
        if self.compute.needs_eks and len(self.network.az_ids) < 2:
            problems.append(error("network.az_ids", "EKS needs subnets in at least two AZs; list at least two AZ IDs"))
        for i, group in enumerate(self.compute.instance_groups):
            plan = TRAINING_PLAN_ARN_RULE.match(group.capacity.training_plan_arn or "")
            if plan and (plan["account"], plan["region"]) != (self.account, self.region):
                problems.append(
                    error(
                        f"compute.instance_groups[{i}].capacity.training_plan_arn",
                        f"the training plan is in {plan['account']}, {plan['region']}; HyperPod uses plans of its own account and "
                        f"region ({self.account}, {self.region})",
                    )
                )
        if self.compute.eks is not None and self.compute.eks.scheduling.kueue_topology and not topology_in_region(self.region):
            problems.append(
                error(
                    "compute.eks.scheduling.kueue_topology",
                    f"EC2 describes no instance topology in {self.region}, so no node there has network-node-layer labels "
                    "(docs/facts/instances.md#ec2-topology-regions); allowed here: false",
                )
            )
        for i, igroup in enumerate(self.compute.inference_node_groups):
            name = self.physical_name(igroup.name)
            if len(name) > NODEGROUP_NAME_MAX:
                problems.append(
                    error(
                        f"compute.inference_node_groups[{i}].name",
                        f"the node group's EKS name {name!r} is {len(name)} characters; EKS allows at most {NODEGROUP_NAME_MAX} "
                        f"(fminfra-ENV-NAME): shorten the group name to at most {NODEGROUP_NAME_MAX - len(self.physical_name(''))} characters",
                    )
                )
        topic = SNS_TOPIC_ARN_RULE.match(self.observability.alerts.sns_topic_arn or "")
        if topic and (topic["region"], topic["account"]) != (self.region, self.account):
            problems.append(
                error(
                    "observability.alerts.sns_topic_arn",
                    f"CloudWatch alarms and the AMP alert manager publish only to a topic in their own account and region "
                    f"({self.account}, {self.region}), got {topic['account']}, {topic['region']}",
                )
            )
        if self.compute.eks is not None and self.compute.needs_eks:
            installed = installed_addons(
                hyperpod=self.compute.orchestrator == "eks",
                task_governance=bool(self.compute.team_quotas()),
                file_system=self.storage is not None and self.storage.lustre is not None,
            )
            for i, addon in enumerate(self.compute.eks.addons):
                if addon.name not in CORE_ADDONS and (problem := addon_taken_problem(addon.name, installed)):
                    problems.append(error(f"compute.eks.addons[{i}].name", problem))
        obs = self.observability
        if problem := empty_stack_problem(
            prometheus=obs.prometheus,
            emails=obs.alerts.emails,
            existing_topic=obs.alerts.sns_topic_arn is not None,
            file_system=self.storage is not None and self.storage.lustre is not None,
        ):
            problems.append(error("observability.alerts.sns_topic_arn", problem))
        problems.extend(self._serving_problems())
        _raise_problems(problems)
        return self

    def _serving_problems(self) -> list[Finding]:
        """What a served model needs of the other sections: an EKS cluster with the load balancer controller
        (its Service is an internal NLB), an inference node group its parallelism fits, the bucket or the file
        system its weights are in, and AMP where it scales (KEDA queries it)."""
        serving = self.serving
        if serving is None:
            return []
        compute = self.compute
        if not compute.needs_eks or compute.eks is None:
            return [error("serving", "serving runs on the EKS cluster: add compute.inference_node_groups (and compute.eks)")]
        problems: list[Finding] = []
        if not compute.eks.load_balancer_controller:
            problems.append(
                error(
                    "compute.eks.load_balancer_controller", "must be true with serving: each model's endpoint is an internal NLB it creates"
                )
            )
        groups = {g.name: g for g in compute.inference_node_groups}
        teams = {
            team_queue("hyperpod-eks" if compute.orchestrator == "eks" else "eks", t).namespace
            for t in compute.team_quotas() or compute.kueue_quotas()
        }
        if serving.namespace in teams:
            problems.append(
                error("serving.namespace", f"{serving.namespace!r} is a team's namespace, which its queues create; choose another")
            )
        needed_nodes: dict[str, float] = {}
        for i, model in enumerate(serving.models):
            path = f"serving.models[{i}]"
            group = groups.get(model.node_group)
            if group is None:
                allowed = ", ".join(sorted(groups)) or "none (add compute.inference_node_groups)"
                problems.append(
                    error(f"{path}.node_group", f"must name an inference node group, got {model.node_group!r}; allowed: {allowed}")
                )
                continue
            spec = group.spec
            fit = parallelism_problems(
                tensor_parallel=model.tensor_parallel,
                pipeline_parallel=model.pipeline_parallel,
                attention_heads=model.attention_heads,
                hidden_layers=model.hidden_layers,
                gpus_per_node=spec.gpus,
                instance_type=spec.name,
            )
            problems.extend(error(f"{path}.{field}", message) for field, message in fit)
            if not fit:
                shape = replica_shape(model.tensor_parallel, model.pipeline_parallel, spec.gpus)
                nodes = group.max_size if compute.karpenter else group.desired_size
                needed_nodes[group.name] = needed_nodes.get(group.name, 0) + model.replicas.min / replicas_per_node(shape, spec.gpus)
                needed = math.ceil(needed_nodes[group.name] - 1e-9)
                if needed > nodes:
                    problems.append(
                        error(
                            f"{path}.replicas.min",
                            f"the minimum replicas on node group {group.name!r} ({spec.gpus} GPUs per {spec.name} node) need {needed} "
                            f"nodes; the group has {nodes} ({'max_size' if compute.karpenter else 'desired_size'})",
                        )
                    )
            if model.weights.source == "s3" and self.storage is None:
                problems.append(error(f"{path}.weights.source", "s3 reads the environment's data bucket: add a storage section"))
            if model.weights.source == "fsx" and (self.storage is None or self.storage.lustre is None):
                problems.append(error(f"{path}.weights.source", "fsx reads the environment's file system: add storage.lustre"))
            elif model.weights.source == "fsx" and self.storage is not None and self.storage.lustre is not None:
                problems.extend(self._fsx_weights_problems(f"{path}.weights.path", model.weights.path))
            if model.replicas.max > model.replicas.min and not self.observability.prometheus:
                problems.append(
                    error(
                        f"{path}.replicas.max",
                        "scaling (max above min) queries the servers' queue in AMP: set observability.prometheus: true or max equal to min",
                    )
                )
        return problems

    def _fsx_weights_problems(self, path: str, folder: str) -> list[Finding]:
        """Weights on FSx come from the bucket through a data repository association, loaded on first read
        (docs/facts/serving.md#fsx-lazy-load-preload): the folder must lie under one."""
        assert self.storage is not None and self.storage.lustre is not None
        linked = [f"{FSX_MOUNT}{r.file_system_path.rstrip('/')}" for r in self.storage.lustre.repositories]
        if any(folder == d or folder.startswith(f"{d}/") for d in linked):
            return []
        allowed = ", ".join(f"{d}/..." for d in linked) or "none (add storage.lustre.repositories)"
        return [
            error(
                path,
                f"must lie under a data repository association's folder, which links it to the bucket, got {folder!r}; allowed: {allowed}",
            )
        ]

    @property
    def serving_gate_access(self) -> bool:
        """Whether the acceptance role may read the serving namespace's Services: `serving.gate_access`, or HyperPod
        EKS's acceptance access (`compute.eks.accept_access`), whose access entry the serving Role binds to as well."""
        return self.serving is not None and (self.serving.gate_access or bool(self.compute.eks and self.compute.eks.accept_access))

    def serving_surges(self, model_name: str) -> bool:
        """Whether a rolling update of the model can start a new replica beside the old ones: its node group holds
        every model's `replicas.max` and one replica more (nodes: Karpenter's max_size, a managed group's
        desired_size). If not, fminfra's Deployment replaces one replica at a time, in place."""
        assert self.serving is not None
        models = {m.name: m for m in self.serving.models}
        groups = {g.name: g for g in self.compute.inference_node_groups}
        model = models[model_name]
        group = groups[model.node_group]
        gpus = group.spec.gpus
        nodes = group.max_size if self.compute.karpenter else group.desired_size
        used = 0.0
        for m in self.serving.models:
            if m.node_group == group.name:
                used += m.replicas.max / replicas_per_node(replica_shape(m.tensor_parallel, m.pipeline_parallel, gpus), gpus)
        one_more = 1 / replicas_per_node(replica_shape(model.tensor_parallel, model.pipeline_parallel, gpus), gpus)
        return used + one_more <= nodes + 1e-9

    def _serving_warnings(self) -> list[Finding]:
        """A multi-node replica without EFA (a type with no EFA, or a G type fminfra attaches none to) talks over
        TCP; a maximum the node group cannot hold stays pending; a managed node group does not grow for it."""
        if self.serving is None:
            return []
        out: list[Finding] = []
        groups = {g.name: g for g in self.compute.inference_node_groups}
        for i, model in enumerate(self.serving.models):
            group = groups.get(model.node_group)
            if group is None:
                continue
            spec = group.spec
            shape = replica_shape(model.tensor_parallel, model.pipeline_parallel, spec.gpus)
            path = f"serving.models[{i}]"
            if shape.multi_node and not spec.training:
                out.append(
                    warning(
                        f"{path}.pipeline_parallel",
                        f"a replica spans {shape.nodes} {spec.name} nodes, which get no EFA interfaces: its stages talk over TCP",
                    )
                )
            if shape.multi_node and self.serving.image is not None and spec.training:
                out.append(
                    warning(
                        "serving.image",
                        f"{model.name} spans {shape.nodes} nodes over EFA: the image must carry libfabric and aws-ofi-nccl "
                        "(fminfra's default builds them in: docs/serving.md#images)",
                    )
                )
            if not shape.multi_node and not self.serving_surges(model.name):
                out.append(
                    warning(
                        f"{path}.replicas.max",
                        f"node group {group.name!r} has no room for one more replica at replicas.max: a rolling update replaces "
                        "one replica at a time in place, and that replica serves nothing meanwhile (with one replica: an outage)",
                    )
                )
            if model.replicas.max > model.replicas.min and not self.compute.karpenter:
                out.append(
                    warning(
                        f"{path}.replicas.max",
                        f"node group {group.name!r} is a managed node group of fixed size (desired_size {group.desired_size}): "
                        "replicas beyond its nodes stay pending; compute.eks.karpenter starts nodes for them",
                    )
                )
        return out

    def _regional_problems(self) -> list[Finding]:
        """Services and HyperPod instance types the region does not offer (docs/facts/network.md#regional-availability)."""
        problems: list[Finding] = []
        available = resource_types_in(self.region)
        if available is not None:
            needed = {"AWS::EC2::CapacityReservation": any(g.capacity.type == "odcr" for g in self.compute.instance_groups)}
            needed["AWS::SageMaker::Cluster"] = self.compute.hyperpod
            needed["AWS::EKS::Cluster"] = self.compute.needs_eks
            needed["AWS::FSx::FileSystem"] = bool(self.storage and self.storage.lustre)
            needed["AWS::APS::Workspace"] = self.observability.prometheus
            needed["AWS::APS::Scraper"] = self.observability.prometheus and self.compute.needs_eks
            needed["AWS::Grafana::Workspace"] = self.observability.grafana.enabled
            # Task governance's resources. Two sources on compute quotas disagree by region (cfn-lint's per-region
            # resource types and the resource schema's description; docs/facts/hyperpod.md#hyperpod-compute-quota-schema):
            # left at its default (fminfra/config/defaults.py), task governance is on only where both offer them (off elsewhere, a warning); asked
            # for (task_governance, teams or priority_classes named), each type is refused where cfn-lint's list, the
            # gate's, lacks it (a warning where only the description does). Cluster policies go with the quotas.
            scheduling = self.compute.eks.scheduling if self.compute.eks is not None else None
            governed = {
                "AWS::SageMaker::ComputeQuota": ("compute.eks.scheduling.task_governance", bool(self.compute.team_quotas())),
                "AWS::SageMaker::ClusterSchedulerConfig": (
                    "compute.eks.scheduling.priority_classes",
                    bool(self.compute.team_quotas()) and bool(scheduling and scheduling.priority_classes),
                ),
            }
            for resource_type, (path, used) in governed.items():
                # cfn-lint's list for the region is the gate's (E3006): a type it lacks fails `fminfra gate` there
                if used and resource_type not in available:
                    problems.append(
                        error(
                            path,
                            f"{SERVICE_NAMES[resource_type]} ({resource_type}) are not in cfn-lint's CloudFormation resource "
                            f"types for {self.region} (`fminfra gate` fails on E3006 there); regions that offer them: "
                            + ", ".join(regions_offering(resource_type))
                            + "; allowed here: "
                            + ("task_governance: false" if path.endswith("task_governance") else "no priority_classes"),
                        )
                    )
            for resource_type, used in needed.items():
                if used and resource_type not in available:
                    problems.append(
                        error(
                            "region",
                            f"{SERVICE_NAMES[resource_type]} ({resource_type}) is not offered in {self.region}; choose another region",
                        )
                    )
        # ec2 training groups bought on demand (on-demand, odcr): the price list's On-Demand offer per region
        # (docs/facts/network.md#regional-availability). Reservations and Capacity Blocks prove their own capacity;
        # a type in no region's list (p6e-gb200, in a Local Zone) is not judged.
        ec2_offered = None if self.compute.hyperpod else ec2_types_in(self.region)
        for i, group in enumerate(self.compute.instance_groups if ec2_offered is not None else []):
            name = group.spec.name
            if group.capacity.type in ("on-demand", "odcr") and name not in (ec2_offered or ()) and name in ec2_types_anywhere():
                problems.append(
                    error(f"compute.instance_groups[{i}].instance_type", ec2_region_problem(name, self.region, regions_offering_ec2(name)))
                )
        # EKS node groups (inference groups, the system nodes) are EC2 instances whatever the orchestrator:
        # the same list, for every type (docs/facts/network.md#regional-availability). Reserved capacity
        # proves its own; a type no region lists is not judged.
        eks_types = [
            (f"compute.inference_node_groups[{i}].instance_type", g.spec.name)
            for i, g in enumerate(self.compute.inference_node_groups)
            if g.capacity.type in ("on-demand", "odcr")
        ]
        if self.compute.needs_eks and self.compute.eks is not None and self.compute.system_node_count():
            eks_types.append(("compute.eks.system_nodes.instance_type", self.compute.eks.system_nodes.instance_type))
        for path, name in eks_types:
            if ec2_offers(self.region, name) is False:
                problems.append(error(path, ec2_region_problem(name, self.region, regions_offering_any_ec2(name))))
        offered = hyperpod_types_in(self.region) if self.compute.hyperpod else None
        if offered:
            named = [
                (f"compute.instance_groups[{i}].instance_type", g.spec.hyperpod_name) for i, g in enumerate(self.compute.instance_groups)
            ]
            if self.compute.slurm is not None and self.compute.orchestrator == "slurm":
                named.append(("compute.slurm.controller.instance_type", self.compute.slurm.controller.instance_type))
                if self.compute.slurm.login.count:
                    named.append(("compute.slurm.login.instance_type", self.compute.slurm.login.instance_type))
            gpu_offered = sorted(t for t in offered if t.startswith(("ml.p", "ml.g")))
            for path, instance_type in named:
                name = instance_type if instance_type.startswith("ml.") else f"ml.{instance_type}"
                if name not in offered and name in hyperpod_types_anywhere():
                    problems.append(
                        error(
                            path, f"{name} is not offered by HyperPod in {self.region}; GPU types offered there: {', '.join(gpu_offered)}"
                        )
                    )
                elif name not in offered and cdk_validate_refuses(self.region, name):
                    # in no region's list, and refused by the CDK's own validation in this one: synth would fail
                    # (docs/facts/hyperpod.md#cdk-validate-hyperpod-instance-types)
                    problems.append(
                        error(
                            path,
                            f"{name} is in no region's HyperPod list and the CDK's own template validation (run by cdk synth) "
                            f"refuses it in {self.region}; GPU types offered there: {', '.join(gpu_offered)}",
                        )
                    )
        return problems

    def _task_governance_warnings(self) -> list[Finding]:
        """Where task governance is off for want of compute quotas, or asked for where the two sources on them
        disagree (docs/facts/hyperpod.md#hyperpod-compute-quota-schema); a type cfn-lint's list for the region
        lacks is refused instead (_regional_problems), as the gate would."""
        scheduling = self.compute.eks.scheduling if self.compute.eks is not None else None
        quotas = compute_quota_sources(self.region)
        if self.compute.orchestrator != "eks" or scheduling is None or quotas is None:
            return []
        out: list[Finding] = []
        path = "compute.eks.scheduling.task_governance"
        used = bool(self.compute.team_quotas())
        if not used and not quotas.either:
            out.append(
                warning(
                    path,
                    f"HyperPod task governance compute quotas (AWS::SageMaker::ComputeQuota) are not offered in {self.region}: "
                    "no team queues and no all-or-nothing admission on this cluster",
                )
            )
        elif not used and not quotas.both:
            out.append(
                warning(
                    path,
                    f"task governance is off ({quotas.disagreement(self.region)}; it is on by default only where both list "
                    "it): no team queues and no all-or-nothing admission on this cluster"
                    + (
                        ". Set task_governance: true to try it (the stack fails to deploy if CloudFormation lacks the type there)"
                        if quotas.provider
                        else ""
                    ),
                )
            )
        elif used and not quotas.both:
            out.append(
                warning(
                    path,
                    f"{quotas.disagreement(self.region)}; the compute quotas may fail to deploy here (set task_governance: false "
                    "if they do)",
                )
            )
        return out

    # Names used for physical resources: every one includes the environment name.
    def physical_name(self, *parts: str) -> str:
        return "-".join(("fminfra", self.name, *parts))

    def warnings(self, today: date | None = None) -> list[Finding]:
        """Problems that do not reject the config: (field path, message); validate and plan print them.
        `today` (default: the current UTC date) dates the Kubernetes support warning."""
        out = [f.under("compute") for f in self.compute.warnings(today)]
        if self.compute.orchestrator == "eks" and self.region not in HEALTH_MONITORING_AGENT_REGIONS:
            out.append(
                warning(
                    "region",
                    f"HyperPod's dependency chart has no health-monitoring agent image in {self.region}; it pulls us-east-1's "
                    f"(regions with one: {', '.join(HEALTH_MONITORING_AGENT_REGIONS)})",
                )
            )
        out.extend(self._task_governance_warnings())
        out.extend(self._serving_warnings())
        return out + [f.under("storage") for f in (self.storage.warnings() if self.storage else [])]
