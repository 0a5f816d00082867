"""`fminfra accept ENV` for HyperPod on EKS: apply the jobs of accept_manifests, wait, read the logs, check.

How it reaches the cluster (docs/facts/jobs.md#eks-kubectl-get-token): the EKS API
(`eks:DescribeCluster`, boto3) gives the API server's endpoint and CA; a kubeconfig written to a
temporary folder has kubectl authenticate with `aws eks get-token` (an IAM token), as
`aws eks update-kubeconfig` writes it. kubectl must be on PATH, version 1.33-1.35 for a 1.34
cluster (checked first: `check_kubectl_version`, exit 2 outside the range; the CDK kubectl layer
fminfra deploys with ships 1.34.5: docs/facts/eks.md#eks-kubectl-layer-v34),
and the caller needs an EKS access entry (`compute.eks.admin_principal_arns`) and a network path to
the endpoint (private only unless `public_access_cidrs` is set).

Then: `kubectl apply` the ConfigMap and jobs, poll each job's conditions every --poll-seconds
(printing each change), read the pods' logs into --results-dir (default ./accept-RUN), run the
checks of accept.py on them (the same parsers and thresholds as on Slurm), print the table and
write the JSON report; on timeout the jobs are deleted. Exit 0 / 1 / 2 as accept.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from fminfra import catalog
from fminfra.config import EnvironmentConfig
from fminfra.ops.accept import checks as accept
from fminfra.ops.accept.manifests import COLLECTIVES, EksJob, EksPlan, eks_plan, split_sections, topology_annotations
from fminfra.ops.accept.node.placement import Level, Placement, busbw_by_placement, placement_check
from fminfra.ops.accept.node.results import ResultError, nccl_ofi_provider, ofi_provider_found
from fminfra.ops.accept.slurm import unpinned_image
from fminfra.ops.common import EXIT_OK, UsageError
from fminfra.storage.config import lustre_throughput_gb_per_s
from fminfra.topology.rules import job_topology_levels, topology_in_region

# The condition types that end a job, per resource, and the one that means success
# (docs/facts/jobs.md#acceptance-job-conditions).
SUCCESS = {"mpijobs.kubeflow.org": "Succeeded", "hyperpodpytorchjobs.sagemaker.amazonaws.com": "Completed", "jobs.batch": "Complete"}
FAILED = "Failed"
NOT_SUBMITTED = "NotSubmitted"
LOCAL_QUEUE = "localqueues.kueue.x-k8s.io"  # Kueue's namespaced LocalQueue (docs/facts/jobs.md#kueue-local-queue)
# Kueue's cluster-scoped ResourceFlavor; `spec.topologyName` names its Topology (docs/facts/eks.md#kueue-topology-aware-scheduling)
RESOURCE_FLAVORS = "resourceflavors.kueue.x-k8s.io"
NO_RESOURCE_TYPE = "the server doesn't have a resource type"
UNREACHABLE = "Unable to connect to the server"  # kubectl, when the endpoint does not answer (docs/facts/eks.md#kubectl-unable-to-connect)


def eks_client(region: str) -> Any:
    import boto3

    return boto3.client("eks", region_name=region)


def kubectl_minors(cfg: EnvironmentConfig) -> tuple[int, int]:
    """The kubectl minor versions that work with the environment's cluster: one minor either side of
    it (docs/facts/eks.md#kubectl-version-skew); 1.33-1.35 for a 1.34 cluster."""
    assert cfg.compute.eks is not None
    minor = int(cfg.compute.eks.kubernetes_version.split(".")[1])
    return minor - 1, minor + 1


def check_kubectl_version(cfg: EnvironmentConfig) -> str:
    """kubectl's client version (`kubectl version --client -o json`: clientVersion.major/minor,
    docs/facts/eks.md#kubectl-version-json); UsageError (exit 2) outside kubectl_minors. GitHub's
    hosted runners carry the newest stable kubectl (docs/facts/pipeline.md#github-runner-kubectl-latest)."""
    low, high = kubectl_minors(cfg)
    wanted = f"1.{low}-1.{high} for the {cfg.compute.eks.kubernetes_version} cluster"  # type: ignore[union-attr]
    result = subprocess.run(["kubectl", "version", "--client", "-o", "json"], capture_output=True, text=True, check=False, timeout=60)
    try:
        info = json.loads(result.stdout)["clientVersion"]
        major, minor = int(info["major"]), int(re.match(r"[0-9]+", info["minor"])[0])  # type: ignore[index]
    except (ValueError, KeyError, TypeError):
        raise UsageError(
            f"accept: `kubectl version --client -o json` gave no client version (exit {result.returncode}): install kubectl {wanted}"
        ) from None
    found = info.get("gitVersion") or f"{major}.{minor}"
    if major != 1 or not low <= minor <= high:
        raise UsageError(f"accept: kubectl {found} on PATH; {wanted} (one minor version either side): install kubectl 1.{low + 1}.x")
    return str(found)


def describe_cluster(cfg: EnvironmentConfig, client: Any | None = None) -> dict[str, Any]:
    """The EKS cluster fminfra created for the environment (`fminfra-ENV-eks`); UsageError when absent or not ACTIVE."""
    from botocore.exceptions import BotoCoreError, ClientError

    name = cfg.physical_name("eks")
    client = client or eks_client(cfg.region)
    try:
        cluster = client.describe_cluster(name=name)["cluster"]
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "ResourceNotFoundException":
            raise UsageError(f"accept: EKS cluster {name} not found in {cfg.region}: deploy {cfg.name} first (cdk deploy)") from None
        raise UsageError(f"accept: eks:DescribeCluster {name}: {code}: {exc.response.get('Error', {}).get('Message', '')}") from None
    except BotoCoreError as exc:
        raise UsageError(f"accept: eks:DescribeCluster {name}: {exc}") from None
    if cluster.get("status") != "ACTIVE":
        raise UsageError(f"accept: EKS cluster {name} is {cluster.get('status')}, not ACTIVE")
    return cluster


def kubeconfig(cluster: dict[str, Any], region: str) -> dict[str, Any]:
    """What `aws eks update-kubeconfig` writes: endpoint, CA, and an exec credential from `aws eks get-token`."""
    name = cluster["name"]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": cluster["endpoint"], "certificate-authority-data": cluster["certificateAuthority"]["data"]},
            }
        ],
        "users": [
            {
                "name": name,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "aws",
                        "args": ["--region", region, "eks", "get-token", "--cluster-name", name, "--output", "json"],
                    }
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


class Kubectl:
    def __init__(self, config_file: Path, private_endpoint: bool = False) -> None:
        self.config_file = config_file
        self.private_endpoint = private_endpoint

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        cmd = ["kubectl", "--kubeconfig", str(self.config_file), *args]
        result = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise self.failure(args, result)
        return result.stdout

    def failure(self, args: tuple[str, ...], result: subprocess.CompletedProcess[str]) -> UsageError:
        """One line; where the API endpoint did not answer, what the caller needs (kubectl's
        `Unable to connect to the server`: docs/facts/eks.md#kubectl-unable-to-connect)."""
        message = (result.stderr or result.stdout).strip()
        if UNREACHABLE in message:
            where = (
                "the endpoint is private (compute.eks.public_access_cidrs empty): run accept from the cluster's VPC, "
                'with TCP 443 allowed into the cluster security group (docs/promotion.md, "A private EKS endpoint")'
                if self.private_endpoint
                else "check the network path to the endpoint and compute.eks.public_access_cidrs"
            )
            return UsageError(f"accept: the cluster's API endpoint did not answer ({message}); {where}")
        return UsageError(f"kubectl {' '.join(args[:3])}: exit {result.returncode}: {message}")

    def exists(self, *args: str) -> bool:
        """False when the API server answers NotFound (kubectl's `Error from server (NotFound)`); other errors raise."""
        cmd = ["kubectl", "--kubeconfig", str(self.config_file), *args, "-o", "name"]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode == 0:
            return True
        if "NotFound" in result.stderr:
            return False
        raise self.failure(args, result)

    def json(self, *args: str) -> Any:
        out = self(*args, "-o", "json")
        try:
            return json.loads(out)
        except json.JSONDecodeError:
            raise UsageError(f"kubectl {' '.join(args[:3])}: not JSON: {out[:200]!r}") from None


@contextmanager
def connect(cfg: EnvironmentConfig, client: Any | None = None) -> Iterator[tuple[dict[str, Any], Kubectl]]:
    """The environment's cluster and a kubectl for it: kubectl's version checked, the cluster
    described, a kubeconfig in a temporary folder (removed at the end)."""
    if shutil.which("kubectl") is None:
        raise UsageError("accept: kubectl not found on PATH (1.33-1.35 for a 1.34 cluster); or use --dry-run")
    check_kubectl_version(cfg)
    cluster = describe_cluster(cfg, client)
    with tempfile.TemporaryDirectory(prefix="fminfra-accept-") as tmp:
        config_file = Path(tmp) / "kubeconfig"
        config_file.write_text(yaml.safe_dump(kubeconfig(cluster, cfg.region)), encoding="utf-8")
        os.chmod(config_file, 0o600)
        private = not (cluster.get("resourcesVpcConfig") or {}).get("endpointPublicAccess", True)
        yield cluster, Kubectl(config_file, private_endpoint=private)


def print_manifests(plan: EksPlan, out: Callable[[str], None] = print) -> None:
    """The YAML stream `accept` applies (`kubectl apply -f -`), exactly."""
    out(manifests_yaml(plan).rstrip("\n"))


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (scripts) as literal blocks, so the dry run reads like the files."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def manifests_yaml(plan: EksPlan) -> str:
    return yaml.dump_all(plan.manifests, Dumper=_Dumper, sort_keys=False, width=1000)


def _yaml(obj: dict[str, Any]) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=1000)


def job_state(resource: str, obj: dict[str, Any]) -> str:
    """The type of the last condition whose status is True (the state HyperPod's CLI shows), else Pending."""
    state = "Pending"
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True":
            state = str(cond.get("type"))
    return state


def done(resource: str, state: str) -> bool:
    return state in (SUCCESS[resource], FAILED)


def wait_for(
    kubectl: Kubectl,
    namespace: str,
    job: EksJob,
    deadline: float,
    poll_s: float,
    clock: Callable[[], float] = time.monotonic,
    on_poll: Callable[[], None] | None = None,
) -> str:
    """Poll one job until it ends or the deadline passes; print each change of state; return the last
    state. `on_poll` runs after each poll (`accept` reads the job's placement while its pods exist)."""
    state = "Submitted"
    while True:
        new = job_state(job.resource, kubectl.json("get", job.resource, job.name, "-n", namespace))
        if new != state:
            print(f"{datetime.now(UTC):%H:%M:%S} {job.kind} {job.group} ({job.name}): {new}", flush=True)
            state = new
        if on_poll is not None:
            on_poll()
        if done(job.resource, state) or clock() >= deadline:
            return state
        time.sleep(poll_s)


def check_queue(kubectl: Kubectl, plan: EksPlan, cluster: str) -> None:
    """The team's namespace and Kueue LocalQueue must exist: a job labelled for a missing queue would wait forever."""
    for args in (("namespace", plan.namespace), (LOCAL_QUEUE, plan.queue, "-n", plan.namespace)):
        try:
            found = kubectl.exists("get", *args)
        except UsageError as exc:
            # kubectl names a resource the API server does not serve so (docs/facts/jobs.md#kubectl-no-resource-type):
            # without Kueue's CRDs there is no LocalQueue to submit to.
            if NO_RESOURCE_TYPE not in str(exc):
                raise
            raise UsageError(
                f'accept: {cluster} has no Kueue (kubectl: the server doesn\'t have a resource type "localqueues"): '
                "install HyperPod task governance (the amazon-sagemaker-hyperpod-taskgovernance add-on, which brings "
                "Kueue and the team's LocalQueue) before accept (docs/first-job.md, EKS)"
            ) from None
        if not found:
            raise UsageError(
                f"accept: {args[0]} {args[1]} not found on {cluster}: task governance creates the team's namespace and "
                "LocalQueue with its compute quota (docs/first-job.md, EKS)"
            )


def flavor_notes(kubectl: Kubectl, instance_types: set[str]) -> dict[str, str]:
    """Per catalog instance type whose jobs would ask Kueue for a topology, why they must not: Kueue v0.19.2
    refuses an annotated pod set on a flavor that names no Topology ("Flavor %q does not support
    TopologyAwareScheduling": docs/facts/eks.md#kueue-tas-cluster-queue-mixing), and task governance does not
    publish whether its flavors name one. `kubectl get resourceflavors.kueue.x-k8s.io -o json` (a list, cluster
    scope: the ClusterRole fminfra-accept-nodes grants it). A type's flavors are those with a nodeLabels value
    equal to its HyperPod name (`ml.…`, as the jobs' nodeSelector has it), whatever the label's key: task
    governance's flavor labels are not published (docs/facts/hyperpod.md#task-governance-flavor-labels). The type
    is asked for its topology when one of them names a Topology. A read that fails (RBAC) asks for none: the
    DDP job (one pod set, which requests GPUs) is admitted either way, plainly or, in a ClusterQueue of
    topology-aware flavors only, with implied topology, but not in a ClusterQueue mixing both (an unannotated
    pod set is refused on its topology-aware flavors); the MPIJob's launcher (no requests) is not admitted in the
    former either (docs/facts/jobs.md#kueue-podset-group), and the note says so."""
    if not instance_types:
        return {}
    try:
        listing = kubectl.json("get", RESOURCE_FLAVORS)
    except UsageError as exc:
        note = (
            f"the cluster's Kueue flavors could not be read ({exc}), so none asked; should the team's ClusterQueue hold "
            f"topology-aware flavors only, the NCCL MPIJob's launcher gets no flavor, and should it mix them with plain "
            f"ones, every job is refused on its topology-aware flavors; either way they wait: grant list on "
            f"{RESOURCE_FLAVORS} (ClusterRole fminfra-accept-nodes)"
        )
        return dict.fromkeys(sorted(instance_types), note)
    flavors = [f.get("spec") or {} for f in listing.get("items", [])]
    notes: dict[str, str] = {}
    for name in sorted(instance_types):
        ml = catalog.get(name).hyperpod_name
        mine = [f for f in flavors if ml in (f.get("nodeLabels") or {}).values()]
        if not any(f.get("topologyName") for f in mine):
            notes[name] = f"the cluster's Kueue flavor for {ml} names no Topology" if mine else f"the cluster has no Kueue flavor for {ml}"
    return notes


def collect(kubectl: Kubectl, plan: EksPlan, job: EksJob, folder: Path) -> None:
    """The job's pods' logs into `folder` in the layout accept.py's checks read (nccl-*.log, ddp.log, fio-NODE-RW.json)."""
    folder.mkdir(parents=True, exist_ok=True)
    pods = kubectl.json("get", "pods", "-n", plan.namespace, "-l", job.logs_selector)
    names = sorted(p["metadata"]["name"] for p in pods.get("items", []))
    logs = {name: kubectl("logs", name, "-n", plan.namespace) for name in names}
    for name, text in logs.items():
        (folder / f"pod-{name}.log").write_text(text, encoding="utf-8")
    if job.kind == "ddp":
        (folder / "ddp.log").write_text("".join(logs.values()), encoding="utf-8")
        return
    for text in logs.values():
        for section, body in split_sections(text).items():
            if job.kind == "nccl" and section in COLLECTIVES:
                (folder / f"nccl-{section}.log").write_text(body, encoding="utf-8")
            elif job.kind == "fsx":
                (folder / f"fio-{section}.json").write_text(body, encoding="utf-8")


def placement_levels(job: EksJob) -> tuple[Level, ...]:
    """The levels a job's placement is read at: the network-node-layer labels it can ask for, coarsest first;
    none in a region where EC2 describes no instance topology (docs/facts/instances.md#ec2-topology-regions)."""
    if not topology_in_region(job.region):
        return ()
    out = []
    for label in job_topology_levels(job.instance_type, hyperpod=True):
        layer = label.rsplit("-", 1)[1]
        out.append(Level(label, f"layer-{layer} domain", f"layer-{layer} domains"))
    return tuple(out)


def no_topology(job: EksJob) -> str:
    """Why a job has no placement to read: the region, or the type."""
    if not topology_in_region(job.region):
        return f"no EC2 topology in {job.region}"
    return f"{job.instance_type} has no EC2 network topology"


def no_placement(job: EksJob, names: list[str]) -> Placement:
    return Placement((), {name: {} for name in names}, absent=no_topology(job))


def read_placement(kubectl: Kubectl, namespace: str, job: EksJob) -> Placement | None:
    """The nodes the job's pods run on (`spec.nodeName`) and each node's network-node-layer labels
    (`kubectl get nodes NAME... -o json`: one Node for one name, a List for several,
    docs/facts/jobs.md#kubectl-get-single-object); None while fewer pods than the job's nodes have a node.
    A node read that fails (RBAC: nodes are cluster-scoped, a namespaced Role cannot grant them) gives a
    placement marked unknown, with kubectl's message."""
    pods = kubectl.json("get", "pods", "-n", namespace, "-l", job.nodes_selector).get("items", [])
    names = sorted({str(p["spec"]["nodeName"]) for p in pods if (p.get("spec") or {}).get("nodeName")})
    if len(names) < job.nodes:
        return None
    levels = placement_levels(job)
    if not levels:
        return no_placement(job, names)
    try:
        listing = kubectl.json("get", "nodes", *names)
    except UsageError as exc:
        return Placement(levels, {name: {} for name in names}, unknown=str(exc))
    found = listing.get("items", []) if listing.get("kind") == "List" else [listing]
    labels = {str(n["metadata"]["name"]): (n["metadata"].get("labels") or {}) for n in found}
    return Placement(levels, {name: {lv.key: labels.get(name, {}).get(lv.key, "") for lv in levels} for name in names})


def asked_for(job: EksJob) -> str:
    """What the job's pod template asked Kueue for, for the placement row."""
    topology = topology_annotations(job.instance_type, job.region, job.flavor_note)
    return ", ".join(f"{k}: {v}" for k, v in topology.items()) or f"nothing ({job.flavor_note or no_topology(job)})"


def ddp_efa_check(check: accept.Check, folder: Path, efa: bool) -> accept.Check:
    """On an EFA type the DDP job must have run NCCL over EFA: its log (NCCL_DEBUG=INFO) names the
    provider aws-ofi-nccl selected (docs/facts/jobs.md#nccl-ofi-provider-line), as the nccl-tests check requires."""
    if not efa or check.status == "FAIL":
        return check
    log = folder / "ddp.log"
    provider = nccl_ofi_provider(log.read_text(encoding="utf-8", errors="replace") if log.exists() else "")
    if provider == "efa":
        return check
    found = ofi_provider_found(provider)
    return accept.Check(check.name, "FAIL", check.figure, f"{check.detail}; NCCL did not use EFA: {found}")


def evaluate(
    plan: EksPlan,
    thresholds: dict[str, accept.NcclThreshold],
    baseline: float | None,
    results: Path,
    states: dict[str, str],
    placements: dict[str, Placement] | None = None,
) -> list[accept.Check]:
    checks: list[accept.Check] = []
    placements = placements or {}
    for job in plan.jobs:
        name = f"{job.kind} {job.group}"
        state = states.get(job.name, "?")
        folder = results / job.group / job.kind
        if state == NOT_SUBMITTED:
            checks.append(accept.Check(name, "FAIL", "-", f"{job.name} not submitted: the time ran out before its turn"))
            continue
        if not done(job.resource, state):
            checks.append(accept.Check(name, "FAIL", "-", f"{job.name} did not finish in time (last state {state}); deleted"))
            continue
        if state != SUCCESS[job.resource]:
            checks.append(accept.Check(name, "FAIL", "-", f"{job.name} ended {state} (logs in {folder})"))
            continue
        # accept.py's checks take a Slurm job: the same group, node and GPU counts.
        as_slurm = accept.SlurmJob(job.kind, job.group, job.nodes, job.gpus_per_node, "", str(folder), efa=job.efa)
        placement = placements.get(job.name)
        if placement is not None:
            checks.append(placement_check(job.kind, job.group, placement, asked_for(job)))
        try:
            if job.kind == "nccl":
                label = placement.label() if placement is not None else ""
                checks.extend(accept.nccl_checks(as_slurm, folder, thresholds[job.group], job.efa, label))
            elif job.kind == "ddp":
                checks.append(ddp_efa_check(accept.ddp_check(as_slurm, folder), folder, job.efa))
            else:
                checks.extend(accept.fsx_checks(as_slurm, folder, baseline))
        except ResultError as exc:
            checks.append(accept.Check(name, "FAIL", "-", str(exc)))
    return checks


def run(
    plan: EksPlan,
    thresholds: dict[str, accept.NcclThreshold],
    baseline: float | None,
    timeout_s: float,
    poll_s: float,
    results: Path,
    report: Path | None,
    client: Any | None = None,
) -> int:
    cfg = plan.cfg
    with connect(cfg, client) as (cluster, kubectl):
        results.mkdir(parents=True, exist_ok=True)
        check_queue(kubectl, plan, cluster["name"])
        # Ask Kueue for a topology only where the type's flavor has one (the dry run asks wherever EC2 has one).
        asking = {j.instance_type for j in plan.jobs if topology_annotations(j.instance_type, j.region)}
        notes = flavor_notes(kubectl, asking)
        for name, note in notes.items():
            print(f"# {name}: no topology asked: {note}", flush=True)
        plan = eks_plan(cfg, plan.run_id, notes) if notes else plan
        # One job at a time, in the dry run's order: two jobs that each want every GPU of the same
        # nodes must not each start on part of them (docs/first-job.md, EKS).
        print(kubectl("apply", "-f", "-", stdin=_yaml(plan.scripts)).rstrip(), flush=True)
        deadline = time.monotonic() + timeout_s
        states: dict[str, str] = {}
        placements: dict[str, Placement] = {}
        for job in plan.jobs:
            if time.monotonic() >= deadline:
                states[job.name] = NOT_SUBMITTED
                continue
            print(kubectl("apply", "-f", "-", stdin=_yaml(job.manifest)).rstrip(), flush=True)
            watch = _placement_watch(kubectl, plan.namespace, job, placements) if job.nodes_selector else None
            states[job.name] = wait_for(kubectl, plan.namespace, job, deadline, poll_s, on_poll=watch)
            if job.nodes_selector and job.name not in placements:
                # the MPIJob's workers go when the launcher ends (cleanPodPolicy Running): seen while running, or never
                levels = placement_levels(job)
                placements[job.name] = (
                    Placement(levels, unknown="its pods were not seen on nodes while it ran") if levels else no_placement(job, [])
                )
            if done(job.resource, states[job.name]):
                collect(kubectl, plan, job, results / job.group / job.kind)
            # Ended or not, the job goes (its logs are saved): nothing of it holds GPUs for the next one.
            kubectl("delete", job.resource, job.name, "-n", plan.namespace, "--ignore-not-found", "--wait=false")
        kubectl("delete", "configmap", plan.scripts["metadata"]["name"], "-n", plan.namespace, "--ignore-not-found", "--wait=false")
    checks = evaluate(plan, thresholds, baseline, results, states, placements)
    nccl = {j.group: placements[j.name] for j in plan.jobs if j.kind == "nccl" and j.name in placements}
    about: dict[str, object] = {
        "environment": cfg.name,
        "cluster": cluster["name"],
        "namespace": plan.namespace,
        "results_dir": str(results),
        "placement": {name: p.to_json() for name, p in placements.items()},
        "nccl_busbw_by_placement": busbw_by_placement(checks, nccl),
    }
    return accept.report_checks(checks, report or results / "accept.json", about)


def _placement_watch(kubectl: Kubectl, namespace: str, job: EksJob, placements: dict[str, Placement]) -> Callable[[], None]:
    """Read the job's placement at each poll until it is known (its pods all on nodes)."""

    def watch() -> None:
        if job.name not in placements and (found := read_placement(kubectl, namespace, job)) is not None:
            placements[job.name] = found

    return watch


def inference_only(cfg: EnvironmentConfig) -> int:
    """EKS with inference node groups only: no training GPUs, nothing to accept (docs/first-job.md, "Environments without training groups")."""
    print(
        f"# fminfra accept {cfg.name}: no training groups (orchestrator {cfg.compute.orchestrator}; "
        "inference node groups only): the acceptance jobs measure multi-node training (NCCL over EFA, DDP, FSx), "
        "so nothing runs and the gate passes (docs/first-job.md)"
    )
    return EXIT_OK


def main(cfg: EnvironmentConfig, run_id: str, dry_run: bool, overrides: Any, timeout_s: float, poll_s: float, report: Path | None) -> int:
    """accept.main's EKS branch; the logs and the report go to ./accept-RUN (beside --report when given)."""
    run_id = run_id.lower()
    try:
        plan = eks_plan(cfg, run_id)
    except ValueError as exc:
        raise UsageError(f"accept: --run-id: {exc}") from None
    table = accept.read_instance_thresholds()
    thresholds = {j.group: accept.nccl_threshold(catalog_name(cfg, j.group), overrides, table) for j in plan.jobs if j.kind == "nccl"}
    lustre = cfg.storage.lustre if cfg.storage is not None else None
    baseline = lustre_throughput_gb_per_s(lustre.capacity_gib, lustre.mb_per_tib) if lustre is not None else None
    image = unpinned_image()
    if dry_run:
        print(
            f"# fminfra accept {cfg.name} (dry run): HyperPod EKS; `kubectl apply -f -` of each object below, one job at a time in this order, namespace {plan.namespace}, queue {plan.queue}"
        )
        for group, t in thresholds.items():
            limits = (
                f"fail < {t.fail_gbps:g} GB/s, warn < {t.warn_gbps:g} GB/s"
                if t.fail_gbps is not None and t.warn_gbps is not None
                else f"MISSING, no threshold; set accept.nccl_fail_gbps for {cfg.name} in pipeline.yaml"
            )
            print(f"# nccl {group}: all_reduce busbw at 1-2 GiB on 2 nodes: {limits} ({t.source})")
        print(
            "# ddp: the loss must fall (mean of the last 10 steps below half the first 10), and on an EFA type NCCL must "
            "select the efa provider (NET/OFI line, NCCL_DEBUG=INFO); step time reported"
        )
        for job in plan.jobs:
            if job.nodes_selector:
                print(
                    f"# placement {job.kind} {job.group}: asks {asked_for(job)}, where the cluster's Kueue flavor for the type names a "
                    "Topology (a run reads the flavors first; else it asks nothing); the nodes' domains are reported (warn when spread)"
                )
        if baseline is not None:
            print(f"# fsx: fio read and write summed over the nodes: warn below the baseline {baseline:.2f} GB/s")
        if image is not None:
            print(f"# ddp: MISSING, image {image} is not pinned by digest (ACCEPT_PYTORCH_IMAGE_DIGEST in versions.env)")
        for note in plan.notes:
            print(f"# note: {note}")
        print_manifests(plan)
        return accept.end_dry_run("accept", cfg.name, accept.missing_for_a_run(cfg.name, thresholds, image))
    results = (report.parent if report else Path()) / f"accept-{run_id}"
    return run(plan, thresholds, baseline, timeout_s, poll_s, results, report)


def catalog_name(cfg: EnvironmentConfig, group: str) -> str:
    return next(g.spec.name for g in cfg.compute.instance_groups if g.name == group)
