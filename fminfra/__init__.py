"""fminfra: AWS CDK constructs and stacks for foundation-model training and serving platforms.

The public API, what a CDK app of your own imports (each name is also importable from the module
named beside it below, which is where its documentation lives):

- config: `load_config`, `parse_config`, `EnvironmentConfig` (and `PipelineConfig`, `load_pipeline`);
- one environment as one `cdk.Stage`: `EnvironmentStage`, and the stacks it wires; `FEATURE_FLAGS`, the CDK feature
  flags its templates are tested with (`cdk.App(context=FEATURE_FLAGS)`);
- the promotion pipeline: `PipelineStack`;
- the constructs, one per AWS concept, each with its frozen `...Props` dataclass;
- the errors bad input raises: `ConfigError` (config files), `ValidationError` (construct props).

Names are imported on first use, so `import fminfra` (and the CLI) does not load aws-cdk-lib.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "FEATURE_FLAGS": "fminfra.stage",
    "AlertTopic": "fminfra.constructs.alerting",
    "AlertTopicProps": "fminfra.constructs.alerting",
    "AmpScraper": "fminfra.constructs.amp_scraper",
    "AmpScraperProps": "fminfra.constructs.amp_scraper",
    "AzIdVpc": "fminfra.constructs.vpc",
    "AzIdVpcProps": "fminfra.constructs.vpc",
    "build_app": "fminfra.synth",
    "CapacityReservationGroup": "fminfra.constructs.capacity_reservation",
    "CapacityReservationGroupProps": "fminfra.constructs.capacity_reservation",
    "CapacityReservationTarget": "fminfra.constructs.launch_template",
    "ClusterPlacementGroup": "fminfra.constructs.placement",
    "ClusterPlacementGroupProps": "fminfra.constructs.placement",
    "ComputeStack": "fminfra.stacks.compute",
    "config_files": "fminfra.config",
    "ConfigError": "fminfra.core.errors",
    "DataBucket": "fminfra.constructs.data_bucket",
    "DataBucketProps": "fminfra.constructs.data_bucket",
    "DataKey": "fminfra.constructs.data_key",
    "DataKeyProps": "fminfra.constructs.data_key",
    "DataRepositoryAssociation": "fminfra.constructs.lustre",
    "DataRepositoryAssociationProps": "fminfra.constructs.lustre",
    "DataStack": "fminfra.stacks.data",
    "EfaLaunchTemplate": "fminfra.constructs.launch_template",
    "EfaLaunchTemplateProps": "fminfra.constructs.launch_template",
    "EfaSecurityGroup": "fminfra.constructs.efa_security_group",
    "EfaSecurityGroupProps": "fminfra.constructs.efa_security_group",
    "EksCluster": "fminfra.constructs.eks_cluster",
    "EksClusterProps": "fminfra.constructs.eks_cluster",
    "EnvironmentConfig": "fminfra.config",
    "EnvironmentStage": "fminfra.stage",
    "FsxLustreAlarms": "fminfra.constructs.alerting",
    "FsxLustreAlarmsProps": "fminfra.constructs.alerting",
    "GithubOidcStack": "fminfra.stacks.github_oidc",
    "GpuAutoScalingGroup": "fminfra.constructs.gpu_auto_scaling_group",
    "GpuAutoScalingGroupProps": "fminfra.constructs.gpu_auto_scaling_group",
    "GrafanaWorkspace": "fminfra.constructs.grafana_workspace",
    "GrafanaWorkspaceProps": "fminfra.constructs.grafana_workspace",
    "HelmChartSpec": "fminfra.constructs.eks_cluster",
    "HyperPodCluster": "fminfra.constructs.hyperpod",
    "HyperPodClusterProps": "fminfra.constructs.hyperpod",
    "HyperPodDependencies": "fminfra.constructs.hyperpod_dependencies",
    "HyperPodDependenciesProps": "fminfra.constructs.hyperpod_dependencies",
    "HyperPodInstanceGroup": "fminfra.constructs.hyperpod",
    "InferenceNodeGroup": "fminfra.constructs.inference_node_group",
    "InferenceNodeGroupProps": "fminfra.constructs.inference_node_group",
    "LifecycleScripts": "fminfra.constructs.lifecycle_scripts",
    "LifecycleScriptsProps": "fminfra.constructs.lifecycle_scripts",
    "load_config": "fminfra.config",
    "load_pipeline": "fminfra.config.pipeline",
    "LustreFileSystem": "fminfra.constructs.lustre",
    "LustreFileSystemProps": "fminfra.constructs.lustre",
    "NetworkStack": "fminfra.stacks.network",
    "NodeBootstrap": "fminfra.constructs.node_bootstrap",
    "NodeBootstrapProps": "fminfra.constructs.node_bootstrap",
    "NodeRole": "fminfra.constructs.node_role",
    "NodeRoleProps": "fminfra.constructs.node_role",
    "ObservabilityStack": "fminfra.stacks.observability",
    "OnDemandCapacityReservation": "fminfra.constructs.capacity_reservation",
    "OnDemandCapacityReservationProps": "fminfra.constructs.capacity_reservation",
    "parse_config": "fminfra.config",
    "PipelineConfig": "fminfra.config.pipeline",
    "PipelineStack": "fminfra.pipeline",
    "PrometheusAlerting": "fminfra.constructs.alerting",
    "PrometheusAlertingProps": "fminfra.constructs.alerting",
    "PrometheusWorkspace": "fminfra.constructs.prometheus_workspace",
    "PrometheusWorkspaceProps": "fminfra.constructs.prometheus_workspace",
    "StorageStack": "fminfra.stacks.storage",
    "ValidationError": "fminfra.core.errors",
}

__all__ = [
    "FEATURE_FLAGS",
    "AlertTopic",
    "AlertTopicProps",
    "AmpScraper",
    "AmpScraperProps",
    "AzIdVpc",
    "AzIdVpcProps",
    "CapacityReservationGroup",
    "CapacityReservationGroupProps",
    "CapacityReservationTarget",
    "ClusterPlacementGroup",
    "ClusterPlacementGroupProps",
    "ComputeStack",
    "ConfigError",
    "DataBucket",
    "DataBucketProps",
    "DataKey",
    "DataKeyProps",
    "DataRepositoryAssociation",
    "DataRepositoryAssociationProps",
    "DataStack",
    "EfaLaunchTemplate",
    "EfaLaunchTemplateProps",
    "EfaSecurityGroup",
    "EfaSecurityGroupProps",
    "EksCluster",
    "EksClusterProps",
    "EnvironmentConfig",
    "EnvironmentStage",
    "FsxLustreAlarms",
    "FsxLustreAlarmsProps",
    "GithubOidcStack",
    "GpuAutoScalingGroup",
    "GpuAutoScalingGroupProps",
    "GrafanaWorkspace",
    "GrafanaWorkspaceProps",
    "HelmChartSpec",
    "HyperPodCluster",
    "HyperPodClusterProps",
    "HyperPodDependencies",
    "HyperPodDependenciesProps",
    "HyperPodInstanceGroup",
    "InferenceNodeGroup",
    "InferenceNodeGroupProps",
    "LifecycleScripts",
    "LifecycleScriptsProps",
    "LustreFileSystem",
    "LustreFileSystemProps",
    "NetworkStack",
    "NodeBootstrap",
    "NodeBootstrapProps",
    "NodeRole",
    "NodeRoleProps",
    "ObservabilityStack",
    "OnDemandCapacityReservation",
    "OnDemandCapacityReservationProps",
    "PipelineConfig",
    "PipelineStack",
    "PrometheusAlerting",
    "PrometheusAlertingProps",
    "PrometheusWorkspace",
    "PrometheusWorkspaceProps",
    "StorageStack",
    "ValidationError",
    "build_app",
    "config_files",
    "load_config",
    "load_pipeline",
    "parse_config",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fminfra' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
