"""Where a training team's jobs queue on an EKS-based cluster: the contract between the scheduling
resources fminfra creates (task governance on HyperPod EKS, Kueue on EKS without HyperPod) and the
jobs it submits (`fminfra accept`). Both sides call `team_queue`; neither spells the names itself.

On HyperPod EKS, task governance creates, per team (compute quota), the namespace
`hyperpod-ns-<team>` and the Kueue LocalQueue `hyperpod-ns-<team>-localqueue` in it; jobs carry
the label `kueue.x-k8s.io/queue-name` with that queue (docs/facts/hyperpod.md#hyperpod-task-governance-names:
AWS's task governance CLI examples, the ComputeQuota schema and the HyperPod CLI's constants agree).
On EKS without HyperPod fminfra's own Kueue queues use the team's name as the namespace and
`<team>-localqueue` as the LocalQueue.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fminfra.core.rules import Pattern, one_of_problem

DEFAULT_TEAM = "training"  # the one team of the default config: a queue holding all training GPUs
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Namespaces a team of fminfra's own Kueue (EKS without HyperPod, namespace = team name) may not take:
# Kubernetes' own, Kueue's, and the one fminfra's exporters use.
RESERVED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", "kueue-system", "monitoring")
# The label every node carries with its EC2 instance type (docs/facts/eks.md#k8s-instance-type-label).
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# Kubernetes names: a DNS-1123 label (namespaces, jobs) of at most 63 characters; a label value of at most 63.
DNS_LABEL_MAX = 63
DNS_LABEL = Pattern(
    rf"^[a-z0-9]([-a-z0-9]{{0,{DNS_LABEL_MAX - 2}}}[a-z0-9])?$",
    f"a DNS label: 1-{DNS_LABEL_MAX} lowercase letters, digits and '-', starting and ending with a letter or digit",
)
LABEL_VALUE_MAX = 63
# Kubernetes label keys: an optional DNS-subdomain prefix (<= 253) and "/", then a name of 1-63
# alphanumerics, "-", "_", "." beginning and ending alphanumeric; values: the name form or empty
# (docs/facts/eks.md#kubernetes-label-syntax). Taint keys and values follow the same rules.
_K8S_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
K8S_KEY_RULE = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_K8S_NAME}$")
K8S_VALUE_RULE = re.compile(rf"^({_K8S_NAME})?$")
K8S_PREFIX_MAX = 253
# An IAM role or user that may administer a cluster (EKS access entries): not an STS session,
# which EKS refuses as a principal, nor a group, which is no principal
# (docs/facts/eks.md#eks-access-entry-principal).
IAM_PRINCIPAL_ARN_RULE = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/.+$")
_ASSUMED_ROLE = re.compile(r"^arn:(aws[a-z-]*):sts::([0-9]{12}):assumed-role/([^/]+)/.+$")


def principal_arn_problem(arn: str) -> str | None:
    """What is wrong with an access entry's principal ARN, or None."""
    if IAM_PRINCIPAL_ARN_RULE.match(arn):
        return None
    if session := _ASSUMED_ROLE.match(arn):
        partition, account, role = session.groups()
        return (
            f"must be an IAM role or user ARN; {arn!r} is an STS session, which EKS access entries refuse: use the role's ARN "
            f"(arn:{partition}:iam::{account}:role/{role}, with the role's path if it has one)"
        )
    return f"must be an IAM role or user ARN (arn:aws:iam::ACCOUNT:role/NAME or user/NAME; not a group or an STS session), got {arn!r}"


# `validate` and `plan` warn this many days before a version leaves EKS standard support (EKS
# announces the end at least 60 days ahead: docs/facts/eks.md#eks-standard-support-notice).
SUPPORT_END_WARNING_DAYS = 60


def unquoted_version_problem(value: float) -> str:
    """A Kubernetes version YAML read as a number: 1.30 unquoted is the float 1.3."""
    return f'must be a quoted string such as "1.34": YAML reads an unquoted version as a number (1.30 becomes 1.3), got {value!r}'


def open_endpoint_problem(cidr: str) -> str:
    """A public API endpoint CIDR that admits every address: legal, and only authentication stands
    between the internet and the cluster's Kubernetes API."""
    return (
        f"{cidr} opens the cluster's public Kubernetes API endpoint to every address on the internet (only IAM authentication "
        "stands in the way); list the CIDRs of your networks and CI runners, or [] for a private endpoint"
    )


# The taint an inference node group gets when its config lists none (InferenceNodeGroup's default).
DEFAULT_GPU_TAINT = ("nvidia.com/gpu", "true", "NoSchedule")
# Effects that keep pods without a matching toleration (CoreDNS among them) off a node.
REPELLING_EFFECTS = ("NoSchedule", "NoExecute")
# Capacity that ends by itself, so its nodes are no lasting home for CoreDNS and the system controllers:
# a training plan terminates its instances from 30 minutes before its end
# (docs/facts/hyperpod.md#training-plan-reserved-capacity-termination), and EKS scales a Capacity Block
# node group to 0 forty minutes before the block ends (docs/facts/eks.md#eks-capacity-block-scaledown).
ENDING_CAPACITY_TYPES = ("training-plan", "capacity-block")


# Label key prefixes EKS refuses on a managed node group: "Label cannot contain reserved prefixes
# [kubernetes.io/, k8s.io/, eks.amazonaws.com/]", subdomains included (docs/facts/eks.md#eks-nodegroup-reserved-label-prefixes).
RESERVED_LABEL_PREFIXES = ("kubernetes.io/", "k8s.io/", "eks.amazonaws.com/")
# EKS node group names: at most 63 characters (docs/facts/eks.md#eks-nodegroup-name-length).
NODEGROUP_NAME_MAX = 63


def reserved_label_problem(key: str) -> str | None:
    """A managed node group label key EKS refuses for its prefix, or None."""
    prefix = key.split("/", 1)[0] + "/" if "/" in key else ""
    for reserved in RESERVED_LABEL_PREFIXES:
        if prefix == reserved or prefix.endswith("." + reserved):
            return f"key {key!r} has a prefix EKS reserves ({', '.join(RESERVED_LABEL_PREFIXES)}, subdomains included): use a prefix of your own"
    return None


def k8s_problems(key: str, value: str) -> list[str]:
    """What is wrong with a label or taint key and value (docs/facts/eks.md#kubernetes-label-syntax)."""
    problems = []
    prefix = key.split("/", 1)[0] if "/" in key else ""
    if not K8S_KEY_RULE.match(key) or len(prefix) > K8S_PREFIX_MAX:
        problems.append(
            f"key {key!r} is not a Kubernetes key: [prefix/]name, name 1-63 letters, digits, '-', '_', '.' starting and ending alphanumeric"
        )
    if not K8S_VALUE_RULE.match(value):
        problems.append(
            f"value {value!r} of {key!r} is not a Kubernetes value: empty, or 1-63 letters, digits, '-', '_', '.' starting and ending alphanumeric"
        )
    return problems


# Kueue's and task governance's constructs take one queue or quota a team.
TEAMS_REQUIRED = "teams must list at least one team, got none"
# `fminfra accept` on HyperPod EKS needs a team queue (compute.eks.accept_access).
ACCEPT_NEEDS_TEAM = (
    "`fminfra accept` queues its jobs in a task governance team's queue, and this cluster has none; turn task governance "
    "on (eks.scheduling.task_governance: true, with the default team or eks.scheduling.teams; where it is off by default, "
    "validate's warning says why), or set accept_access: false"
)


@dataclass(frozen=True)
class TeamQueue:
    team: str
    namespace: str
    local_queue: str

    @property
    def labels(self) -> dict[str, str]:
        """The labels a job (its top-level object) needs to enter the queue."""
        return {QUEUE_LABEL: self.local_queue}


def team_queue(cluster: Literal["hyperpod-eks", "eks"], team: str = DEFAULT_TEAM) -> TeamQueue:
    if cluster == "hyperpod-eks":
        namespace = f"hyperpod-ns-{team}"
        return TeamQueue(team, namespace, f"{namespace}-localqueue")
    if cluster == "eks":
        return TeamQueue(team, team, f"{team}-localqueue")
    raise ValueError(f"cluster must be 'hyperpod-eks' or 'eks', got {cluster!r}")


# The add-ons a node needs before it can become Ready: the cluster is created without EKS's
# self-managed networking add-ons (bootstrapSelfManagedAddons false), so a node group that starts
# before the VPC CNI fails with NodeCreationFailure (docs/facts/eks.md#eks-nodegroup-after-cni).
NODE_NETWORKING_ADDONS = ("vpc-cni", "kube-proxy")
# Add-ons whose resources the HyperPod dependency chart (or another installer) may already have
# created: AWS's references create them with ResolveConflicts OVERWRITE
# (docs/facts/iam.md#hyperpod-training-operator-role-reference, docs/facts/hyperpod.md#hyperpod-training-operator-namespace).
ADDON_RESOLVE_CONFLICTS = {
    "amazon-sagemaker-hyperpod-training-operator": "OVERWRITE",
    "amazon-sagemaker-hyperpod-taskgovernance": "OVERWRITE",
}
# What EKS bills per cluster hour in standard and in extended support (docs/facts/eks.md#eks-extended-support-price).
STANDARD_SUPPORT_USD_PER_HOUR = 0.10
EXTENDED_SUPPORT_USD_PER_HOUR = 0.60

# --- Add-ons a serving team needs (docs/compute.md#add-ons-fsx-load-balancers-and-your-own) ---
# The FSx for Lustre CSI driver add-on, its CSI driver name, and the claim every fminfra workload
# mounts the environment's file system through, in its own namespace (docs/facts/eks.md#fsx-csi-static-provisioning).
FSX_CSI_ADDON = "aws-fsx-csi-driver"
FSX_CSI_DRIVER = "fsx.csi.aws.com"
FSX_CLAIM_NAME = "fminfra-fsx"
# The namespace of the claim where no team namespace exists.
FSX_DEFAULT_NAMESPACE = "default"
# The AWS Load Balancer Controller: its release, namespace and service account (the Pod Identity
# association names them), and the subnet tag by which it finds the subnets of an internal load
# balancer (docs/facts/eks.md#chart-aws-load-balancer-controller, #lbc-subnet-discovery-tags).
LBC_RELEASE = "aws-load-balancer-controller"
LBC_NAMESPACE = "kube-system"
LBC_SERVICE_ACCOUNT = "aws-load-balancer-controller"
LBC_SCHEME = "internal"
INTERNAL_ELB_SUBNET_TAG = ("kubernetes.io/role/internal-elb", "1")

# Where an extension (a library user's add-on or chart, or a config's extra EKS add-on) installs:
# after the named fminfra component, and always before fminfra's workloads (the device plugins,
# exporters, Kueue and the FSx volume; HyperPod's dependency chart is not one of them: it installs after
# the VPC CNI and before HyperPod).
EXTENSION_ANCHORS = ("vpc-cni", "core-addons", FSX_CSI_ADDON, LBC_RELEASE)
DEFAULT_EXTENSION_ANCHOR = "core-addons"
# EKS add-on names and builds (botocore's CreateAddon: addonName, addonVersion as EKS lists them).
# Marketplace and community add-ons carry '_' (dynatrace_dynatrace-operator, upbound_universal-crossplane:
# docs/facts/eks.md#eks-addon-names).
ADDON_NAME = Pattern(
    r"^[a-z0-9][a-z0-9_-]{0,99}$",
    "an EKS add-on name: lowercase letters, digits, '-' and '_' (as `aws eks describe-addon-versions` lists it)",
)
ADDON_BUILD = Pattern(r"^v[0-9]+\.[0-9]+\.[0-9]+-eksbuild\.[0-9]+$", "an add-on build such as v1.2.3-eksbuild.1 (pinned; never 'latest')")
# An extension add-on's own Pod Identity: the Kubernetes service account (a DNS subdomain, at most
# 253 characters: docs/facts/eks.md#kubernetes-label-syntax) and the AWS managed policies its role gets,
# by name with their path (IAM's policy names: 1-128 of [A-Za-z0-9+=,.@_-]; AWS's paths such as
# service-role/: docs/facts/iam.md#iam-aws-managed-policy-paths).
SERVICE_ACCOUNT = Pattern(
    r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    "a Kubernetes service account name: a DNS subdomain of at most 253 lowercase letters, digits, '-' and '.'",
)
AWS_MANAGED_POLICY = Pattern(
    r"^(?:[A-Za-z0-9+=,.@_-]+/)*[A-Za-z0-9+=,.@_-]{1,128}$",
    "an AWS managed policy name with its path, if it has one (such as service-role/AmazonEBSCSIDriverPolicy), not an ARN",
)


def pod_identity_problems(entries: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """One line per problem of an add-on's Pod Identity entries, each (service account, managed policies)."""
    problems = []
    accounts = [account for account, _ in entries]
    for j, (account, policies) in enumerate(entries):
        where = f"pod_identity[{j}]"
        if problem := SERVICE_ACCOUNT.problem(account):
            problems.append(f"{where}: service_account {problem}")
        if accounts.index(account) != j:
            problems.append(f"{where}: service_account {account!r} is given twice")
        if not policies:
            problems.append(f"{where}: managed_policies must name at least one AWS managed policy")
        problems.extend(f"{where}: managed_policies {problem}" for policy in policies if (problem := AWS_MANAGED_POLICY.problem(policy)))
    return problems


def anchor_problem(after: str) -> str | None:
    """What is wrong with an extension's place (`after`), or None."""
    return one_of_problem(EXTENSION_ANCHORS, after)


# The EKS add-ons fminfra itself installs on some cluster: a config's extra add-ons name none of them.
# The add-ons fminfra installs on every cluster, and those it adds with HyperPod on the cluster, with
# task governance and with an FSx file system (fminfra/compute/stack/clusters.py installs them).
CORE_ADDONS = ("vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent")
HYPERPOD_EKS_ADDONS = ("cert-manager", "amazon-sagemaker-hyperpod-training-operator")
TASK_GOVERNANCE_ADDON_NAME = "amazon-sagemaker-hyperpod-taskgovernance"


def installed_addons(*, hyperpod: bool, task_governance: bool, file_system: bool) -> tuple[str, ...]:
    """The add-ons fminfra installs on a cluster: the core ones, and the others where it needs them."""
    return (
        *CORE_ADDONS,
        *(HYPERPOD_EKS_ADDONS if hyperpod else ()),
        *((TASK_GOVERNANCE_ADDON_NAME,) if task_governance else ()),
        *((FSX_CSI_ADDON,) if file_system else ()),
    )


def addon_taken_problem(name: str, installed: tuple[str, ...]) -> str | None:
    """An extension's add-on name that fminfra installs itself on this cluster, or None."""
    if name not in installed:
        return None
    return f"fminfra installs {name!r} itself on this cluster; name an add-on it does not install ({', '.join(installed)})"


# --- Karpenter on EKS without HyperPod (compute.eks.karpenter; docs/facts/karpenter.md) ---
# Its release, namespace and service account as its getting-started guide installs it (the Pod
# Identity association names them): docs/facts/karpenter.md#chart-karpenter, #karpenter-getting-started-template.
KARPENTER_RELEASE = "karpenter"
KARPENTER_NAMESPACE = "kube-system"
KARPENTER_SERVICE_ACCOUNT = "karpenter"
# Its metrics: the controller's container port `http-metrics` (the chart's default
# controller.metrics.port, which fminfra leaves), the one the chart's Service targets, at /metrics
# (docs/facts/karpenter.md#karpenter-metrics-endpoint).
KARPENTER_METRICS_PORT = 8080
KARPENTER_METRICS_PORT_NAME = "http-metrics"
KARPENTER_METRICS_PATH = "/metrics"
# The NodePool and EC2NodeClass APIs of the pinned release (docs/facts/karpenter.md#karpenter-api-versions).
KARPENTER_NODEPOOL_API = "karpenter.sh/v1"
KARPENTER_NODECLASS_API = "karpenter.k8s.aws/v1"
# The NodePool requirement key of its capacity types (docs/facts/karpenter.md#karpenter-api-versions).
KARPENTER_CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
# Capacity types a pool of an on-demand inference group may take (compute.eks.karpenter.capacity_types);
# a group on a reservation or a Capacity Block gets `reserved`, selected by its reservation id
# (Karpenter does no open ODCR matching: docs/facts/karpenter.md#karpenter-reserved-capacity).
KARPENTER_CAPACITY_TYPES = ("on-demand", "spot")
KARPENTER_RESERVED = "reserved"
# The group capacity types a Karpenter pool takes, and the ones it reads as `reserved`.
KARPENTER_GROUP_CAPACITY = ("on-demand", "reservation", "capacity-block")
KARPENTER_RESERVED_GROUP_CAPACITY = ("reservation", "capacity-block")
# Disruption: at most one node of a pool at a time, each drained through the Eviction API, which
# honours PodDisruptionBudgets; no terminationGracePeriod, which would let drift and expiry delete
# pods past a blocking budget (docs/facts/karpenter.md#karpenter-api-versions). Nodes expire after
# Karpenter's own default of 30 days; empty or underutilized nodes are consolidated after 5 minutes.
KARPENTER_DISRUPTION_NODES = "1"
KARPENTER_EXPIRE_AFTER = "720h"
KARPENTER_CONSOLIDATION_POLICY = "WhenEmptyOrUnderutilized"
KARPENTER_CONSOLIDATE_AFTER = "5m"
# The EventBridge events the getting-started template sends to the interruption queue, as
# (rule id, source, detail-type) (docs/facts/karpenter.md#karpenter-getting-started-template).
KARPENTER_INTERRUPTION_EVENTS = (
    ("ScheduledChange", "aws.health", "AWS Health Event"),
    ("SpotInterruption", "aws.ec2", "EC2 Spot Instance Interruption Warning"),
    ("Rebalance", "aws.ec2", "EC2 Instance Rebalance Recommendation"),
    ("InstanceStateChange", "aws.ec2", "EC2 Instance State-change Notification"),
    ("CapacityReservationInterruption", "aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
)
# UltraServers need DRA, which EKS documents Karpenter does not support
# (docs/facts/karpenter.md#eks-ultraserver-dra-karpenter).
KARPENTER_ULTRASERVER_PROBLEM = (
    "UltraServer instances (p6e-gb200) need Dynamic Resource Allocation, and EKS documents that DRA is not supported in "
    "Karpenter or EKS Auto Mode (it recommends node groups); set compute.eks.karpenter.enabled: false for this cluster"
)
# Spot needs the account's EC2 Spot service-linked role, which Karpenter's role may not create
# (docs/facts/karpenter.md#karpenter-spot-service-linked-role).
KARPENTER_SPOT_ROLE = (
    "spot capacity needs the account's EC2 Spot service-linked role (AWSServiceRoleForEC2Spot), which fminfra does not "
    "create and Karpenter's role may not: without it spot launches fail with ServiceLinkedRoleCreationNotPermitted; "
    "create it once per account (aws iam create-service-linked-role --aws-service-name spot.amazonaws.com) if "
    "`aws iam get-role --role-name AWSServiceRoleForEC2Spot` finds none"
)
KARPENTER_NEEDS_SYSTEM_NODES = (
    "the Karpenter controller runs on nodes Karpenter does not manage (its chart keeps it off Karpenter's nodes): "
    "with karpenter enabled the system node group needs at least 1 node (default 2); set count to 1 or more, or unset it"
)


# The load balancer controller's chart on HyperPod EKS with nothing but HyperPod's nodes to run on: they
# carry the deep-health-check taint while their checks run (docs/facts/eks.md#hyperpod-node-health-taint),
# for a time no source gives, and CDK's helm wait ends after 15 minutes (docs/facts/eks.md#cdk-helm-chart-timeout).
LBC_WITHOUT_OWN_NODES = (
    "the load balancer controller's chart waits at most 15 minutes for a node its pods can run on, and here the only "
    "ones are HyperPod's, tainted while their deep health checks run (for how long is not published); set "
    "compute.eks.system_nodes.count (2) or add an untainted inference node group"
)


# An EKS Capacity Block group's start schedule: the one-time expression `at(yyyy-mm-ddThh:mm:ss)` in UTC
# (docs/facts/eks.md#scheduler-one-time-schedule) and the schedule's description naming the node group;
# the construct writes both (fminfra/eks/constructs/inference_node_group.py), `cost` reads them back.
BLOCK_START_AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")
BLOCK_START_DESCRIPTION = re.compile(r"^Size (\S+) when its Capacity Block starts$")


def block_start_description(nodegroup_name: str) -> str:
    """The description of a node group's Capacity Block start schedule (read by `BLOCK_START_DESCRIPTION`)."""
    return f"Size {nodegroup_name} when its Capacity Block starts"


def group_cluster_role(name: str, group: str, rules: Sequence[Mapping[str, Sequence[str]]]) -> list[dict[str, Any]]:
    """A ClusterRole `name` with `rules` and its ClusterRoleBinding (also `name`) to the Kubernetes group
    `group` (an access entry's group)."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [{key: list(values) for key, values in rule.items()} for rule in rules],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "subjects": [{"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}],
            "roleRef": {"kind": "ClusterRole", "name": name, "apiGroup": "rbac.authorization.k8s.io"},
        },
    ]
