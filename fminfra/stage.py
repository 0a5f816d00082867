"""One environment = one cdk.Stage wiring the stacks in deploy order."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct

from fminfra.config import EnvironmentConfig
from fminfra.stacks.compute import ComputeStack
from fminfra.stacks.network import NetworkStack
from fminfra.stacks.observability import ObservabilityStack


class EnvironmentStage(cdk.Stage):
    """All stacks of one environment; promotion runs this class with another config.

    The Stage id is the environment name, so stack names read `dev-Network`, `prod-Compute`.
    """

    def __init__(self, scope: Construct, cfg: EnvironmentConfig, **kwargs: object) -> None:
        super().__init__(
            scope,
            cfg.name,
            env=cdk.Environment(account=cfg.account, region=cfg.region),
            **kwargs,  # type: ignore[arg-type]
        )
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
        self.observability = ObservabilityStack(
            self,
            "Observability",
            cfg=cfg,
            description=f"fminfra {cfg.name}: Amazon Managed Prometheus, alert rules and alerting, Grafana",
            termination_protection=cfg.removal_policy == "retain",
        )
        self.observability.add_stack_dependency(self.network)
        self.compute = ComputeStack(
            self,
            "Compute",
            cfg=cfg,
            network=self.network,
            observability=self.observability,
            description=f"fminfra {cfg.name}: GPU capacity and clusters",
        )
        self.compute.add_stack_dependency(self.network)
        self.compute.add_stack_dependency(self.observability)

    @property
    def stacks(self) -> list[cdk.Stack]:
        """The stacks of this environment in deploy order."""
        return [c for c in self.node.children if isinstance(c, cdk.Stack)]
