"""The checks of an acceptance run over its jobs' results (`results` parses them), the Slurm jobs
themselves (`SlurmJob.sbatch`), and the table and JSON report. Shared by `fminfra accept` on Slurm
(here, on the login node) and on HyperPod EKS (fminfra/ops/accept/eks.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .results import (
    TorchrunFailure,
    busbw_at,
    nccl_ofi_provider,
    ofi_provider_found,
    parse_nccl_tests,
    parse_torchrun,
    read_fsx_results,
)

# The exit codes of `fminfra accept` (fminfra/ops/common.py has the same; tests/ops/accept/node/ checks)
EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2


@dataclass(frozen=True)
class NcclThreshold:
    fail_gbps: float | None
    warn_gbps: float | None
    source: str


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
    # `--switches=COUNT@MAX-WAIT` (tree topology: at most COUNT leaf switches, waiting at most MAX-WAIT;
    # docs/facts/jobs.md#sbatch-switches); empty: the option is not passed
    switches: str = ""
    # why no topology is asked for or read (e.g. "no EC2 topology in eu-south-1"); empty: the type's topology
    no_topology: str = ""

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
            *([f"--switches={self.switches}"] if self.switches else []),
            f"--output={run_dir}/{self.results}/slurm-%j.out",
            "--export=ALL," + ",".join(env),
            f"{run_dir}/scripts/jobs/{self.script}",
        ]


@dataclass
class Check:
    name: str
    status: str  # PASS | WARN | FAIL
    figure: str
    detail: str


def nccl_checks(job: SlurmJob, folder: Path, threshold: NcclThreshold, efa: bool, placement: str = "") -> list[Check]:
    """The three collectives' checks; `placement` (`Placement.label`: "inside one layer-3 domain", ...)
    ends the all_reduce row's detail, so that its bus bandwidth reads with where it was measured."""
    out: list[Check] = []
    for collective in ("all_reduce", "all_gather", "reduce_scatter"):
        log = folder / f"nccl-{collective}.log"
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        rows = parse_nccl_tests(text, str(log))
        busbw = busbw_at(rows)
        figure = "-" if busbw is None else f"{busbw:g} GB/s"
        sizes = ", ".join(f"{r.size_bytes >> 20} MiB {r.busbw_gbps:g}" for r in rows if r.size_bytes >= 1 << 26)
        provider = nccl_ofi_provider(text)
        if efa and provider != "efa":
            found = ofi_provider_found(provider)
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
    if placement:
        out = [Check(c.name, c.status, c.figure, f"{c.detail}; {placement}") if "all_reduce" in c.name else c for c in out]
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


def report_checks(checks: list[Check], report: Path, about: Mapping[str, object]) -> int:
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
