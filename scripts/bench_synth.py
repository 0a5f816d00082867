#!/usr/bin/env python3
"""Synth benchmark: time and peak memory of (a) an empty CDK app, (b) the full app with every
shipped config, (c) a scaled-up config (8 instance groups, 1000 nodes).

Each case runs in a fresh Python process (with its own jsii Node child), so start-up is counted
as a user pays it. Peak memory is the highest sampled resident memory of that process tree.
Prints each figure and the ratios b/a and c/b.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASE_EMPTY = """
import aws_cdk as cdk
app = cdk.App(outdir=OUTDIR)
app.synth()
"""

CASE_SHIPPED = """
import json, aws_cdk as cdk
from pathlib import Path
from fminfra.config import config_files, load_config
from fminfra.app.synth import build_app
context = json.loads(Path("cdk.json").read_text())["context"]
app = cdk.App(outdir=OUTDIR, context=context)
build_app([load_config(p) for p in config_files(Path("config"))], app=app)
app.synth()
"""

CASE_SCALED = """
import json, copy, aws_cdk as cdk, yaml
from pathlib import Path
from fminfra.config import parse_config
from fminfra.app.synth import build_app
context = json.loads(Path("cdk.json").read_text())["context"]
data = yaml.safe_load(Path("examples/ec2-odcr.yaml").read_text())
data["name"] = "scaled"
base = data["compute"]["instance_groups"][0]
data["compute"]["instance_groups"] = [
    {**copy.deepcopy(base), "name": f"trainers-{i}", "count": 125} for i in range(8)
]
app = cdk.App(outdir=OUTDIR, context=context)
build_app([parse_config(data, "scaled")], app=app)
app.synth()
"""


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of a process and all its descendants (Linux /proc), in KiB."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
            for task in Path(f"/proc/{current}/task").iterdir():
                stack.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, StopIteration, ValueError):
            continue
    return total


def run_case(code: str) -> tuple[float, float]:
    """(seconds, peak MiB) of one case in a fresh interpreter.

    Peak memory is the highest sampled sum of the resident memory of the Python process and its
    jsii Node child (every 20 ms), since the two together are what a synth costs.
    """
    with tempfile.TemporaryDirectory() as outdir:
        runner = f"OUTDIR = {outdir!r}\n" + code
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", runner], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _tree_rss_kib(proc.pid))
            time.sleep(0.02)
        wall = time.perf_counter() - start
        _, stderr = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"benchmark case failed:\n{stderr[-2000:]}")
        return wall, peak / 1024


def main() -> int:
    cases = {"a_empty_app": CASE_EMPTY, "b_shipped_configs": CASE_SHIPPED, "c_scaled_8x125_nodes": CASE_SCALED}
    figures: dict[str, tuple[float, float]] = {}
    for name, code in cases.items():
        figures[name] = run_case(code)
        seconds, mib = figures[name]
        print(f"{name:24s} synth {seconds:6.2f} s   peak RSS {mib:7.1f} MiB", flush=True)
    (a_s, a_m), (b_s, b_m), (c_s, c_m) = figures.values()
    print(f"ratio b/a: time {b_s / a_s:.2f}x  memory {b_m / a_m:.2f}x")
    print(f"ratio c/b: time {c_s / b_s:.2f}x  memory {c_m / b_m:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
