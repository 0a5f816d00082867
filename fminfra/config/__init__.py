"""Typed environment config: one pydantic model per section, each defined in its concept package (`fminfra/<concept>/config.py`).

Every section is a pydantic model with `extra="forbid"`, so a misspelled field is an error and
never a silently ignored value. Cross-field rules (AZ IDs of the region, capacity types per
orchestrator, subnet sizes) live in the models so that they fail before any synth. `loader` is the
one reader of YAML: `load_config` turns every problem into one line `FILE: field.path: message`.

- `base`: the base model, problem reporting, account and region checks;
- `network`, `compute`, `storage`, `observability`: one module per section;
- `environment`: the whole file and the cross-section rules;
- `loader`: reading YAML files; `pipeline`: `pipeline.yaml`, which spans environments.

This package imports no CDK.
"""

from fminfra.capacity.rules import CAPACITY_TYPES, EC2_CAPACITY_TYPES, HYPERPOD_CAPACITY_TYPES
from fminfra.compute.config import (
    CONTROLLER_GROUP_NAME,
    GROUP_NAME_RULE,
    HYPERPOD_MAX_INSTANCES,
    LOGIN_GROUP_NAME,
    CapacityConfig,
    ComputeConfig,
    EksConfig,
    InferenceNodeGroupConfig,
    InstanceGroupConfig,
    SlurmConfig,
    SlurmLoginConfig,
    SlurmNodeConfig,
    SystemNodesConfig,
    Taint,
    standard_support_end,
    supported_kubernetes_versions,
)
from fminfra.config.environment import EnvironmentConfig
from fminfra.config.loader import config_files, format_warnings, load_config, parse_config, read_yaml, resolve_config_path
from fminfra.core.config_base import Model, Problems, check_account, check_region
from fminfra.core.rules import LOG_RETENTION_DAYS
from fminfra.network.config import NetworkConfig
from fminfra.observability.config import AlertsConfig, GrafanaConfig, ObservabilityConfig
from fminfra.storage.config import (
    LUSTRE_DEFAULT_THROUGHPUT_MB_PER_TIB,
    LUSTRE_EFA_CAPACITY_STEP_GIB,
    LUSTRE_MAX_REPOSITORIES,
    LUSTRE_SCRATCH_2_BASELINE_MB_PER_TIB,
    LUSTRE_THROUGHPUT_TIERS_MB_PER_TIB,
    BucketConfig,
    LustreConfig,
    MetadataConfig,
    RepositoryConfig,
    StorageConfig,
    lustre_capacity_for_throughput,
    lustre_throughput_gb_per_s,
)
from fminfra.storage.rules import lustre_capacity_valid

__all__ = [
    "CAPACITY_TYPES",
    "CONTROLLER_GROUP_NAME",
    "EC2_CAPACITY_TYPES",
    "GROUP_NAME_RULE",
    "HYPERPOD_CAPACITY_TYPES",
    "HYPERPOD_MAX_INSTANCES",
    "LOGIN_GROUP_NAME",
    "LOG_RETENTION_DAYS",
    "LUSTRE_DEFAULT_THROUGHPUT_MB_PER_TIB",
    "LUSTRE_EFA_CAPACITY_STEP_GIB",
    "LUSTRE_MAX_REPOSITORIES",
    "LUSTRE_SCRATCH_2_BASELINE_MB_PER_TIB",
    "LUSTRE_THROUGHPUT_TIERS_MB_PER_TIB",
    "AlertsConfig",
    "BucketConfig",
    "CapacityConfig",
    "ComputeConfig",
    "EksConfig",
    "EnvironmentConfig",
    "GrafanaConfig",
    "InferenceNodeGroupConfig",
    "InstanceGroupConfig",
    "LustreConfig",
    "MetadataConfig",
    "Model",
    "NetworkConfig",
    "ObservabilityConfig",
    "Problems",
    "RepositoryConfig",
    "SlurmConfig",
    "SlurmLoginConfig",
    "SlurmNodeConfig",
    "StorageConfig",
    "SystemNodesConfig",
    "Taint",
    "check_account",
    "check_region",
    "config_files",
    "format_warnings",
    "load_config",
    "lustre_capacity_for_throughput",
    "lustre_capacity_valid",
    "lustre_throughput_gb_per_s",
    "parse_config",
    "read_yaml",
    "resolve_config_path",
    "standard_support_end",
    "supported_kubernetes_versions",
]
