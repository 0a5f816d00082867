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

from fminfra import _moved

__version__ = "0.2.0"

_moved.install()  # the old module names of 0.2.0 (fminfra/_moved.py)

# Public name -> the module that defines it.
_EXPORTS = {
    "FEATURE_FLAGS": "fminfra.app.stage",
    "AlertTopic": "fminfra.observability.constructs.alerting",
    "AlertTopicProps": "fminfra.observability.constructs.alerting",
    "AmpScraper": "fminfra.observability.constructs.amp_scraper",
    "AmpScraperProps": "fminfra.observability.constructs.amp_scraper",
    "AzIdVpc": "fminfra.network.constructs.vpc",
    "AzIdVpcProps": "fminfra.network.constructs.vpc",
    "build_app": "fminfra.app.synth",
    "CapacityReservationGroup": "fminfra.capacity.constructs.capacity_reservation",
    "CapacityReservationGroupProps": "fminfra.capacity.constructs.capacity_reservation",
    "CapacityReservationTarget": "fminfra.compute.constructs.launch_template",
    "ClusterPlacementGroup": "fminfra.compute.constructs.placement",
    "ClusterPlacementGroupProps": "fminfra.compute.constructs.placement",
    "ComputeStack": "fminfra.compute.stack",
    "config_files": "fminfra.config",
    "ConfigError": "fminfra.core.errors",
    "DataBucket": "fminfra.data.constructs.data_bucket",
    "DataBucketProps": "fminfra.data.constructs.data_bucket",
    "DataKey": "fminfra.data.constructs.data_key",
    "DataKeyProps": "fminfra.data.constructs.data_key",
    "DataRepositoryAssociation": "fminfra.storage.constructs.lustre",
    "DataRepositoryAssociationProps": "fminfra.storage.constructs.lustre",
    "DataStack": "fminfra.data.stack",
    "EfaLaunchTemplate": "fminfra.compute.constructs.launch_template",
    "EfaLaunchTemplateProps": "fminfra.compute.constructs.launch_template",
    "EfaSecurityGroup": "fminfra.network.constructs.efa_security_group",
    "EfaSecurityGroupProps": "fminfra.network.constructs.efa_security_group",
    "EksCluster": "fminfra.eks.constructs.cluster",
    "EksClusterProps": "fminfra.eks.constructs.cluster",
    "EnvironmentConfig": "fminfra.config",
    "EnvironmentStage": "fminfra.app.stage",
    "FsxLustreAlarms": "fminfra.observability.constructs.alerting",
    "FsxLustreAlarmsProps": "fminfra.observability.constructs.alerting",
    "GithubOidcStack": "fminfra.promotion.stack",
    "GpuAutoScalingGroup": "fminfra.compute.constructs.gpu_auto_scaling_group",
    "GpuAutoScalingGroupProps": "fminfra.compute.constructs.gpu_auto_scaling_group",
    "GrafanaWorkspace": "fminfra.observability.constructs.grafana_workspace",
    "GrafanaWorkspaceProps": "fminfra.observability.constructs.grafana_workspace",
    "HelmChartSpec": "fminfra.eks.constructs.cluster",
    "HyperPodCluster": "fminfra.hyperpod.constructs.cluster",
    "HyperPodClusterProps": "fminfra.hyperpod.constructs.cluster",
    "HyperPodDependencies": "fminfra.hyperpod.constructs.dependencies",
    "HyperPodDependenciesProps": "fminfra.hyperpod.constructs.dependencies",
    "HyperPodInstanceGroup": "fminfra.hyperpod.constructs.cluster",
    "InferenceNodeGroup": "fminfra.eks.constructs.inference_node_group",
    "InferenceNodeGroupProps": "fminfra.eks.constructs.inference_node_group",
    "LifecycleScripts": "fminfra.hyperpod.constructs.lifecycle_scripts",
    "LifecycleScriptsProps": "fminfra.hyperpod.constructs.lifecycle_scripts",
    "load_config": "fminfra.config",
    "load_pipeline": "fminfra.config.pipeline",
    "LustreFileSystem": "fminfra.storage.constructs.lustre",
    "LustreFileSystemProps": "fminfra.storage.constructs.lustre",
    "NetworkStack": "fminfra.network.stack",
    "NodeBootstrap": "fminfra.compute.constructs.node_bootstrap",
    "NodeBootstrapProps": "fminfra.compute.constructs.node_bootstrap",
    "NodeRole": "fminfra.compute.constructs.node_role",
    "NodeRoleProps": "fminfra.compute.constructs.node_role",
    "ObservabilityStack": "fminfra.observability.stack",
    "OnDemandCapacityReservation": "fminfra.capacity.constructs.capacity_reservation",
    "OnDemandCapacityReservationProps": "fminfra.capacity.constructs.capacity_reservation",
    "parse_config": "fminfra.config",
    "PipelineConfig": "fminfra.config.pipeline",
    "PipelineStack": "fminfra.app.pipeline",
    "PodScrapeJob": "fminfra.observability.constructs.amp_scraper",
    "PrometheusAlerting": "fminfra.observability.constructs.alerting",
    "PrometheusAlertingProps": "fminfra.observability.constructs.alerting",
    "PrometheusWorkspace": "fminfra.observability.constructs.prometheus_workspace",
    "PrometheusWorkspaceProps": "fminfra.observability.constructs.prometheus_workspace",
    "StorageStack": "fminfra.storage.stack",
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
    "PodScrapeJob",
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
