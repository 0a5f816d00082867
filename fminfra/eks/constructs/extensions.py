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
from constructs import Construct, IConstruct

from fminfra.core.errors import ValidationError
from fminfra.eks.constructs.cluster import EksCluster, HelmChartSpec
from fminfra.eks.rules import ADDON_BUILD, ADDON_NAME, DEFAULT_EXTENSION_ANCHOR, MANAGED_ADDONS, anchor_problem


@dataclass(frozen=True, kw_only=True)
class AddonExtension:
    """An EKS add-on at a pinned build. after: the fminfra component it follows. Default: core-addons.
    configuration_values: the add-on's configuration (JSON object). Default: none."""

    name: str
    version: str
    after: str = DEFAULT_EXTENSION_ANCHOR
    configuration_values: Mapping[str, object] | None = None


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
            if ext.name in MANAGED_ADDONS:
                problems.append(f"{where}: fminfra installs {ext.name!r} itself; name an add-on it does not ({', '.join(MANAGED_ADDONS)})")
    return problems


def install_extensions(
    scope: Construct,
    eks_cluster: EksCluster,
    extensions: Sequence[EksExtension],
    anchors: Mapping[str, Sequence[IConstruct]],
    workloads: Sequence[IConstruct],
) -> dict[str, IConstruct]:
    """Each extension after its anchor's constructs, and every workload after every extension.
    `anchors`: anchor name -> what it stands for on this cluster (absent: the cluster lacks it).
    Returns name -> the add-on or chart created."""
    problems = extension_problems(extensions)
    for i, ext in enumerate(extensions):
        if ext.after not in anchors and anchor_problem(ext.after) is None:
            problems.append(
                f"eks_extensions[{i}] ({extension_name(ext)}): after {ext.after!r}, which this cluster does not install; "
                f"use one of {', '.join(anchors)}"
            )
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
