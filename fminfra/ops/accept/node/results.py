"""Parsers of the acceptance jobs' outputs (scripts/jobs/) and the checks `fminfra accept` runs on them.

- nccl-tests (`all_reduce_perf` and friends): the result table, whatever the launcher prefixes
  each line with (`srun --label` writes `0: `, `mpirun --tag-output` writes `[1,0]<stdout>:`).
- torchrun: the result line of scripts/jobs/ddp_smoke.py, and torchrun's own failure summary
  (`ChildFailedError` ... `Root Cause (first observed failure)`).
- fio `--output-format=json`: bytes moved over the job's run time, per file (one per node and phase).

The outputs these parsers were written against are recorded in tests/data/jobs/ with their sources.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

GIB = 1 << 30

# A result row of nccl-tests: size count type redop root, then time algbw busbw #wrong twice
# (out-of-place, in-place). The launcher's prefix, if any, is skipped.
_NCCL_ROW = re.compile(
    r"^(?:\s*\d+:\s|\s*\[\d+,\d+\]<stdout>:)?\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)"
    r"\s+(?P<time>[\d.]+)\s+(?P<algbw>[\d.]+)\s+(?P<busbw>[\d.]+)\s+(?P<wrong>\S+)"
    r"\s+(?P<ip_time>[\d.]+)\s+(?P<ip_algbw>[\d.]+)\s+(?P<ip_busbw>[\d.]+)\s+(?P<ip_wrong>\S+)\s*$"
)


class ResultError(ValueError):
    """An output that does not hold what its job should have written (names the file and why)."""


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    busbw_gbps: float  # out-of-place bus bandwidth, GB/s
    in_place_busbw_gbps: float
    wrong: int  # out-of-place + in-place #wrong (N/A counts as 0)


def _wrong(value: str) -> int:
    return 0 if value == "N/A" else int(value)


def parse_nccl_tests(text: str, source: str = "nccl-tests output") -> list[NcclRow]:
    """The result rows of one nccl-tests run; ResultError when there are none."""
    rows = []
    for line in text.splitlines():
        m = _NCCL_ROW.match(line)
        if m:
            rows.append(
                NcclRow(
                    size_bytes=int(m["size"]),
                    busbw_gbps=float(m["busbw"]),
                    in_place_busbw_gbps=float(m["ip_busbw"]),
                    wrong=_wrong(m["wrong"]) + _wrong(m["ip_wrong"]),
                )
            )
    if not rows:
        raise ResultError(f"{source}: no nccl-tests result rows (size count type redop root time algbw busbw #wrong ...)")
    return rows


# NCCL_DEBUG=INFO names the libfabric provider aws-ofi-nccl selected (docs/facts/jobs.md#nccl-ofi-provider-line);
# the case of "provider" differs between plugin versions.
_OFI_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is ([A-Za-z0-9_-]+)")


def ofi_provider_found(provider: str | None) -> str:
    """What a run's log says about the provider, for the failure message when it is not EFA."""
    return f"provider {provider}" if provider else "no 'NET/OFI Selected provider' line (NCCL_DEBUG=INFO)"


def nccl_ofi_provider(text: str) -> str | None:
    """The provider aws-ofi-nccl selected ("efa"), or None when no rank logged one (no NCCL_DEBUG=INFO,
    or NCCL did not load the plugin and fell back to sockets)."""
    m = _OFI_PROVIDER.search(text)
    return m[1] if m else None


def busbw_at(rows: list[NcclRow], sizes: tuple[int, ...] = (GIB, 2 * GIB)) -> float | None:
    """The lowest out-of-place bus bandwidth at the given message sizes (1 and 2 GiB, as validate.sh)."""
    found = [r.busbw_gbps for r in rows if r.size_bytes in sizes]
    return min(found) if found else None


@dataclass(frozen=True)
class DdpResult:
    world_size: int
    steps: int
    step_time_ms_median: float
    step_time_ms_p90: float
    loss_first: float
    loss_last: float
    loss_fell: bool


@dataclass(frozen=True)
class TorchrunFailure:
    script: str
    rank: int | None
    host: str | None
    exitcode: int | None


_RESULT_LINE = re.compile(r"fminfra-ddp result (\{.*\})\s*$")
_FAILED = re.compile(r"^\s*(\S+) FAILED\s*$")
_FIELD = re.compile(r"^\s*(rank|host|exitcode)\s*:\s*(\S+)")


def parse_torchrun(text: str, source: str = "torchrun output") -> DdpResult | TorchrunFailure:
    """The DDP smoke job's result, or torchrun's root-cause failure; ResultError when neither is there."""
    lines = text.splitlines()
    if any("ChildFailedError" in line for line in lines):
        script = next((m[1] for m in map(_FAILED.match, lines) if m), "?")
        start = next((i for i, line in enumerate(lines) if "Root Cause" in line), None)
        fields: dict[str, str] = {}
        if start is not None:
            for line in lines[start + 1 :]:
                if line.startswith("="):
                    break
                m = _FIELD.match(line)
                if m and m[1] not in fields:
                    fields[m[1]] = m[2]
        rank = fields.get("rank")
        code = fields.get("exitcode")
        return TorchrunFailure(
            script=script,
            rank=int(rank) if rank and rank.lstrip("-").isdigit() else None,
            host=fields.get("host"),
            exitcode=int(code) if code and code.lstrip("-").isdigit() else None,
        )
    for line in reversed(lines):
        m = _RESULT_LINE.search(line)
        if not m:
            continue
        try:
            data = json.loads(m[1])
            return DdpResult(
                world_size=int(data["world_size"]),
                steps=int(data["steps"]),
                step_time_ms_median=float(data["step_time_ms"]["median"]),
                step_time_ms_p90=float(data["step_time_ms"]["p90"]),
                loss_first=float(data["loss_first"]),
                loss_last=float(data["loss_last"]),
                loss_fell=bool(data["loss_fell"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ResultError(f"{source}: malformed fminfra-ddp result line: {exc}") from None
    raise ResultError(f"{source}: neither a 'fminfra-ddp result' line nor a torchrun failure summary")


@dataclass(frozen=True)
class FioResult:
    bytes_moved: int
    seconds: float

    @property
    def gb_per_s(self) -> float:
        return self.bytes_moved / self.seconds / 1e9


def parse_fio_json(text: str, rw: str, source: str = "fio output") -> FioResult:
    """Bytes read or written (rw = "read" | "write") over the longest job's run time.

    Uses `io_bytes` (bytes) and `runtime` (milliseconds) of each job, which every fio 3.x JSON
    has, rather than `bw` (KiB/s) or `bw_bytes` (only in newer versions). Anything fio printed
    before the JSON (warnings) is skipped."""
    if rw not in ("read", "write"):
        raise ValueError(f"rw must be read or write, got {rw!r}")
    start = text.find("{")
    try:
        data = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as exc:
        raise ResultError(f"{source}: not fio JSON output: {exc}") from None
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not jobs:
        raise ResultError(f"{source}: no 'jobs' in the fio JSON output")
    moved, runtime_ms = 0, 0
    for job in jobs:
        if job.get("error"):
            raise ResultError(f"{source}: fio job {job.get('jobname')!r} reported error {job['error']}")
        part = job.get(rw) or {}
        moved += int(part.get("io_bytes", 0))
        runtime_ms = max(runtime_ms, int(part.get("runtime", 0)))
    if moved == 0 or runtime_ms == 0:
        raise ResultError(f"{source}: fio moved no {rw} bytes")
    return FioResult(bytes_moved=moved, seconds=runtime_ms / 1000)


@dataclass
class FsxResult:
    """The nodes' fio results of one phase, added up: they ran at the same time."""

    per_node: dict[str, FioResult] = field(default_factory=dict)

    @property
    def gb_per_s(self) -> float:
        return sum(r.gb_per_s for r in self.per_node.values())


def read_fsx_results(results_dir: Path, rw: str) -> FsxResult:
    """fio-<node>-<rw>.json of every node in a results folder (scripts/jobs/fsx-probe.sbatch)."""
    out = FsxResult()
    for path in sorted(results_dir.glob(f"fio-*-{rw}.json")):
        node = path.name[len("fio-") : -len(f"-{rw}.json")]
        out.per_node[node] = parse_fio_json(path.read_text(encoding="utf-8", errors="replace"), rw, str(path))
    if not out.per_node:
        raise ResultError(f"{results_dir}: no fio-<node>-{rw}.json files")
    return out
