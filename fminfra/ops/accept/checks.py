"""What both acceptance backends share (Slurm: `slurm`, HyperPod EKS: `eks`) beyond the checks and the
report (`node.checks`, which also runs on the login node alone): the NCCL thresholds
(instance_types.tsv, or `accept:` of pipeline.yaml) and what a dry run says a run would miss."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from fminfra.config.pipeline import DEFAULT_PIPELINE_FILE, AcceptThresholds, load_pipeline
from fminfra.core.resources import instance_table
from fminfra.ops.accept.node.checks import (
    Check,
    NcclThreshold,
    SlurmJob,
    ddp_check,
    fsx_checks,
    nccl_checks,
    report_checks,
)
from fminfra.ops.common import EXIT_OK, UsageError

# the checks and the report, for `slurm`, `eks` and the tests, by the names they always had
__all__ = [
    "Check",
    "NcclThreshold",
    "SlurmJob",
    "ddp_check",
    "end_dry_run",
    "fsx_checks",
    "missing_for_a_run",
    "nccl_checks",
    "nccl_threshold",
    "read_instance_thresholds",
    "report_checks",
]


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
