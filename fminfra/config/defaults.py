"""The defaults that depend on other fields, applied in one step before validation.

Field defaults (`Field(default=...)`) need no step. These do: a section that exists because another
field asks for it (`compute.slurm` with orchestrator slurm, `compute.eks` when EKS is needed, a
persistent_2 file system's `metadata`), HyperPod EKS's Kubernetes version (the newest on HyperPod's
list, not the newest EKS version fminfra pins), and task governance, which is on by default only where the
region's sources list compute quotas (docs/facts/hyperpod.md#hyperpod-compute-quota-schema).
`EnvironmentConfig` runs `apply_defaults` on the file's data before any validator; validators then
only read the config and return findings. The function works on the parsed YAML: whatever is not the
shape it expects is left alone for validation to report.
"""

from __future__ import annotations

from typing import Any

from fminfra.compute.config import default_kubernetes_version
from fminfra.core.regional import compute_quota_sources


def apply_defaults(data: Any) -> Any:
    """The environment file's data with the dependent defaults filled in (a copy; `data` is unchanged)."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    if isinstance(out.get("compute"), dict):
        out["compute"] = _compute_defaults(out["compute"], out.get("region"))
    storage = out.get("storage")
    if isinstance(storage, dict) and isinstance(storage.get("lustre"), dict):
        lustre = dict(storage["lustre"])
        if lustre.get("deployment_type", "persistent_2") == "persistent_2" and lustre.get("metadata") is None:
            lustre["metadata"] = {}
        out["storage"] = {**storage, "lustre": lustre}
    return out


def _compute_defaults(compute: dict[str, Any], region: Any) -> dict[str, Any]:
    out = dict(compute)
    orchestrator = out.get("orchestrator", "none")
    groups = out.get("inference_node_groups")
    if orchestrator == "slurm" and out.get("slurm") is None:
        out["slurm"] = {}
    needs_eks = orchestrator == "eks" or (isinstance(groups, list) and bool(groups))
    if needs_eks and out.get("eks") is None:
        out["eks"] = {}
    eks = out.get("eks")
    if orchestrator == "eks" and isinstance(eks, dict) and "kubernetes_version" not in eks:
        eks = out["eks"] = {**eks, "kubernetes_version": default_kubernetes_version(hyperpod=True)}
    if orchestrator == "eks" and isinstance(eks, dict) and isinstance(region, str):
        scheduling = eks.get("scheduling")
        scheduling = {} if scheduling is None else scheduling
        quotas = compute_quota_sources(region)
        if (
            isinstance(scheduling, dict)
            and quotas is not None
            and scheduling.get("task_governance") is None
            and not {"teams", "priority_classes"} & scheduling.keys()
        ):
            out["eks"] = {**eks, "scheduling": {**scheduling, "task_governance": quotas.both}}
    return out
