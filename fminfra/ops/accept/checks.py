"""What both acceptance backends share (Slurm: `slurm`, HyperPod EKS: `eks`): the NCCL thresholds
(instance_types.tsv, or `accept:` of pipeline.yaml), the checks over the jobs' results, and the
table and JSON report of a run."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fminfra.config.pipeline import DEFAULT_PIPELINE_FILE, AcceptThresholds, load_pipeline
from fminfra.core.resources import instance_table
from fminfra.ops.accept.results import (
    TorchrunFailure,
    busbw_at,
    nccl_ofi_provider,
    ofi_provider_found,
    parse_nccl_tests,
    parse_torchrun,
    read_fsx_results,
)
from fminfra.ops.common import EXIT_CHECK_FAILED, EXIT_OK, UsageError


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


@dataclass
class Check:
    name: str
    status: str  # PASS | WARN | FAIL
    figure: str
    detail: str


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
