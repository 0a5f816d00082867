#!/usr/bin/env python3
"""How many pytest-xdist workers `make test` starts: one per core, but no more than the memory
holds at TEST_WORKER_MIB each (a worker's Python, its jsii Node process and what its tests start;
measured by .ci/bench_test_memory.py, docs/testing.md).

Cores: the CPUs this process may run on, capped by a cgroup v2 CPU quota. Memory: the smaller of
/proc/meminfo's MemAvailable and what the cgroup limit leaves (v2 memory.max - memory.current, or
v1's limit - usage): inside a container (CodeBuild) /proc/meminfo shows the host's memory.
CodeBuild's BUILD_GENERAL1_LARGE gives up to 16 GiB and 8 vCPUs
(docs/facts/pipeline.md#codebuild-compute-type-memory), so one worker per core would need 8
workers' memory. Prints the count; with --explain, a line saying why on stderr.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

# Measured peak of one worker over the whole suite, rounded up (docs/testing.md, "Workers and memory").
DEFAULT_WORKER_MIB = 3584


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cores(root: Path = Path("/"), cpus: int | None = None) -> int:
    """The CPUs this process may use (`cpus` stands in for them in tests), capped by the cgroup's quota."""
    count = len(os.sched_getaffinity(0)) if cpus is None else cpus
    quota = (_read(root / "sys/fs/cgroup/cpu.max") or "max").split()
    if quota and quota[0] != "max" and len(quota) == 2 and int(quota[1]) > 0:
        count = min(count, max(1, math.ceil(int(quota[0]) / int(quota[1]))))
    return max(1, count)


def available_mib(root: Path = Path("/")) -> int:
    meminfo = _read(root / "proc/meminfo") or ""
    kib = next((int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemAvailable:")), 0)
    candidates = [kib // 1024] if kib else []
    for limit_file, usage_file in (
        ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory.current"),
        ("sys/fs/cgroup/memory/memory.limit_in_bytes", "sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        limit, usage = _read(root / limit_file), _read(root / usage_file)
        if limit and limit.isdigit() and int(limit) < 1 << 60:  # v1 writes a huge number for "no limit"
            candidates.append((int(limit) - int(usage or 0)) // (1024 * 1024))
    return max(0, min(candidates)) if candidates else 0


def workers(n_cores: int, mib: int, per_worker_mib: int) -> int:
    """At least one; otherwise as many as both the cores and the memory allow."""
    return max(1, min(n_cores, mib // per_worker_mib))


def main(argv: list[str]) -> int:
    per = int(os.environ.get("TEST_WORKER_MIB") or DEFAULT_WORKER_MIB)
    n_cores, mib = cores(), available_mib()
    count = workers(n_cores, mib, per)
    if "--explain" in argv:
        print(f"make test: {count} pytest worker(s): {n_cores} core(s), {mib} MiB available, {per} MiB per worker", file=sys.stderr)
    print(count)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
