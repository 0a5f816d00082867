"""The modules that moved in 0.3.0 (the concept layout, docs/layout.md), importable under their old
names until 0.4.0, with a DeprecationWarning that names the new one.

`import fminfra` installs one import hook: an old name resolves to the module object of its new
name (the same module, not a copy), so `from fminfra.commands.gate import cfn_lint` keeps working.
Two old names are taken by new packages and have no alias: `fminfra.observability` (its code is
now `fminfra.observability.rules`) and `fminfra.cli` (now `fminfra.cli.main`). CHANGELOG.md lists
every move.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

# old module -> new module
MOVED = {
    "fminfra.checks": "fminfra.policy.rules",
    "fminfra.checks.checkov": "fminfra.ops.checkov",
    "fminfra.checks.rules": "fminfra.policy.rules.checks",
    "fminfra.commands.accept": "fminfra.ops.accept.slurm",
    "fminfra.commands.accept_eks": "fminfra.ops.accept.eks",
    "fminfra.commands.accept_manifests": "fminfra.ops.accept.manifests",
    "fminfra.commands.accept_remote": "fminfra.ops.accept.remote",
    "fminfra.commands.accept_results": "fminfra.ops.accept.node.results",
    "fminfra.commands.assembly": "fminfra.core.assembly",
    "fminfra.commands.aws": "fminfra.ops.aws",
    "fminfra.commands.capacity_blocks": "fminfra.ops.capacity_blocks",
    "fminfra.commands.common": "fminfra.ops.common",
    "fminfra.commands.cost": "fminfra.ops.cost",
    "fminfra.commands.diagram": "fminfra.ops.diagram",
    "fminfra.commands.gate": "fminfra.ops.gate",
    "fminfra.commands.grafana": "fminfra.ops.grafana",
    "fminfra.commands.guard": "fminfra.ops.guard",
    "fminfra.commands.init": "fminfra.ops.init",
    "fminfra.commands.plan": "fminfra.ops.plan",
    "fminfra.commands.preflight": "fminfra.ops.preflight",
    "fminfra.commands.schema": "fminfra.ops.schema",
    "fminfra.commands.show": "fminfra.ops.show",
    "fminfra.commands.validate": "fminfra.ops.validate",
    "fminfra.config.base": "fminfra.core.config_base",
    "fminfra.config.compute": "fminfra.compute.config",
    "fminfra.config.network": "fminfra.network.config",
    "fminfra.config.observability": "fminfra.observability.config",
    "fminfra.config.storage": "fminfra.storage.config",
    "fminfra.constructs.acknowledge": "fminfra.policy.constructs.acknowledge",
    "fminfra.constructs.alerting": "fminfra.observability.constructs.alerting",
    "fminfra.constructs.amp_scraper": "fminfra.observability.constructs.amp_scraper",
    "fminfra.constructs.capacity_reservation": "fminfra.capacity.constructs.capacity_reservation",
    "fminfra.constructs.data_bucket": "fminfra.data.constructs.data_bucket",
    "fminfra.constructs.data_key": "fminfra.data.constructs.data_key",
    "fminfra.constructs.efa_security_group": "fminfra.network.constructs.efa_security_group",
    "fminfra.constructs.eks_cluster": "fminfra.eks.constructs.cluster",
    "fminfra.constructs.gpu_auto_scaling_group": "fminfra.compute.constructs.gpu_auto_scaling_group",
    "fminfra.constructs.grafana_workspace": "fminfra.observability.constructs.grafana_workspace",
    "fminfra.constructs.hyperpod": "fminfra.hyperpod.constructs.cluster",
    "fminfra.constructs.hyperpod_dependencies": "fminfra.hyperpod.constructs.dependencies",
    "fminfra.constructs.hyperpod_dependencies_handler": "fminfra.hyperpod.constructs.dependencies_handler",
    "fminfra.constructs.hyperpod_dependencies_handler.index": "fminfra.hyperpod.constructs.dependencies_handler.index",
    "fminfra.constructs.inference_node_group": "fminfra.eks.constructs.inference_node_group",
    "fminfra.constructs.kueue": "fminfra.eks.constructs.kueue",
    "fminfra.constructs.launch_template": "fminfra.compute.constructs.launch_template",
    "fminfra.constructs.lifecycle_scripts": "fminfra.hyperpod.constructs.lifecycle_scripts",
    "fminfra.constructs.log_group_key": "fminfra.observability.constructs.log_group_key",
    "fminfra.constructs.lustre": "fminfra.storage.constructs.lustre",
    "fminfra.constructs.node_bootstrap": "fminfra.compute.constructs.node_bootstrap",
    "fminfra.constructs.node_role": "fminfra.compute.constructs.node_role",
    "fminfra.constructs.placement": "fminfra.compute.constructs.placement",
    "fminfra.constructs.prometheus_workspace": "fminfra.observability.constructs.prometheus_workspace",
    "fminfra.constructs.task_governance": "fminfra.hyperpod.constructs.task_governance",
    "fminfra.constructs.vpc": "fminfra.network.constructs.vpc",
    "fminfra.core.capacity_blocks": "fminfra.capacity.rules",
    "fminfra.core.hyperpod_types": "fminfra.hyperpod.rules",
    "fminfra.core.queues": "fminfra.eks.rules",
    "fminfra.core.subnets": "fminfra.network.rules",
    "fminfra.pipeline": "fminfra.app.pipeline",
    "fminfra.pricing": "fminfra.ops.pricing",
    "fminfra.stacks.compute": "fminfra.compute.stack",
    "fminfra.stacks.compute.accept_access": "fminfra.eks.constructs.accept_access",
    "fminfra.stacks.compute.clusters": "fminfra.compute.stack.clusters",
    "fminfra.stacks.data": "fminfra.data.stack",
    "fminfra.stacks.github_oidc": "fminfra.promotion.stack",
    "fminfra.stacks.network": "fminfra.network.stack",
    "fminfra.stacks.observability": "fminfra.observability.stack",
    "fminfra.stacks.storage": "fminfra.storage.stack",
    "fminfra.stage": "fminfra.app.stage",
    "fminfra.synth": "fminfra.app.synth",
}
# Old packages that exist only as the parents of moved modules.
OLD_PACKAGES = {"fminfra.commands", "fminfra.constructs", "fminfra.stacks"}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old module name to its new module (and the old parent packages to empty ones)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in MOVED or fullname in OLD_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname in OLD_PACKAGES)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        new = MOVED.get(module.__name__)
        if new is None:
            return
        warnings.warn(f"{module.__name__} moved to {new} in fminfra 0.3.0; the old name goes in 0.4.0", DeprecationWarning, stacklevel=2)
        # the import system returns what sys.modules holds once this returns: the new module itself
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
