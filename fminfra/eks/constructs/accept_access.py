"""The acceptance gate's access to a HyperPod EKS cluster (`compute.eks.accept_access`).

CI runs `fminfra accept ENV` from the runner with the role `fminfra-ENV-accept` (the GitHub OIDC
stack, `fminfra/promotion/stack.py`). IAM lets that role describe the cluster; Kubernetes must
authorize it too. This module gives it (`Clusters` calls it, in the environment's Compute stack):

- an EKS access entry (type STANDARD) for the role's ARN with one Kubernetes group, `ACCEPT_GROUP`,
  and no access policy: the EKS access policies are fixed rule lists of built-in API groups only,
  so none of them grants MPIJob, HyperPodPyTorchJob or LocalQueue (docs/facts/eks.md#eks-access-policy-permissions);
- in the namespace of the team accept's jobs queue in (`ComputeConfig.acceptance_team`: `training`,
  else the first configured team; the Compute stack applies it after the teams' compute quotas), a Role with exactly
  the requests `fminfra accept` makes
  (`fminfra/ops/accept/eks.py`), bound to that group, applied with the cluster's kubectl
  provider as the AMP scraper's RBAC is. The Role grants nothing outside its namespace; `get` on the
  namespace object itself is inside it (docs/facts/eks.md#k8s-rbac-request-attributes);
- one ClusterRole, `get` of nodes only, bound to the same group: accept reads the network layer labels
  of the nodes its jobs ran on (`kubectl get nodes NAME...`), and nodes are cluster-scoped, which no
  Role can grant (docs/facts/jobs.md#k8s-rbac-forbidden-cluster-scope). `get` by name, not `list`:
  accept names the nodes its pods ran on.

EKS stores the role's unique id when the entry is created, so the role must exist first: deploy
the GitHub OIDC stack before the environment (docs/facts/iam.md#eks-access-entry-existing-principal).

The namespace is task governance's: it creates `hyperpod-ns-<team>` when the team's compute quota
is created, but whether it exists the moment CloudFormation reports the quota created is not
documented, and applying a Role into a namespace that does not exist yet fails the deploy. So a
manifest of its own, `AcceptNamespaces`, applies the Namespace first (`overwrite`: the provider
then creates with `kubectl apply`, which accepts an existing namespace), and that manifest never
deletes it: it is not pruned, and it is retained (DeletionPolicy and UpdateReplacePolicy Retain), so
neither turning accept_access off, nor another acceptance team, nor deleting the stack makes the
provider run `kubectl delete` on the team's namespace, its queue and its running jobs
(docs/facts/eks.md#cdk-kubernetes-manifest-overwrite, #cdk-kubernetes-manifest-retained). The Role and RoleBinding are in `AcceptRbac`,
which is deleted with the access.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IDependable

from fminfra.eks.constructs.cluster import EksCluster
from fminfra.eks.rules import group_cluster_role

# The Kubernetes group of the acceptance role's access entry (a RoleBinding subject, kind Group).
ACCEPT_GROUP = "fminfra-accept"
ACCEPT_ROLE = "fminfra-accept"
ACCEPT_NODES_ROLE = "fminfra-accept-nodes"
# The cluster-scoped requests: `kubectl get nodes NAME...` (a get per name) for the placement rows, and the
# list of Kueue's ResourceFlavors.
ACCEPT_NODE_RULES: tuple[dict[str, list[str]], ...] = (
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
    # `kubectl get resourceflavors.kueue.x-k8s.io -o json` (a list): whether the type's flavor names a Topology
    # (fminfra/ops/accept/eks.py, flavor_notes); Kueue's ResourceFlavor is cluster-scoped too.
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["resourceflavors"], "verbs": ["list"]},
)

# What `fminfra accept` does in the team namespace, as Kubernetes authorizes it: `kubectl get` of the
# namespace and its LocalQueue; `kubectl apply` (get, then create or patch) of the scripts' ConfigMap
# and the three job kinds; `kubectl get -o json` of each job while it runs; `kubectl get pods -l`
# (list) and `kubectl logs` (get of the pod, then of pods/log); `kubectl delete` of the jobs and the
# ConfigMap (docs/facts/eks.md#k8s-rbac-request-attributes).
APPLY_VERBS = ["get", "create", "patch", "delete"]
ACCEPT_RULES: tuple[dict[str, list[str]], ...] = (
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": APPLY_VERBS},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": APPLY_VERBS},
    {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs"], "verbs": APPLY_VERBS},
    {"apiGroups": ["sagemaker.amazonaws.com"], "resources": ["hyperpodpytorchjobs"], "verbs": APPLY_VERBS},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
)


def accept_namespaces(namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The Namespace objects (task governance's), applied so that the Roles have somewhere to go."""
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in namespaces]


def accept_rbac(namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """Per namespace: the Role with ACCEPT_RULES and its RoleBinding to ACCEPT_GROUP; and the ClusterRole
    with ACCEPT_NODE_RULES and its ClusterRoleBinding to the same group."""

    objects = group_cluster_role(ACCEPT_NODES_ROLE, ACCEPT_GROUP, ACCEPT_NODE_RULES)
    for ns in namespaces:
        objects += [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": ACCEPT_ROLE, "namespace": ns},
                "rules": [{key: list(values) for key, values in rule.items()} for rule in ACCEPT_RULES],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": ACCEPT_ROLE, "namespace": ns},
                "subjects": [{"kind": "Group", "name": ACCEPT_GROUP, "apiGroup": "rbac.authorization.k8s.io"}],
                "roleRef": {"kind": "Role", "name": ACCEPT_ROLE, "apiGroup": "rbac.authorization.k8s.io"},
            },
        ]
    return objects


@dataclass(frozen=True)
class AcceptAccess:
    """What `add_accept_access` created: the access entry and the two manifests (namespaces, RBAC)."""

    entry: eks_l1.CfnAccessEntry
    manifests: tuple[eks.KubernetesManifest, eks.KubernetesManifest]


def add_accept_access(
    stack: Construct, role_name: str, eks_cluster: EksCluster, namespaces: Sequence[str], after: Sequence[IDependable] = ()
) -> AcceptAccess:
    """The access entry of the role `role_name` of this account (`fminfra-<env>-accept`:
    `fminfra.promotion.stack.accept_role_name`) and the RBAC of `accept_rbac(namespaces)`, in
    `stack`; the RBAC is applied after `after` (what creates the namespaces' other contents, e.g.
    the teams' quotas)."""
    principal = cdk.Stack.of(stack).format_arn(service="iam", region="", resource="role", resource_name=role_name)
    entry = eks_l1.CfnAccessEntry(
        stack,
        "AcceptAccessEntry",
        cluster_name=eks_cluster.cluster_name,
        principal_arn=principal,
        type="STANDARD",
        kubernetes_groups=[ACCEPT_GROUP],
    )
    cluster = cast(eks.ICluster, eks_cluster.cluster)
    # overwrite: the kubectl provider creates with `kubectl apply`, not `kubectl create`, which would
    # fail on a namespace task governance has already created (docs/facts/eks.md#cdk-kubernetes-manifest-overwrite);
    # no prune and Retain: the provider never deletes the namespace (the module's docstring).
    spaces = eks.KubernetesManifest(
        stack, "AcceptNamespaces", cluster=cluster, manifest=accept_namespaces(namespaces), overwrite=True, prune=False
    )
    cast(cdk.CustomResource, spaces.node.find_child("Resource")).apply_removal_policy(cdk.RemovalPolicy.RETAIN)
    spaces.node.add_dependency(*after)
    rbac = eks.KubernetesManifest(stack, "AcceptRbac", cluster=cluster, manifest=accept_rbac(namespaces), overwrite=True)
    rbac.node.add_dependency(entry, spaces)
    return AcceptAccess(entry=entry, manifests=(spaces, rbac))
