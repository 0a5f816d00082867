"""A pytest plugin that records, per test, the CPU it cost and its wall time: the CPU of the test's
process, of the children it reaped and of the descendants still alive (a jsii Node process, a moto
server), read from /proc (Linux). Where the suite's time goes, for issue 35 (docs/testing.md):

    PYTHONPATH=.ci .venv/bin/python -m pytest -n 2 -q -p no:cacheprovider -p pytest_cpu

Each worker (or the single process) writes `$PYTEST_CPU_DIR/cpu-<worker>.json` (default: the temporary folder):
{"tests": [[nodeid, cpu_s, wall_s], ...], "session_cpu": s}. A figure is a measurement of one run on
one machine, never a limit a test asserts.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_TICKS = os.sysconf("SC_CLK_TCK")
_ROWS: list[tuple[str, float, float]] = []


def _live_descendants_cpu() -> float:
    """user+system seconds of every live descendant of this process (/proc/PID/stat fields 14, 15)."""
    parent_of: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent_of[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS)
    total, stack, seen = 0.0, [os.getpid()], set()
    while stack:
        current = stack.pop()
        for pid, (ppid, cpu) in parent_of.items():
            if ppid == current and pid not in seen:
                seen.add(pid)
                total += cpu
                stack.append(pid)
    return total


def _cpu() -> float:
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + reaped.ru_utime + reaped.ru_stime + _live_descendants_cpu()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cpu, wall = _cpu(), time.perf_counter()
    yield
    _ROWS.append((item.nodeid, _cpu() - cpu, time.perf_counter() - wall))


def pytest_sessionfinish(session: Any) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    folder = Path(os.environ.get("PYTEST_CPU_DIR") or tempfile.gettempdir())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"cpu-{worker}.json").write_text(json.dumps({"tests": _ROWS, "session_cpu": _cpu()}))
