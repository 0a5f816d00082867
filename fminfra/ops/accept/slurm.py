"""`fminfra accept ENV`: prove a deployed environment trains, with the acceptance jobs of scripts/jobs/.

On a Slurm (HyperPod) environment it runs on the cluster's login node, where /fsx is mounted (the
run itself is `node.runner`, which `accept-remote` ships there instead): it copies the scripts to the shared file system, submits with `sbatch` per
training group an nccl-tests job on two nodes, the PyTorch DDP smoke job and the FSx fio probe on
the whole group, waits (`sacct`) while printing each job's state, then reads the results, prints
a table and writes a JSON report. `--dry-run` prints what would be submitted, offline, anywhere.
On HyperPod EKS (and inference-only EKS, which has nothing to accept) `fminfra.ops.accept.command`
hands over to `eks`: the same jobs as Kubernetes objects (`manifests`), through kubectl. The
checks and thresholds both share are in `checks`.

Thresholds (docs/first-job.md explains each):
- all_reduce bus bandwidth at 1-2 GiB on two nodes against the instance type's row of
  scripts/node/instance_types.tsv (the table validate.sh uses), or against `accept:` of the
  environment in pipeline.yaml; a type with neither fails the gate;
- the DDP job's loss must fall (scripts/jobs/ddp_smoke.py); its step time is reported;
- the fio sum over the nodes is compared with the file system's baseline throughput
  (capacity x per-TiB throughput, docs/facts/storage.md#fsx-lustre-throughput-formula): below it warns.

Exit 0 when every figure meets its threshold (warnings included), 1 when one fails, 2 on bad input.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import fminfra
from fminfra.config import EnvironmentConfig
from fminfra.config.pipeline import AcceptThresholds
from fminfra.core.resources import scripts_root
from fminfra.core.versions import load_versions
from fminfra.ops.accept.checks import NcclThreshold, SlurmJob, missing_for_a_run, nccl_threshold
from fminfra.ops.accept.manifests import NCCL_NODES, no_nccl_note
from fminfra.ops.accept.node import runner
from fminfra.ops.common import UsageError
from fminfra.promotion.rules import accept_folder_problem
from fminfra.storage.config import lustre_throughput_gb_per_s
from fminfra.storage.rules import FSX_MOUNT
from fminfra.topology.rules import network_layers, topology_in_region

# The NCCL job asks for one leaf switch, waiting at most 5 minutes for it (minutes:seconds), the default
# cap of SchedulerParameters max_switch_wait (docs/facts/jobs.md#sbatch-switches); then it runs where it got.
NCCL_SWITCHES = "1@5:00"


def unpinned_image() -> str | None:
    """The DDP job's image when versions.env pins no digest for it and FMINFRA_ALLOW_UNPINNED is not 1
    (the job would refuse to run: scripts/jobs/common.sh, docs/facts/jobs.md#accept-pytorch-image)."""
    versions = load_versions()
    if versions.get("ACCEPT_PYTORCH_IMAGE_DIGEST") or os.environ.get("FMINFRA_ALLOW_UNPINNED") == "1":
        return None
    return versions.get("ACCEPT_PYTORCH_IMAGE", "?")


@dataclass
class Plan:
    cfg: EnvironmentConfig
    run_dir: str
    jobs: list[SlurmJob]
    nccl: dict[str, NcclThreshold]  # group -> threshold
    fsx_baseline_gb_per_s: float | None
    image_unpinned: str | None = None
    notes: list[str] = field(default_factory=list)

    def for_node(self) -> runner.NodePlan:
        """What the login node needs of the plan (`fminfra accept-remote` ships it as JSON)."""
        return runner.NodePlan(
            environment=self.cfg.name,
            fsx_mount=FSX_MOUNT,
            run_dir=self.run_dir,
            jobs=self.jobs,
            nccl=self.nccl,
            fsx_baseline_gb_per_s=self.fsx_baseline_gb_per_s,
            fminfra_version=fminfra.__version__,
        )

    @property
    def missing(self) -> list[str]:
        """What the gate cannot pass without, whatever the cluster does (`missing_for_a_run`)."""
        return missing_for_a_run(self.cfg.name, self.nccl, self.image_unpinned)


def check_shared_folder(cfg: EnvironmentConfig, config_file: Path) -> None:
    """UsageError (one line, exit 2) where the nodes share no file system for the run folder
    (`accept_folder_problem`): before any plan, dry run or not."""
    lustre = cfg.storage.lustre if cfg.storage is not None else None
    if problem := accept_folder_problem(cfg.compute.orchestrator, lustre is not None):
        raise UsageError(f"{config_file}: {problem}")


def slurm_plan(
    cfg: EnvironmentConfig, run_id: str, overrides: AcceptThresholds | None, table: dict[str, tuple[float | None, float | None]]
) -> Plan:
    """The jobs `accept` submits for a Slurm environment (partitions are named after the groups:
    fminfra's HyperPod provisioning parameters, fminfra/compute/stack/clusters.py). The run folder is
    on FSx for Lustre: `check_shared_folder` first."""
    run_dir = f"{FSX_MOUNT}/fminfra-accept/{run_id}"
    lustre = cfg.storage.lustre if cfg.storage is not None else None
    baseline = lustre_throughput_gb_per_s(lustre.capacity_gib, lustre.mb_per_tib) if lustre is not None else None
    plan = Plan(cfg=cfg, run_dir=run_dir, jobs=[], nccl={}, fsx_baseline_gb_per_s=baseline, image_unpinned=unpinned_image())
    for group in cfg.compute.instance_groups:
        gpus = group.spec.gpus
        if group.count == 0:
            plan.notes.append(f"group {group.name}: count 0, nothing to run")
            continue
        if group.count >= NCCL_NODES:
            plan.nccl[group.name] = nccl_threshold(group.spec.name, overrides, table)
            efa = group.spec.max_efa_interfaces > 0
            # g5, g6: no topology to ask for; outside the regions where EC2 describes instance topology HyperPod
            # writes no tree either (docs/facts/instances.md#ec2-topology-regions)
            here = topology_in_region(cfg.region)
            # UltraServers (IMEX fabric) get HyperPod's block topology, where --switches does nothing
            # ("When a tree topology is used": docs/facts/jobs.md#sbatch-switches, hyperpod.md#hyperpod-slurm-topology)
            tree = group.spec.fabric != "imex"
            switches = NCCL_SWITCHES if network_layers(group.spec.name) and here and tree else ""
            none = "" if here else f"no EC2 topology in {cfg.region}"
            script, results = "nccl-tests.sbatch", f"{group.name}/nccl"
            plan.jobs.append(SlurmJob("nccl", group.name, NCCL_NODES, gpus, script, results, efa=efa, switches=switches, no_topology=none))
        else:
            plan.notes.append(no_nccl_note(group.name, group.count))
        plan.jobs.append(SlurmJob("ddp", group.name, group.count, gpus, "ddp-smoke.sbatch", f"{group.name}/ddp"))
        if lustre is not None:
            plan.jobs.append(
                SlurmJob("fsx", group.name, group.count, gpus, "fsx-probe.sbatch", f"{group.name}/fsx", (("FSX_DIR", FSX_MOUNT),))
            )
    return plan


def print_plan(plan: Plan, out: Callable[[str], None] = print) -> None:
    cfg = plan.cfg
    out(f"# fminfra accept {cfg.name} (dry run): HyperPod Slurm; run these on the cluster's login node")
    out(f"RUN={plan.run_dir}")
    results = sorted({j.results for j in plan.jobs})
    out("mkdir -p " + " ".join(f"$RUN/{r}" for r in results))
    out(f"cp -R {shlex.quote(str(scripts_root()))} $RUN/scripts")
    for job in plan.jobs:
        out(" ".join(job.sbatch("$RUN")))  # no argument holds a space; $RUN is left for the shell
    out("")
    out("# thresholds")
    for group, t in plan.nccl.items():
        if t.fail_gbps is None:
            out(
                f"nccl {group}: all_reduce busbw at 1-2 GiB on 2 nodes: MISSING, no threshold ({t.source}); set accept.nccl_fail_gbps for {cfg.name} in pipeline.yaml"
            )
        else:
            out(
                f"nccl {group}: all_reduce busbw at 1-2 GiB on 2 nodes: fail < {t.fail_gbps:g} GB/s, warn < {t.warn_gbps:g} GB/s ({t.source})"
            )
    out("ddp: the loss must fall (mean of the last 10 steps below half the first 10); step time reported")
    if plan.image_unpinned is not None:
        out(
            f"ddp: MISSING, image {plan.image_unpinned} is not pinned by digest (ACCEPT_PYTORCH_IMAGE_DIGEST in versions.env);"
            " the job refuses it unless FMINFRA_ALLOW_UNPINNED=1 is exported"
        )
    for job in plan.jobs:
        if job.kind == "nccl":
            asked = (
                f"--switches={job.switches} (one leaf switch)"
                if job.switches
                else f"nothing ({job.no_topology or 'no EC2 network topology'})"
            )
            out(f"placement nccl {job.group}: asks {asked}; the switches above its nodes are reported (warn when spread)")
    out("topology: scontrol show config's TopologyPlugin: warn unless topology/tree or topology/block")
    if plan.fsx_baseline_gb_per_s is not None:
        out(f"fsx: fio read and write summed over the nodes: warn below the baseline {plan.fsx_baseline_gb_per_s:.2f} GB/s")
    for note in plan.notes:
        out(f"note: {note}")


# --- running on the login node ---------------------------------------------------------------------


def run_on_login_node(plan: Plan, timeout_s: float, poll_s: float, report: Path | None) -> int:
    """`fminfra accept` on the login node: the scripts into the run folder, then what
    `fminfra accept-remote` ships and starts there (`node.runner`), in process."""
    node_plan = plan.for_node()
    try:
        runner.check_login_node(node_plan)
        shutil.copytree(scripts_root(), Path(plan.run_dir) / "scripts", dirs_exist_ok=True)
        return runner.run(node_plan, timeout_s, poll_s, report)
    except runner.NodeError as exc:
        raise UsageError(str(exc)) from None
