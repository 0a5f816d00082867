"""`fminfra accept ENV`: prove a deployed environment trains, with the acceptance jobs of scripts/jobs/.

On a Slurm (HyperPod) environment it runs on the cluster's login node, where fminfra is installed
and /fsx is mounted: it copies the scripts to the shared file system, submits with `sbatch` per
training group an nccl-tests job on two nodes, the PyTorch DDP smoke job and the FSx fio probe on
the whole group, waits (`sacct`) while printing each job's state, then reads the results, prints
a table and writes a JSON report. `--dry-run` prints what would be submitted, offline, anywhere.
On HyperPod EKS (and inference-only EKS, which has nothing to accept) main hands over to
accept_eks.py: the same jobs as Kubernetes objects (accept_manifests.py), through kubectl.

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

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from fminfra.commands.accept_results import (
    ResultError,
    TorchrunFailure,
    busbw_at,
    nccl_ofi_provider,
    parse_nccl_tests,
    parse_torchrun,
    read_fsx_results,
)
from fminfra.commands.common import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, UsageError, load_configs
from fminfra.config import EnvironmentConfig
from fminfra.config.pipeline import ACCEPTED_ORCHESTRATORS, DEFAULT_PIPELINE_FILE, AcceptThresholds, load_pipeline
from fminfra.config.storage import lustre_throughput_gb_per_s
from fminfra.core.resources import instance_table, scripts_root
from fminfra.core.versions import load_versions

HELP = "run the acceptance jobs (NCCL, DDP, FSx) on a deployed environment; --dry-run prints them"

# Where the HyperPod lifecycle scripts mount FSx for Lustre (fminfra/stacks/compute/clusters.py, FsxMount).
FSX_MOUNT = "/fsx"
NCCL_NODES = 2  # the thresholds were measured on two nodes (docs/facts/instances.md#nccl-allreduce-p5-two-node)
DONE_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE")


@dataclass(frozen=True)
class NcclThreshold:
    fail_gbps: float | None
    warn_gbps: float | None
    source: str


def read_instance_thresholds(path: Path | None = None) -> dict[str, tuple[float | None, float | None]]:
    """instance type -> (nccl_fail_gbps, nccl_warn_gbps) from instance_types.tsv ("-" = none measured)."""
    path = path or instance_table()
    table: dict[str, tuple[float | None, float | None]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 8:
            raise UsageError(
                f"{path}: line {number}: expected 8 columns (name gpus efa nvswitch fabric arch nccl_fail_gbps nccl_warn_gbps)"
            )
        try:
            fail, warn = (None if v == "-" else float(v) for v in fields[6:8])
        except ValueError:
            raise UsageError(f"{path}: line {number}: nccl_fail_gbps/nccl_warn_gbps must be numbers or '-', got {fields[6:8]}") from None
        table[fields[0]] = (fail, warn)
    return table


def nccl_threshold(
    instance_type: str, override: AcceptThresholds | None, table: dict[str, tuple[float | None, float | None]]
) -> NcclThreshold:
    """pipeline.yaml's accept thresholds win; else the type's measured row; else none (the gate fails)."""
    if override is not None and override.nccl_fail_gbps is not None:
        warn = override.nccl_warn_gbps if override.nccl_warn_gbps is not None else override.nccl_fail_gbps
        return NcclThreshold(override.nccl_fail_gbps, warn, "pipeline.yaml accept")
    measured_fail, measured_warn = table.get(instance_type, (None, None))
    if measured_fail is None:
        return NcclThreshold(None, None, f"none: instance_types.tsv has no measured threshold for {instance_type}")
    return NcclThreshold(
        measured_fail, measured_warn if measured_warn is not None else measured_fail, f"instance_types.tsv ({instance_type})"
    )


@dataclass(frozen=True)
class SlurmJob:
    kind: str  # nccl | ddp | fsx
    group: str
    nodes: int
    gpus_per_node: int
    script: str
    results: str  # folder under the run folder
    extra_env: tuple[tuple[str, str], ...] = ()
    efa: bool = True  # the instance type has EFA interfaces: NCCL must select the efa provider

    def sbatch(self, run_dir: str) -> list[str]:
        env = [
            f"FMINFRA_JOBS_DIR={run_dir}/scripts/jobs",
            f"FMINFRA_RESULTS_DIR={run_dir}/{self.results}",
            f"GPUS_PER_NODE={self.gpus_per_node}",
            *(f"{k}={v}" for k, v in self.extra_env),
        ]
        return [
            "sbatch",
            "--parsable",
            f"--job-name=fminfra-accept-{self.kind}-{self.group}",
            f"--partition={self.group}",
            f"--nodes={self.nodes}",
            f"--output={run_dir}/{self.results}/slurm-%j.out",
            "--export=ALL," + ",".join(env),
            f"{run_dir}/scripts/jobs/{self.script}",
        ]


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

    @property
    def missing(self) -> list[str]:
        """What the gate cannot pass without, whatever the cluster does (`missing_for_a_run`)."""
        return missing_for_a_run(self.cfg.name, self.nccl, self.image_unpinned)


def missing_for_a_run(environment: str, nccl: Mapping[str, NcclThreshold], image_unpinned: str | None) -> list[str]:
    """What a real run fails on whatever the cluster does: a group without an NCCL threshold, or a
    DDP image the job refuses. A dry run reports these and still exits 0 (`end_dry_run`)."""
    out = [
        f"nccl {group}: no threshold ({t.source}); set accept.nccl_fail_gbps for {environment} in pipeline.yaml"
        for group, t in nccl.items()
        if t.fail_gbps is None or t.warn_gbps is None
    ]
    if image_unpinned is not None:
        out.append(
            f"ddp: image {image_unpinned} is not pinned by digest (ACCEPT_PYTORCH_IMAGE_DIGEST in versions.env); "
            "the job refuses it unless FMINFRA_ALLOW_UNPINNED=1 is exported"
        )
    return out


def end_dry_run(verb: str, environment: str, missing: list[str]) -> int:
    """The end of every dry run: nothing ran, so nothing failed (exit 0); what a real run would
    miss goes to stderr, one line each, after the plan on stdout."""
    for line in missing:
        print(f"{verb} {environment} --dry-run: missing: {line}", file=sys.stderr)
    if missing:
        print(f"{verb} {environment} --dry-run: nothing ran; a real run fails until the missing items above are set", file=sys.stderr)
    return EXIT_OK


def slurm_plan(
    cfg: EnvironmentConfig, run_id: str, overrides: AcceptThresholds | None, table: dict[str, tuple[float | None, float | None]]
) -> Plan:
    """The jobs `accept` submits for a Slurm environment (partitions are named after the groups:
    fminfra's HyperPod provisioning parameters, fminfra/stacks/compute/clusters.py)."""
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
            plan.jobs.append(SlurmJob("nccl", group.name, NCCL_NODES, gpus, "nccl-tests.sbatch", f"{group.name}/nccl", efa=efa))
        else:
            plan.notes.append(f"group {group.name}: {group.count} node; the NCCL thresholds are for {NCCL_NODES} nodes, no NCCL job")
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
    if plan.fsx_baseline_gb_per_s is not None:
        out(f"fsx: fio read and write summed over the nodes: warn below the baseline {plan.fsx_baseline_gb_per_s:.2f} GB/s")
    for note in plan.notes:
        out(f"note: {note}")


# --- running on the login node ---------------------------------------------------------------------


def _run(cmd: list[str]) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise UsageError(f"{shlex.join(cmd)}: exit {result.returncode}: {(result.stderr or result.stdout).strip()}")
    return result.stdout


def job_state(job_id: str) -> str:
    """The job's state from `sacct -X -n -P -o State` (PENDING, RUNNING, COMPLETED, FAILED, ...)."""
    lines = [line for line in _run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State"]).splitlines() if line.strip()]
    return lines[0].split()[0] if lines else "PENDING"


def wait_for(jobs: dict[str, str], timeout_s: float, poll_s: float, clock: Callable[[], float] = time.monotonic) -> dict[str, str]:
    """Poll every job until it ends or the timeout passes; print each change of state."""
    states = dict.fromkeys(jobs, "SUBMITTED")
    deadline = clock() + timeout_s
    while True:
        for job_id, name in jobs.items():
            if states[job_id] in DONE_STATES:
                continue
            state = job_state(job_id)
            if state != states[job_id]:
                print(f"{datetime.now(UTC):%H:%M:%S} {name} (job {job_id}): {state}", flush=True)
                states[job_id] = state
        if all(s in DONE_STATES for s in states.values()) or clock() >= deadline:
            return states
        time.sleep(poll_s)


@dataclass
class Check:
    name: str
    status: str  # PASS | WARN | FAIL
    figure: str
    detail: str


def evaluate(plan: Plan, run_dir: Path, states: dict[str, str], ids: dict[SlurmJob, str]) -> list[Check]:
    checks: list[Check] = []
    for job in plan.jobs:
        folder = run_dir / job.results
        state = states.get(ids[job], "?")
        name = f"{job.kind} {job.group}"
        if state not in DONE_STATES:
            checks.append(Check(name, "FAIL", "-", f"job {ids[job]} did not finish in time (last state {state}); cancelled"))
            continue
        if state != "COMPLETED":
            checks.append(Check(name, "FAIL", "-", f"job {ids[job]} ended {state} (see {folder})"))
            continue
        try:
            if job.kind == "nccl":
                checks.extend(nccl_checks(job, folder, plan.nccl[job.group], job.efa))
            elif job.kind == "ddp":
                checks.append(ddp_check(job, folder))
            else:
                checks.extend(fsx_checks(job, folder, plan.fsx_baseline_gb_per_s))
        except ResultError as exc:
            checks.append(Check(name, "FAIL", "-", str(exc)))
    return checks


def nccl_checks(job: SlurmJob, folder: Path, threshold: NcclThreshold, efa: bool) -> list[Check]:
    out = []
    for collective in ("all_reduce", "all_gather", "reduce_scatter"):
        log = folder / f"nccl-{collective}.log"
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        rows = parse_nccl_tests(text, str(log))
        busbw = busbw_at(rows)
        figure = "-" if busbw is None else f"{busbw:g} GB/s"
        sizes = ", ".join(f"{r.size_bytes >> 20} MiB {r.busbw_gbps:g}" for r in rows if r.size_bytes >= 1 << 26)
        provider = nccl_ofi_provider(text)
        if efa and provider != "efa":
            found = f"provider {provider}" if provider else "no 'NET/OFI Selected provider' line (NCCL_DEBUG=INFO)"
            out.append(Check(f"nccl {collective} {job.group}", "FAIL", figure, f"NCCL did not use EFA: {found}"))
        elif any(r.wrong for r in rows):
            out.append(Check(f"nccl {collective} {job.group}", "FAIL", figure, "wrong results reported (#wrong > 0)"))
        elif collective != "all_reduce":
            out.append(Check(f"nccl {collective} {job.group}", "PASS", figure, f"reported, no threshold; busbw by size: {sizes}"))
        elif busbw is None:
            out.append(Check(f"nccl {collective} {job.group}", "FAIL", figure, "no 1 GiB / 2 GiB rows"))
        elif threshold.fail_gbps is None or threshold.warn_gbps is None:
            out.append(Check(f"nccl {collective} {job.group}", "FAIL", figure, f"no threshold ({threshold.source})"))
        else:
            status = "FAIL" if busbw < threshold.fail_gbps else "WARN" if busbw < threshold.warn_gbps else "PASS"
            out.append(
                Check(
                    f"nccl {collective} {job.group}",
                    status,
                    figure,
                    f"fail < {threshold.fail_gbps:g}, warn < {threshold.warn_gbps:g} ({threshold.source})",
                )
            )
    return out


def ddp_check(job: SlurmJob, folder: Path) -> Check:
    log = folder / "ddp.log"
    result = parse_torchrun(log.read_text(encoding="utf-8", errors="replace") if log.exists() else "", str(log))
    name = f"ddp {job.group}"
    if isinstance(result, TorchrunFailure):
        return Check(
            name, "FAIL", "-", f"torchrun: {result.script} failed on {result.host} rank {result.rank}, exit code {result.exitcode}"
        )
    figure = f"{result.step_time_ms_median:.1f} ms/step"
    detail = f"{result.world_size} ranks, loss {result.loss_first:.4g} -> {result.loss_last:.4g}, p90 {result.step_time_ms_p90:.1f} ms"
    expected = job.nodes * job.gpus_per_node
    if result.world_size != expected:
        return Check(name, "FAIL", figure, f"{detail}: expected {expected} ranks ({job.nodes} nodes x {job.gpus_per_node} GPUs)")
    return Check(name, "PASS" if result.loss_fell else "FAIL", figure, detail + ("" if result.loss_fell else ": the loss did not fall"))


def fsx_checks(job: SlurmJob, folder: Path, baseline: float | None) -> list[Check]:
    out = []
    for rw in ("write", "read"):
        fsx = read_fsx_results(folder, rw)
        total = fsx.gb_per_s
        status = "WARN" if baseline is not None and total < baseline else "PASS"
        versus = f"baseline {baseline:.2f} GB/s" if baseline is not None else "no baseline"
        detail = f"{len(fsx.per_node)} nodes, {versus}"
        if len(fsx.per_node) != job.nodes:  # the sum would understate the file system
            status, detail = "FAIL", f"results from {len(fsx.per_node)} of {job.nodes} nodes, {versus}"
        out.append(Check(f"fsx {rw} {job.group}", status, f"{total:.2f} GB/s", detail))
    return out


def run_on_login_node(plan: Plan, timeout_s: float, poll_s: float, report: Path | None) -> int:
    if shutil.which("sbatch") is None or shutil.which("sacct") is None:
        raise UsageError("accept: sbatch/sacct not found; run `fminfra accept` on the cluster's login node, or use --dry-run")
    run_dir = Path(plan.run_dir)
    if not Path(FSX_MOUNT).is_dir():
        raise UsageError(f"accept: {FSX_MOUNT} is not mounted on this node; the jobs and results must be on the shared file system")
    for job in plan.jobs:
        (run_dir / job.results).mkdir(parents=True, exist_ok=True)
    shutil.copytree(scripts_root(), run_dir / "scripts", dirs_exist_ok=True)
    ids: dict[SlurmJob, str] = {}
    for job in plan.jobs:
        ids[job] = _run(job.sbatch(str(run_dir))).strip().split(";")[0]
        print(f"submitted {job.kind} {job.group}: job {ids[job]}", flush=True)
    states = wait_for({v: f"{k.kind} {k.group}" for k, v in ids.items()}, timeout_s, poll_s)
    for job_id, state in states.items():
        if state not in DONE_STATES:
            subprocess.run(["scancel", job_id], check=False)
    checks = evaluate(plan, run_dir, states, ids)
    return report_checks(checks, report or run_dir / "accept.json", {"environment": plan.cfg.name, "run_dir": str(run_dir)})


def report_checks(checks: list[Check], report: Path, about: dict[str, str]) -> int:
    """The table, then the JSON report (`about`, the result, every check); the exit code of the run.
    Shared by the Slurm and EKS paths (accept_eks.py)."""
    width = max(len(c.name) for c in checks) if checks else 5
    for c in checks:
        print(f"{c.status:4} {c.name:{width}} {c.figure:>14}  {c.detail}")
    failed = any(c.status == "FAIL" for c in checks)
    result = {**about, "result": "FAIL" if failed else "PASS", "checks": [c.__dict__ for c in checks]}
    report.write_text(json.dumps(result, indent=2) + "\n")
    print(f"report: {report}")
    return EXIT_CHECK_FAILED if failed else EXIT_OK


def _overrides(pipeline_file: Path | None, env: str) -> AcceptThresholds | None:
    path = pipeline_file or DEFAULT_PIPELINE_FILE
    if pipeline_file is None and not path.exists():
        return None
    if not path.exists():
        raise UsageError(f"{path}: no such pipeline file")
    pipeline, configs = load_pipeline(path)
    for entry, cfg in zip(pipeline.environments, configs, strict=True):
        if cfg.name == env:
            return entry.accept
    return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", metavar="ENV", help="environment name (config/ENV.yaml) or config file")
    p.add_argument("--dry-run", action="store_true", help="print what would be submitted and the thresholds; offline")
    p.add_argument(
        "--pipeline", type=Path, help="pipeline.yaml with per-environment accept thresholds (default: ./pipeline.yaml if present)"
    )
    p.add_argument("--run-id", help="name of the run folder under /fsx/fminfra-accept (default: ENV-<UTC time>)")
    p.add_argument("--timeout-minutes", type=float, default=60.0, help="give up waiting after this long (default 60)")
    p.add_argument("--poll-seconds", type=float, default=30.0, help="seconds between sacct polls (default 30)")
    p.add_argument("--report", type=Path, help="JSON report path (default: RUN/accept.json)")


def main(ns: argparse.Namespace) -> int:
    [(_, cfg)] = load_configs([ns.config])
    if ns.timeout_minutes <= 0 or ns.poll_seconds <= 0:
        raise UsageError("accept: --timeout-minutes and --poll-seconds must be greater than 0")
    orchestrator = cfg.compute.orchestrator
    if orchestrator not in (*ACCEPTED_ORCHESTRATORS, "none"):  # none: inference-only EKS, nothing to accept
        print(
            f"{ns.config}: compute.orchestrator: accept runs on slurm and eks (HyperPod) environments; {orchestrator} is not supported yet (docs/first-job.md)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    run_id = ns.run_id or f"{cfg.name}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    if not run_id.replace("-", "").replace("_", "").isalnum():
        raise UsageError(f"accept: --run-id: letters, digits, '-' and '_' only, got {run_id!r}")
    if orchestrator != "slurm":  # HyperPod EKS, or inference-only EKS (orchestrator none)
        from fminfra.commands import accept_eks

        if orchestrator == "none":
            return accept_eks.inference_only(cfg)
        overrides = _overrides(ns.pipeline, cfg.name)
        return accept_eks.main(cfg, run_id, ns.dry_run, overrides, ns.timeout_minutes * 60, ns.poll_seconds, ns.report)
    plan = slurm_plan(cfg, run_id, _overrides(ns.pipeline, cfg.name), read_instance_thresholds())
    if ns.dry_run:
        print_plan(plan)
        return end_dry_run("accept", cfg.name, plan.missing)
    return run_on_login_node(plan, ns.timeout_minutes * 60, ns.poll_seconds, ns.report)
