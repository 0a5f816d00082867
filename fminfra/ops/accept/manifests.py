"""The acceptance jobs of `fminfra accept` as Kubernetes objects, for HyperPod on EKS.

Per training group (docs/first-job.md, "EKS"):
- nccl-tests `all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf` on two nodes as an MPIJob
  (kubeflow.org/v2beta1, the MPI operator 0.5.0 that the HyperPod dependency chart installs:
  docs/facts/jobs.md#hyperpod-chart-mpi-operator), in AWS's public nccl-tests image with EFA,
  aws-ofi-nccl and Open MPI (docs/facts/jobs.md#accept-nccl-tests-image);
- the DDP smoke job (scripts/jobs/ddp_smoke.py) on every node of the group as a HyperPodPyTorchJob
  (sagemaker.amazonaws.com/v1) of HyperPod's training operator, started by `hyperpodrun`
  (docs/facts/jobs.md#hyperpod-pytorch-job-shape), in the same nccl-tests image (EFA libfabric,
  aws-ofi-nccl) with PyTorch and the HyperPod elastic agent installed at pod start, as AWS's
  training-operator image is built (docs/facts/jobs.md#accept-eks-ddp-image); NCCL_DEBUG=INFO, so
  the check can see that NCCL selected EFA;
- the FSx for Lustre fio probe (scripts/jobs/fio_probe.sh) as an Indexed batch/v1 Job, one pod per
  node, on the environment's file system mounted at /fsx through the claim `fminfra-fsx` of the
  FSx CSI driver's static volume in the team's namespace (fminfra/eks/constructs/fsx_volume.py).

GPU and EFA requests come from the catalog (`gpus`, `max_efa_interfaces`;
docs/facts/jobs.md#eks-efa-resource-requests). Every job carries the Kueue queue label of the
training team's queue (`fminfra.eks.rules.team_queue`). The scripts travel in a ConfigMap.
Results are read back from the pods' logs: each job prints marker lines (`MARK ...`) that
`split_sections` cuts on.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fminfra import catalog
from fminfra.config import EnvironmentConfig
from fminfra.core.resources import scripts_root
from fminfra.core.versions import load_versions
from fminfra.eks.rules import DNS_LABEL, DNS_LABEL_MAX, FSX_CLAIM_NAME, INSTANCE_TYPE_LABEL, QUEUE_LABEL, team_queue
from fminfra.ops.common import UsageError
from fminfra.storage.rules import FSX_MOUNT
from fminfra.topology.rules import (
    PODSET_GROUP_NAME,
    PODSET_PREFERRED_TOPOLOGY,
    PODSET_UNCONSTRAINED_TOPOLOGY,
    job_topology_levels,
    topology_in_region,
)

MARK = "fminfra-accept"
# docs/facts/jobs.md#accept-nccl-tests-image
NCCL_TESTS_IMAGE = "public.ecr.aws/hpc-cloud/nccl-tests:cuda13.0.2-efa1.48.0-ofiv1.19.0-ncclv2.30.4-1-testsv2.18.3"
NCCL_TESTS_IMAGE_DIGEST = "sha256:a5390d3f0eb50f3e5854085e2ae0fef90b9eb4f3b7486ed4cab0d47864809d4c"
# docs/facts/jobs.md#hyperpod-elastic-agent
ELASTIC_AGENT = "hyperpod-elastic-agent==1.1.3"
# The DDP job's PyTorch: within the training operator's supported 2.4.0-2.7.1 and the agent's
# torch>=2.4.0,<2.12.0, from the CUDA 12.8 index AWS's FSDP image uses (docs/facts/jobs.md#accept-eks-ddp-image).
DDP_TORCH = "torch==2.7.1"
DDP_TORCH_INDEX = "https://download.pytorch.org/whl/cu128"
ELASTIC_AGENT_PORT = 8080
JOBS_MOUNT = "/fminfra/jobs"
SHM = "/dev/shm"  # noqa: S108 # the pod's shared memory (NCCL), a memory-backed emptyDir, not a temporary file
POD_RESULTS = "/tmp/fminfra-results"  # noqa: S108 # inside the fio pod only; printed to the log, then gone
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
NCCL_NODES = 2  # the thresholds were measured on two nodes (docs/facts/instances.md#nccl-allreduce-p5-two-node)
# Labels the operators put on the pods (docs/facts/jobs.md#acceptance-pod-labels).
MPI_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
MPI_JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
HPJOB_LABEL = "HPJob"
BATCH_JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# mpi-operator 0.5.0 names the launcher Job `<name>-launcher` and sets the workers' pod hostname to
# `<name>-worker-<i>`: both must be DNS labels, so the MPIJob's name is shorter by the longest suffix
# (docs/facts/jobs.md#mpijob-name-length).
MPI_NAME_SUFFIXES = ("-launcher", f"-worker-{NCCL_NODES - 1}")


@dataclass(frozen=True)
class EksJob:
    kind: str  # nccl | ddp | fsx
    group: str
    nodes: int
    gpus_per_node: int
    name: str
    resource: str  # what `kubectl get` calls it
    manifest: dict[str, Any]
    logs_selector: str  # the pods whose logs hold the results
    efa: bool = True
    nodes_selector: str = ""  # the pods whose nodes are the job's placement (NCCL: the workers; DDP: every pod)
    instance_type: str = ""
    region: str = ""
    # why the cluster's Kueue flavors made accept ask for no topology (empty: asked as topology_annotations says)
    flavor_note: str = ""


@dataclass
class EksPlan:
    cfg: EnvironmentConfig
    run_id: str
    namespace: str
    queue: str
    scripts: dict[str, Any]  # the ConfigMap
    jobs: list[EksJob] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def manifests(self) -> list[dict[str, Any]]:
        return [self.scripts, *(j.manifest for j in self.jobs)]


def topology_annotations(instance_type: str, region: str, flavor_note: str = "") -> dict[str, str]:
    """The pod template annotation that asks Kueue for the tightest domain that fits: the finest level
    of the type's topology, preferred, so that a group spread over several domains still runs (at the
    next level up, finally spread) and `accept` reports where it landed (docs/facts/jobs.md#kueue-tas-preferred-node-selector).
    The pods' instance-type nodeSelector stays: the "annotation or nodeSelector, not both" of task
    governance's page is about a nodeSelector on a topology label (docs/facts/hyperpod.md#hyperpod-tas-node-selector).
    None in a region where EC2 describes no instance topology: its nodes carry no network-node-layer label
    (docs/facts/instances.md#ec2-topology-regions). None where `flavor_note` says why the cluster's Kueue flavor
    for the type cannot take it: Kueue refuses an annotated pod set on a flavor that names no Topology
    (docs/facts/eks.md#kueue-tas-cluster-queue-mixing); `accept` reads the flavors before it applies the jobs
    (fminfra/ops/accept/eks.py, flavor_notes)."""
    if flavor_note or not topology_in_region(region):
        return {}
    levels = job_topology_levels(instance_type, hyperpod=True)
    return {PODSET_PREFERRED_TOPOLOGY: levels[-1]} if levels else {}


def pytorch_image() -> str:
    versions = load_versions()
    image = versions.get("ACCEPT_PYTORCH_IMAGE", "")
    digest = versions.get("ACCEPT_PYTORCH_IMAGE_DIGEST", "")
    return f"{image}@{digest}" if digest else image


def no_nccl_note(group: str, count: int) -> str:
    """The plan's note for a group too small for the NCCL job (Slurm and EKS)."""
    return f"group {group}: {count} node; the NCCL thresholds are for {NCCL_NODES} nodes, no NCCL job"


def k8s_name(*parts: str, limit: int = DNS_LABEL_MAX) -> str:
    """A DNS-1123 label from parts (lower case; a group name may carry capitals); at most `limit` characters."""
    name = "-".join(parts).lower()
    if len(name) > limit or not DNS_LABEL.match(name):
        raise ValueError(f"{name!r} is not a Kubernetes name (lower-case letters, digits and '-', at most {limit})")
    return name


def job_name(run_id: str, kind: str, group: str, limit: int = DNS_LABEL_MAX) -> str:
    """`accept-RUN-KIND-GROUP`; a group name too long for `limit` is cut and given 6 hex digits of its
    SHA-256, so that two long groups still get two names (the run id is the caller's and is not cut)."""
    whole = f"accept-{run_id}-{kind}-{group}".lower()
    if len(whole) <= limit:
        return k8s_name("accept", run_id, kind, group, limit=limit)
    digest = hashlib.sha256(group.lower().encode()).hexdigest()[:6]
    room = limit - len(f"accept-{run_id}-{kind}--{digest}")
    if room < 1:
        raise ValueError(f"run id {run_id!r} is too long for a Kubernetes name of at most {limit} characters")
    return k8s_name("accept", run_id, kind, group.lower()[:room].rstrip("-"), digest, limit=limit)


def resources(instance_type: str) -> dict[str, dict[str, int | str]]:
    """Requests = limits of a whole node: every GPU and every EFA interface of the type (catalog)."""
    spec = catalog.get(instance_type)
    amounts: dict[str, int | str] = {"nvidia.com/gpu": spec.gpus}
    if spec.max_efa_interfaces:
        amounts["vpc.amazonaws.com/efa"] = spec.max_efa_interfaces
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _meta(name: str, plan: EksPlan, kind: str, group: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": plan.namespace,
        "labels": {
            QUEUE_LABEL: plan.queue,
            "app.kubernetes.io/managed-by": "fminfra",
            "fminfra/accept-run": plan.run_id,
            "fminfra/accept-job": kind,
            "fminfra/group": group.lower(),
        },
    }


def _shm() -> dict[str, Any]:
    return {"name": "shm", "emptyDir": {"medium": "Memory"}}


def nccl_job(plan: EksPlan, group: str, instance_type: str, flavor_note: str = "") -> EksJob:
    spec = catalog.get(instance_type)
    name = job_name(plan.run_id, "nccl", group, DNS_LABEL_MAX - max(map(len, MPI_NAME_SUFFIXES)))
    np = NCCL_NODES * spec.gpus
    mpirun = [
        "mpirun", "--allow-run-as-root", "--tag-output", "-np", str(np), "-N", str(spec.gpus), "--bind-to", "none",
        "-x", "PATH", "-x", "LD_LIBRARY_PATH", "-x", "FI_PROVIDER=efa", "-x", "FI_EFA_FORK_SAFE=1", "-x", "NCCL_DEBUG=INFO",
        "--mca", "pml", "^ucx", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_exclude", "lo,docker0,veth_def_agent",
    ]  # fmt: skip
    steps = [
        f"echo {MARK} begin {c}; {shlex.join([*mpirun, f'/opt/nccl-tests/build/{c}_perf', '-b', '8', '-e', '2G', '-f', '2', '-g', '1'])}"
        for c in COLLECTIVES
    ]
    script = "set -o errexit -o pipefail\n" + "\n".join(steps) + f"\necho {MARK} end\n"
    image = f"{NCCL_TESTS_IMAGE}@{NCCL_TESTS_IMAGE_DIGEST}"
    topology = topology_annotations(instance_type, plan.cfg.region, flavor_note)

    # The launcher requests nothing: where every flavor of the ClusterQueue is topology-aware it gets a TAS
    # flavor only as one pod set group with the workers, same topology on both (docs/facts/jobs.md#kueue-podset-group).
    def grouped() -> dict[str, Any]:
        # the queue label on each pod template too: task governance's admission policy refuses a pod in its
        # namespaces without one, and the MPI operator gives its pods the template's labels, not the MPIJob's
        # (docs/facts/hyperpod.md#task-governance-pod-queue-label)
        metadata: dict[str, Any] = {"labels": {QUEUE_LABEL: plan.queue}}
        if topology:
            metadata["annotations"] = {**topology, PODSET_GROUP_NAME: name}
        return {"metadata": metadata}

    manifest = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": _meta(name, plan, "nccl", group),
        "spec": {
            "slotsPerWorker": spec.gpus,
            "launcherCreationPolicy": "WaitForWorkersReady",
            # Running: the workers (sshd) stop when the launcher ends and free the GPUs for the next job;
            # the launcher's pod stays for its log (AWS's nccl-tests MPIJob uses the same policy).
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 2},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {
                        **grouped(),
                        "spec": {
                            "restartPolicy": "OnFailure",
                            "containers": [{"name": "launcher", "image": image, "command": ["/bin/bash", "-c", script]}],
                        },
                    },
                },
                "Worker": {
                    "replicas": NCCL_NODES,
                    "template": {
                        **grouped(),
                        "spec": {
                            "nodeSelector": {INSTANCE_TYPE_LABEL: spec.hyperpod_name},
                            "containers": [
                                {
                                    "name": "worker",
                                    "image": image,
                                    "resources": resources(instance_type),
                                    "volumeMounts": [{"name": "shm", "mountPath": SHM}],
                                }
                            ],
                            "volumes": [_shm()],
                        },
                    },
                },
            },
        },
    }
    selector = f"{MPI_JOB_NAME_LABEL}={name},{MPI_JOB_ROLE_LABEL}=launcher"
    workers = f"{MPI_JOB_NAME_LABEL}={name},{MPI_JOB_ROLE_LABEL}=worker"
    efa = spec.max_efa_interfaces > 0
    resource = "mpijobs.kubeflow.org"
    return EksJob(
        "nccl", group, NCCL_NODES, spec.gpus, name, resource, manifest, selector, efa, workers, instance_type, plan.cfg.region, flavor_note
    )


def ddp_job(plan: EksPlan, group: str, instance_type: str, nodes: int, flavor_note: str = "") -> EksJob:
    spec = catalog.get(instance_type)
    name = job_name(plan.run_id, "ddp", group)
    launch = shlex.join(
        [
            "hyperpodrun", f"--nnodes={nodes}", f"--nproc-per-node={spec.gpus}", "--rdzv-backend", "hyperpod",
            f"{JOBS_MOUNT}/ddp_smoke.py",
        ]
    )  # fmt: skip
    # AWS's training-operator image: the nccl-tests image plus PyTorch and the elastic agent
    # (docs/facts/jobs.md#accept-eks-ddp-image); here installed at start, in one resolver run so the
    # agent's torch requirement cannot move torch out of the operator's range.
    install = shlex.join(["pip", "install", "--no-cache-dir", "--extra-index-url", DDP_TORCH_INDEX, DDP_TORCH, ELASTIC_AGENT])
    script = f"set -o errexit\n{install}\nexec {launch}\n"
    efa = spec.max_efa_interfaces > 0
    # NCCL_DEBUG=INFO prints `NET/OFI Selected provider is efa` (docs/facts/jobs.md#nccl-ofi-provider-line),
    # which the DDP check requires on an EFA type; FI_PROVIDER=efa as AWS's FSDP job sets it.
    env = [{"name": "NCCL_DEBUG", "value": "INFO"}]
    if efa:
        env += [{"name": "FI_PROVIDER", "value": "efa"}, {"name": "FI_EFA_FORK_SAFE", "value": "1"}]
    topology = topology_annotations(instance_type, plan.cfg.region, flavor_note)
    # One pod set, which requests the GPUs: no group needed. The annotation on the job's metadata as well as
    # on the pod template, as the HyperPod CLI writes it (docs/facts/jobs.md#hyperpod-cli-topology-annotation).
    manifest = {
        "apiVersion": "sagemaker.amazonaws.com/v1",
        "kind": "HyperPodPyTorchJob",
        "metadata": {**_meta(name, plan, "ddp", group), **({"annotations": dict(topology)} if topology else {})},
        "spec": {
            "nprocPerNode": str(spec.gpus),
            # None keeps the ended pods for their logs (docs/facts/jobs.md#hyperpod-pytorch-job-shape); accept deletes the job after reading them.
            "runPolicy": {"cleanPodPolicy": "None", "jobMaxRetryCount": 0},
            "replicaSpecs": [
                {
                    "name": "pod",
                    "replicas": nodes,
                    "template": {
                        "metadata": {"labels": {QUEUE_LABEL: plan.queue}, **({"annotations": topology} if topology else {})},
                        "spec": {
                            "nodeSelector": {INSTANCE_TYPE_LABEL: spec.hyperpod_name},
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "image": f"{NCCL_TESTS_IMAGE}@{NCCL_TESTS_IMAGE_DIGEST}",
                                    "command": ["/bin/bash", "-c", script],
                                    "env": env,
                                    "ports": [{"containerPort": ELASTIC_AGENT_PORT}],
                                    "resources": resources(instance_type),
                                    "volumeMounts": [
                                        {"name": "jobs", "mountPath": JOBS_MOUNT, "readOnly": True},
                                        {"name": "shm", "mountPath": SHM},
                                    ],
                                }
                            ],
                            "volumes": [{"name": "jobs", "configMap": {"name": plan.scripts["metadata"]["name"]}}, _shm()],
                        },
                    },
                }
            ],
        },
    }
    resource = "hyperpodpytorchjobs.sagemaker.amazonaws.com"
    pods = f"{HPJOB_LABEL}={name}"
    return EksJob("ddp", group, nodes, spec.gpus, name, resource, manifest, pods, efa, pods, instance_type, plan.cfg.region, flavor_note)


def fsx_job(plan: EksPlan, group: str, instance_type: str, nodes: int, flavor_note: str = "") -> EksJob:
    """The FSx probe: one fio pod per node, no locality. Where the type's flavor takes a topology (as the NCCL and
    DDP jobs find it), an explicit unconstrained topology request: a ClusterQueue mixing topology-aware and plain
    flavors refuses an unannotated pod set on its topology-aware ones (docs/facts/eks.md#kueue-tas-cluster-queue-mixing)."""
    spec = catalog.get(instance_type)
    unconstrained = {PODSET_UNCONSTRAINED_TOPOLOGY: "true"} if topology_annotations(instance_type, plan.cfg.region, flavor_note) else {}
    name = job_name(plan.run_id, "fsx", group)
    results = POD_RESULTS
    script = "\n".join(
        [
            "set -o errexit -o pipefail",
            # the PyTorch image has no fio (docs/facts/jobs.md#hyperpod-eks-fsx-hostpath)
            "command -v fio >/dev/null || { apt-get update -qq && apt-get install -y -qq fio >/dev/null; }",
            f"mkdir -p {results}",
            f"bash {JOBS_MOUNT}/fio_probe.sh",
            f'for f in {results}/fio-*.json; do b=${{f##*/}}; b=${{b#fio-}}; echo "{MARK} fio ${{b%.json}}"; cat "$f"; echo; done',
            f"echo {MARK} end",
        ]
    )
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name, plan, "fsx", group),
        "spec": {
            "completionMode": "Indexed",
            "completions": nodes,
            "parallelism": nodes,
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "labels": {"fminfra/accept-job": name, QUEUE_LABEL: plan.queue},
                    **({"annotations": unconstrained} if unconstrained else {}),
                },
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {INSTANCE_TYPE_LABEL: spec.hyperpod_name},
                    # one pod per node: all nodes write and read at the same time
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {"labelSelector": {"matchLabels": {"fminfra/accept-job": name}}, "topologyKey": "kubernetes.io/hostname"}
                            ]
                        }
                    },
                    "containers": [
                        {
                            "name": "fio",
                            "image": pytorch_image(),
                            "command": ["/bin/bash", "-c", script],
                            # every GPU of the node: a pod set that requests none of its queue's resources gets no
                            # flavor in a ClusterQueue of topology-aware flavors only, and waits for ever; and
                            # Kueue's topology-aware placement ignores the pod anti-affinity above and packs pods
                            # by capacity, so only a whole node's GPUs keep one pod per node
                            # (docs/facts/eks.md#kueue-tas-cluster-queue-mixing)
                            "resources": {"requests": {"nvidia.com/gpu": spec.gpus}, "limits": {"nvidia.com/gpu": spec.gpus}},
                            "env": [
                                {"name": "FSX_DIR", "value": FSX_MOUNT},
                                {"name": "FMINFRA_RESULTS_DIR", "value": results},
                                {"name": "FMINFRA_RUN_ID", "value": name},
                                {"name": "FMINFRA_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                            ],
                            "volumeMounts": [
                                {"name": "jobs", "mountPath": JOBS_MOUNT, "readOnly": True},
                                {"name": "fsx", "mountPath": FSX_MOUNT},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "jobs", "configMap": {"name": plan.scripts["metadata"]["name"]}},
                        # the file system through the FSx CSI driver's static volume, never a hostPath
                        {"name": "fsx", "persistentVolumeClaim": {"claimName": FSX_CLAIM_NAME}},
                    ],
                },
            },
        },
    }
    selector = f"{BATCH_JOB_NAME_LABEL}={name}"
    return EksJob(
        "fsx", group, nodes, spec.gpus, name, "jobs.batch", manifest, selector, instance_type=instance_type, region=plan.cfg.region
    )


def scripts_config_map(name: str, namespace: str, run_id: str, queue: str) -> dict[str, Any]:
    jobs = scripts_root() / "jobs"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "fminfra", "fminfra/accept-run": run_id},
        },
        "data": {f: (jobs / f).read_text(encoding="utf-8") for f in ("ddp_smoke.py", "fio_probe.sh")},
    }


def eks_plan(cfg: EnvironmentConfig, run_id: str, flavor_notes: Mapping[str, str] | None = None) -> EksPlan:
    """The objects `accept` applies to a HyperPod EKS environment, per training group. `flavor_notes`: per
    catalog instance type, why the cluster's Kueue flavors take no topology request (a run reads them first:
    fminfra/ops/accept/eks.py, flavor_notes); a type not in it is asked for its topology, as the dry run shows."""
    flavor_notes = flavor_notes or {}
    team = cfg.compute.acceptance_team()
    if team is None:
        raise UsageError(
            f"accept: {cfg.name} has no task governance team (compute.eks.scheduling.task_governance is off here), so no Kueue"
            " queue for the acceptance jobs; turn task governance on (docs/compute.md, scheduling)"
        )
    queue = team_queue("hyperpod-eks", team)
    plan = EksPlan(
        cfg=cfg,
        run_id=run_id,
        namespace=queue.namespace,
        queue=queue.local_queue,
        scripts=scripts_config_map(k8s_name("accept", run_id, "scripts"), queue.namespace, run_id, queue.local_queue),
    )
    for group in cfg.compute.instance_groups:
        if group.count == 0:
            plan.notes.append(f"group {group.name}: count 0, nothing to run")
            continue
        if group.count >= NCCL_NODES:
            plan.jobs.append(nccl_job(plan, group.name, group.spec.name, flavor_notes.get(group.spec.name, "")))
        else:
            plan.notes.append(no_nccl_note(group.name, group.count))
        plan.jobs.append(ddp_job(plan, group.name, group.spec.name, group.count, flavor_notes.get(group.spec.name, "")))
        if cfg.storage is not None and cfg.storage.lustre is not None:
            plan.jobs.append(fsx_job(plan, group.name, group.spec.name, group.count, flavor_notes.get(group.spec.name, "")))
    return plan


def split_sections(log: str) -> dict[str, str]:
    """Cut a job's log on `fminfra-accept begin NAME` / `fminfra-accept fio NAME` / `fminfra-accept end` lines
    (a launcher prefix such as mpirun's `[1,0]<stdout>:` is allowed before the marker)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    marker = re.compile(rf"{MARK} (?:(?:begin|fio) (\S+)|end)\s*$")
    for line in log.splitlines():
        m = marker.search(line)
        if m:
            current = sections.setdefault(m[1], []) if m[1] else None
            continue
        if current is not None:
            current.append(line)
    return {k: "\n".join(v) + "\n" for k, v in sections.items()}
