"""The extension point of an EKS cluster: a library user's own EKS add-on or Helm chart (or a
config's extra EKS add-on), typed, with its place in the install order.

An extension installs after the fminfra component it names (`after`, one of
`fminfra.eks.rules.EXTENSION_ANCHORS`: the VPC CNI, all core add-ons, the FSx CSI driver, the AWS
Load Balancer Controller) and before every fminfra workload (the device plugins, the exporters,
Kueue and the FSx volume), so a workload may rely on what an extension installs. Use:

    EnvironmentStage(app, cfg, eks_extensions=[ChartExtension(chart=HelmChartSpec(...), after="vpc-cni")])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from fminfra.core.errors import ValidationError
from fminfra.eks.constructs.cluster import EksCluster, HelmChartSpec
from fminfra.eks.rules import (
    ADDON_BUILD,
    ADDON_NAME,
    CORE_ADDONS,
    DEFAULT_EXTENSION_ANCHOR,
    addon_taken_problem,
    anchor_problem,
    pod_identity_problems,
)
from fminfra.policy.constructs.acknowledge import acknowledge


@dataclass(frozen=True, kw_only=True)
class AddonPodIdentity:
    """An add-on's service account and the AWS managed policies (by name with path, such as
    service-role/AmazonEBSCSIDriverPolicy) of the role fminfra creates for it through EKS Pod Identity
    (docs/facts/iam.md#eks-addon-pod-identity-associations)."""

    service_account: str
    managed_policies: Sequence[str]


@dataclass(frozen=True, kw_only=True)
class AddonExtension:
    """An EKS add-on at a pinned build. after: the fminfra component it follows. Default: core-addons.
    configuration_values: the add-on's configuration (JSON object). Default: none.
    pod_identity: roles for the add-on's service accounts (what an add-on that calls AWS needs).
      Default: none."""

    name: str
    version: str
    after: str = DEFAULT_EXTENSION_ANCHOR
    configuration_values: Mapping[str, object] | None = None
    pod_identity: Sequence[AddonPodIdentity] = ()


@dataclass(frozen=True, kw_only=True)
class ChartExtension:
    """A Helm chart at a pinned version. after: the fminfra component it follows. Default: core-addons."""

    chart: HelmChartSpec
    after: str = DEFAULT_EXTENSION_ANCHOR


EksExtension = AddonExtension | ChartExtension


def extension_name(extension: EksExtension) -> str:
    return extension.name if isinstance(extension, AddonExtension) else extension.chart.name


def extension_problems(extensions: Sequence[EksExtension]) -> list[str]:
    """One line per extension that cannot be installed as given."""
    problems = []
    seen: set[str] = set()
    for i, ext in enumerate(extensions):
        name = extension_name(ext)
        where = f"eks_extensions[{i}] ({name})"
        if name in seen:
            problems.append(f"{where}: name {name!r} is given twice")
        seen.add(name)
        if problem := anchor_problem(ext.after):
            problems.append(f"{where}: {problem}")
        if isinstance(ext, AddonExtension):
            for field_name, pattern, value in (("name", ADDON_NAME, ext.name), ("version", ADDON_BUILD, ext.version)):
                if problem := pattern.problem(value):
                    problems.append(f"{where}: {field_name} {problem}")
            if problem := addon_taken_problem(ext.name, CORE_ADDONS):
                problems.append(f"{where}: {problem}")
            entries = [(i.service_account, i.managed_policies) for i in ext.pod_identity]
            problems.extend(f"{where}: {p}" for p in pod_identity_problems(entries))
    return problems


def _pod_identity_roles(scope: Construct, ext: AddonExtension, addon: eks.Addon) -> None:
    """A role per service account, trusted by EKS Pod Identity, with the AWS managed policies named,
    associated through the add-on itself (docs/facts/iam.md#eks-addon-pod-identity-associations)."""
    associations = []
    for identity in ext.pod_identity:
        role = iam.Role(
            scope,
            f"Extension-{ext.name}-{identity.service_account}-Role",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal("pods.eks.amazonaws.com")),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in identity.managed_policies],
            description=f"EKS add-on {ext.name}: service account {identity.service_account} (EKS Pod Identity)",
        )
        for policy in identity.managed_policies:
            acknowledge(
                role,
                f"IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy}]",
                f"The AWS managed policy the environment names for add-on {ext.name}'s service account {identity.service_account} "
                "(compute.eks.addons[].pod_identity or an AddonExtension): the add-on's own documented permissions",
            )
        associations.append({"ServiceAccount": identity.service_account, "RoleArn": role.role_arn})
    if associations:
        cfn = addon.node.default_child
        assert isinstance(cfn, cdk.CfnResource)
        cfn.add_property_override("PodIdentityAssociations", associations)


def install_extensions(
    scope: Construct,
    eks_cluster: EksCluster,
    extensions: Sequence[EksExtension],
    anchors: Mapping[str, Sequence[IConstruct]],
    workloads: Sequence[IConstruct],
    releases: Sequence[tuple[str, str]] = (),
) -> dict[str, IConstruct]:
    """Each extension after its anchor's constructs, and every workload after every extension.
    `anchors`: anchor name -> what it stands for on this cluster (absent: the cluster lacks it).
    `releases`: fminfra's own Helm releases on this cluster, (release, namespace): a chart extension
    may not take one over (`helm upgrade --install` of the same release upgrades it).
    Returns name -> the add-on or chart created."""
    problems = extension_problems(extensions)
    for i, ext in enumerate(extensions):
        if isinstance(ext, ChartExtension) and (ext.chart.name, ext.chart.namespace) in releases:
            problems.append(
                f"eks_extensions[{i}] ({ext.chart.name}): fminfra installs Helm release {ext.chart.name!r} in namespace "
                f"{ext.chart.namespace!r} itself; give the chart another release name or namespace"
            )
    for i, ext in enumerate(extensions):
        if ext.after not in anchors and anchor_problem(ext.after) is None:
            problems.append(
                f"eks_extensions[{i}] ({extension_name(ext)}): after {ext.after!r}, which this cluster does not install; "
                f"use one of {', '.join(anchors)}"
            )
    installed = tuple(eks_cluster.addons)
    for i, ext in enumerate(extensions):
        if isinstance(ext, AddonExtension) and (problem := addon_taken_problem(ext.name, installed)) and ext.name not in CORE_ADDONS:
            problems.append(f"eks_extensions[{i}] ({ext.name}): {problem}")
    if problems:
        raise ValidationError("; ".join(problems))
    created: dict[str, IConstruct] = {}
    for ext in extensions:
        resource: IConstruct
        if isinstance(ext, AddonExtension):
            resource = eks.Addon(
                scope,
                f"Extension-{ext.name}",
                cluster=cast(eks.ICluster, eks_cluster.cluster),
                addon_name=ext.name,
                addon_version=ext.version,
                preserve_on_delete=False,
            )
            _pod_identity_roles(scope, ext, resource)
            if ext.configuration_values:
                cfn = resource.node.default_child
                assert isinstance(cfn, cdk.CfnResource)
                cfn.add_property_override("ConfigurationValues", cdk.Stack.of(scope).to_json_string(dict(ext.configuration_values)))
        else:
            resource = ext.chart.add_to(eks_cluster.cluster, f"Extension-{ext.chart.name}")
        for anchor in anchors[ext.after]:
            resource.node.add_dependency(anchor)
        for workload in workloads:
            workload.node.add_dependency(resource)
        created[extension_name(ext)] = resource
    return created
