#!/usr/bin/env python3
"""`make test` benchmark: the wall time of `make test` (ruff, ruff format, mypy, pytest) in fresh
clones of this checkout's HEAD, after set-up, with the CPU it used and the machine's load.

Each run clones HEAD (committed work only) into a temporary folder. Set-up: by default the clone links
this checkout's installed .venv and node_modules and copies nothing else of it (.venv-checkov linked
too), the install markers kept newer than the files they depend on, so that `make test` installs
nothing, as after `make setup`; the mypy cache in .venv holds the third-party modules, and fminfra's
own modules are checked at the clone's path. `--setup` runs `make setup` in each clone instead (it
installs from PyPI and npm: minutes) and reports its time apart.

Prints one line per run and the median; issue 35's target is a median of at most 180 s.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSTALLED = (".venv", ".venv-checkov", "node_modules")
# The files the install markers depend on (Makefile: .venv/.installed, .venv-checkov/.installed,
# node_modules/.installed, .venv/mypy/.cached); tests/ci/test_codebuild_source.py's model of a source
# folder after `make setup` reads this list too.
MARKER_INPUTS = (
    "requirements.txt",
    "requirements-dev.txt",
    "requirements-d2.txt",
    "requirements-checkov.txt",
    "package.json",
    "package-lock.json",
    ".ci/mypy_third_party.py",
)
_SUMMARY = re.compile(r"=+ (.*\b(\d+) passed.* in ([\d.]+)s.*) =+")


def _load() -> float:
    return os.getloadavg()[0]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _clone(dest: Path, setup: bool) -> float:
    """A fresh clone of HEAD in dest; the seconds its set-up took."""
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(dest)], check=True)
    start = time.perf_counter()
    if setup:
        subprocess.run(["make", "setup"], cwd=dest, check=True)
    else:
        for name in INSTALLED:
            if not (ROOT / name).exists():
                raise SystemExit(f"bench_test: {ROOT / name} missing: run `make setup` in the checkout first, or pass --setup")
            (dest / name).symlink_to((ROOT / name).resolve())
        for name in MARKER_INPUTS:
            os.utime(dest / name, (946684800, 946684800))
        # the index as a clone's after `make setup`, which touches no tracked file
        subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=dest, check=True)
    return time.perf_counter() - start


def run_once(workdir: Path, setup: bool) -> dict[str, float | str]:
    repo = workdir / "repo"
    setup_s = _clone(repo, setup)
    load_before, cpu_before = _load(), _children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(["make", "test"], cwd=repo, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    cpu, load_after = _children_cpu() - cpu_before, _load()
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SystemExit(f"bench_test: make test failed (exit {proc.returncode}):\n{output[-3000:]}")
    match = _SUMMARY.search(output)
    return {
        "wall": wall,
        "cpu": cpu,
        "setup": setup_s,
        "tests": match.group(2) if match else "?",
        "pytest": float(match.group(3)) if match else float("nan"),
        "load": f"{load_before:.1f}-{load_after:.1f}",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="fresh clones to time (default 1; issue 35's figure is the median of 3)")
    parser.add_argument("--setup", action="store_true", help="run `make setup` in each clone instead of linking this checkout's installs")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs: at least 1, got {args.runs}")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    walls = []
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="fminfra-bench-test-") as tmp:
            figures = run_once(Path(tmp), args.setup)
        walls.append(float(figures["wall"]))
        setup = f", set-up {figures['setup']:.1f} s" if args.setup else ""
        print(
            f"make test, fresh clone of {head}, run {run}: {figures['wall']:6.1f} s "
            f"(pytest {figures['pytest']:.1f} s, {figures['tests']} passed; CPU {figures['cpu']:.0f} s{setup}; load {figures['load']})",
            flush=True,
        )
    print(f"make test, median of {len(walls)}: {statistics.median(walls):.1f} s (target: at most 180 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
