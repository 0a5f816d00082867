"""One environment = one cdk.Stage wiring the stacks in deploy order."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
from constructs import Construct

from fminfra.compute.stack import ComputeStack
from fminfra.config import EnvironmentConfig
from fminfra.core.errors import ValidationError
from fminfra.data.stack import DataStack, needs_data_stack
from fminfra.eks.constructs.extensions import EksExtension
from fminfra.network.stack import NetworkStack
from fminfra.observability.stack import ObservabilityStack
from fminfra.storage.stack import StorageStack

# The CDK feature flags the stage's templates are built and tested with (feature_flags.json beside
# this module: the flags this repository started with, and every flag `cdk flags` lists for
# aws-cdk-lib 2.275 at its recommended value where that leaves every template unchanged; see
# CHANGELOG.md for the two set otherwise). The stage sets each one on its own scope unless the app
# already has a value, so it works in any CDK app, with or without a cdk.json (this repository's
# cdk.json repeats them for the stacks outside a stage; tests/app/test_library.py keeps the two equal).
FEATURE_FLAGS: dict[str, object] = json.loads((Path(__file__).parent / "feature_flags.json").read_text(encoding="utf-8"))
# Flags the constructs cannot work without: the cdk-nag acknowledgments name IAM resources by their
# literal ARN (`fminfra.policy.constructs.acknowledge.literal`), which needs partition literals.
REQUIRED_FLAGS = ("@aws-cdk/core:enablePartitionLiterals",)


def apply_feature_flags(stage: cdk.Stage) -> None:
    """Set the stage's feature flags on its scope where the app has none; refuse a required flag set off."""
    for flag, value in FEATURE_FLAGS.items():
        given = stage.node.try_get_context(flag)
        if given is None:
            stage.node.set_context(flag, value)
        elif flag in REQUIRED_FLAGS and given != value:
            raise ValidationError(
                f"feature flag {flag} is {given!r} in this app; fminfra needs {value!r}: "
                f"remove it from cdk.json or the app's context, or set it to {value!r}"
            )


class EnvironmentStage(cdk.Stage):
    """All stacks of one environment; promotion runs this class with another config.

    The Stage id is the environment name, so stack names read `dev-Network`, `prod-Compute`.
    eks_extensions: your own EKS add-ons and Helm charts (`fminfra.eks.constructs.extensions`), each
    installed after the fminfra component it names and before fminfra's workloads. Default: none.
    Attributes: `network`, `data` and `storage` (None without a storage section / file system),
    `observability`, `compute`, `data_bucket`.
    """

    def __init__(self, scope: Construct, cfg: EnvironmentConfig, *, eks_extensions: Sequence[EksExtension] = (), **kwargs: object) -> None:
        super().__init__(
            scope,
            cfg.name,
            env=cdk.Environment(account=cfg.account, region=cfg.region),
            **kwargs,  # type: ignore[arg-type]
        )
        apply_feature_flags(self)
        self.cfg = cfg
        tags = {"fminfra:environment": cfg.name, **cfg.tags}
        for key, value in tags.items():
            cdk.Tags.of(self).add(key, value)
        self.network = NetworkStack(
            self,
            "Network",
            cfg=cfg,
            description=f"fminfra {cfg.name}: VPC by AZ ID, endpoints, flow logs, EFA security group",
            termination_protection=cfg.removal_policy == "retain",
        )
        # Data and Storage hold state: termination protection with removal_policy retain.
        self.data: DataStack | None = None
        if needs_data_stack(cfg):
            self.data = DataStack(
                self,
                "Data",
                cfg=cfg,
                description=f"fminfra {cfg.name}: data bucket, access-log bucket, KMS key",
                termination_protection=cfg.removal_policy == "retain",
            )
        self.storage: StorageStack | None = None
        if cfg.storage is not None and cfg.storage.lustre is not None:
            self.storage = StorageStack(
                self,
                "Storage",
                cfg=cfg,
                network=self.network,
                data=self.data,
                description=f"fminfra {cfg.name}: FSx for Lustre in the compute AZ, data repository associations",
                termination_protection=cfg.removal_policy == "retain",
            )
            self.storage.add_stack_dependency(self.network)
            if self.data is not None:
                self.storage.add_stack_dependency(self.data)
        self.observability = ObservabilityStack(
            self,
            "Observability",
            cfg=cfg,
            description=f"fminfra {cfg.name}: Amazon Managed Prometheus, alert rules and alerting, Grafana",
            termination_protection=cfg.removal_policy == "retain",
        )
        self.observability.add_stack_dependency(self.network)
        if self.storage is not None:
            assert cfg.storage is not None and cfg.storage.lustre is not None
            self.observability.add_fsx_alarms(
                "Lustre",
                file_system_id=self.storage.file_system_id,
                storage_capacity_gib=cfg.storage.lustre.capacity_gib,
                throughput_mb_per_s=round(cfg.storage.lustre.throughput_gb_per_s * 1000),
            )
            self.observability.add_stack_dependency(self.storage)
        self.compute = ComputeStack(
            self,
            "Compute",
            cfg=cfg,
            network=self.network,
            observability=self.observability,
            storage=self.storage,
            data_bucket=self.data_bucket,
            eks_extensions=eks_extensions,
            description=f"fminfra {cfg.name}: GPU capacity and clusters",
        )
        self.compute.add_stack_dependency(self.network)
        for stateful in (self.data, self.storage, self.observability):
            if stateful is not None:
                self.compute.add_stack_dependency(stateful)

    @property
    def data_bucket(self) -> s3.IBucket | None:
        """The data bucket (created or imported), for grants to node roles; None without storage."""
        if self.data is not None:
            return self.data.bucket
        return self.storage.bucket if self.storage is not None else None

    @property
    def stacks(self) -> list[cdk.Stack]:
        """The stacks of this environment in deploy order."""
        return [c for c in self.node.children if isinstance(c, cdk.Stack)]
