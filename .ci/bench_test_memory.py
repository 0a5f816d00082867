#!/usr/bin/env python3
"""Memory of the test suite per pytest-xdist worker: runs pytest (arguments as given, default the
whole suite with `-n 2`) and samples, every 200 ms, the resident memory of each worker's process
tree (the worker's Python, its jsii Node child and whatever the tests start) and of the whole run.

Prints the peak of each worker, the largest of them, and the peak of the whole run, in MiB: the
figures behind `TEST_WORKER_MIB` in the Makefile (how many workers `make test` starts in a given
memory; docs/testing.md).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from bench_synth import _tree_rss_kib  # noqa: E402  (one process-tree sampler for both benchmarks)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out.extend(int(c) for c in (task / "children").read_text().split())
    except OSError:
        pass
    return out


def main(argv: list[str]) -> int:
    args = argv or ["-n", "2", "-q"]
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=ROOT)
    per_worker: dict[int, int] = {}
    total = 0
    while proc.poll() is None:
        total = max(total, _tree_rss_kib(proc.pid))
        for child in _children(proc.pid):
            per_worker[child] = max(per_worker.get(child, 0), _tree_rss_kib(child))
        time.sleep(0.2)
    for pid, kib in sorted(per_worker.items()):
        print(f"worker pid {pid:>8}: peak RSS {kib / 1024:8.1f} MiB")
    largest = max(per_worker.values(), default=0)
    print(f"largest worker peak: {largest / 1024:.1f} MiB; whole run peak: {total / 1024:.1f} MiB; pytest exit {proc.returncode}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
