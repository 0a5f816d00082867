"""Where a training team's jobs queue on an EKS-based cluster: the contract between the scheduling
resources fminfra creates (task governance on HyperPod EKS, Kueue on EKS without HyperPod) and the
jobs it submits (`fminfra accept`). Both sides call `team_queue`; neither spells the names itself.

On HyperPod EKS, task governance creates, per team (compute quota), the namespace
`hyperpod-ns-<team>` and the Kueue LocalQueue `hyperpod-ns-<team>-localqueue` in it; jobs carry
the label `kueue.x-k8s.io/queue-name` with that queue (docs/facts/hyperpod.md#hyperpod-task-governance-names:
AWS's task governance CLI examples, the ComputeQuota schema and the HyperPod CLI's constants agree).
On EKS without HyperPod fminfra's own Kueue queues use the team's name as the namespace and
`<team>-localqueue` as the LocalQueue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DEFAULT_TEAM = "training"  # the one team of the default config: a queue holding all training GPUs
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Namespaces a team of fminfra's own Kueue (EKS without HyperPod, namespace = team name) may not take:
# Kubernetes' own, Kueue's, and the one fminfra's exporters use.
RESERVED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", "kueue-system", "monitoring")
# `fminfra accept` on HyperPod EKS needs a team queue (compute.eks.accept_access).
ACCEPT_NEEDS_TEAM = (
    "`fminfra accept` queues its jobs in a task governance team's queue, and this cluster has none; turn task governance "
    "on (eks.scheduling.task_governance: true, with the default team or eks.scheduling.teams; where it is off by default, "
    "validate's warning says why), or set accept_access: false"
)


@dataclass(frozen=True)
class TeamQueue:
    team: str
    namespace: str
    local_queue: str

    @property
    def labels(self) -> dict[str, str]:
        """The labels a job (its top-level object) needs to enter the queue."""
        return {QUEUE_LABEL: self.local_queue}


def team_queue(cluster: Literal["hyperpod-eks", "eks"], team: str = DEFAULT_TEAM) -> TeamQueue:
    if cluster == "hyperpod-eks":
        namespace = f"hyperpod-ns-{team}"
        return TeamQueue(team, namespace, f"{namespace}-localqueue")
    if cluster == "eks":
        return TeamQueue(team, team, f"{team}-localqueue")
    raise ValueError(f"cluster must be 'hyperpod-eks' or 'eks', got {cluster!r}")
