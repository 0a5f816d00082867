"""The acceptance run on the login node: the plan (`NodePlan`, JSON when it travels), its jobs
submitted with `sbatch`, their states from `sacct` until each ends or the timeout passes, `scancel`
for the rest, then the checks and the report. Exit 0 pass, 1 a figure fails, 2 bad input."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from .checks import EXIT_BAD_INPUT, Check, NcclThreshold, SlurmJob, ddp_check, fsx_checks, nccl_checks, report_checks
from .results import ResultError

DONE_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE")


class NodeError(Exception):
    """Bad input or a node that cannot run the jobs: one line, exit 2."""


@dataclass
class NodePlan:
    """What the login node needs to run and check the jobs; `fminfra.ops.accept.slurm.Plan.for_node` makes it."""

    environment: str
    fsx_mount: str
    run_dir: str
    jobs: list[SlurmJob]
    nccl: dict[str, NcclThreshold]  # group -> threshold
    fsx_baseline_gb_per_s: float | None
    fminfra_version: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str) -> NodePlan:
        try:
            data = json.loads(text)
            jobs = [SlurmJob(**{**j, "extra_env": tuple(tuple(kv) for kv in j["extra_env"])}) for j in data.pop("jobs")]
            nccl = {group: NcclThreshold(**t) for group, t in data.pop("nccl").items()}
            return cls(jobs=jobs, nccl=nccl, **data)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise NodeError(f"{source}: not a plan of this fminfra version: {exc}") from None


def _run(cmd: list[str]) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise NodeError(f"{shlex.join(cmd)}: exit {result.returncode}: {(result.stderr or result.stdout).strip()}")
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
                print(f"{datetime.now(timezone.utc):%H:%M:%S} {name} (job {job_id}): {state}", flush=True)
                states[job_id] = state
        if all(s in DONE_STATES for s in states.values()) or clock() >= deadline:
            return states
        time.sleep(poll_s)


def evaluate(plan: NodePlan, states: dict[str, str], ids: dict[SlurmJob, str]) -> list[Check]:
    checks: list[Check] = []
    for job in plan.jobs:
        folder = Path(plan.run_dir) / job.results
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


def check_login_node(plan: NodePlan) -> None:
    if shutil.which("sbatch") is None or shutil.which("sacct") is None:
        raise NodeError("accept: sbatch/sacct not found; run `fminfra accept` on the cluster's login node, or use --dry-run")
    if not Path(plan.fsx_mount).is_dir():
        raise NodeError(f"accept: {plan.fsx_mount} is not mounted on this node; the jobs and results must be on the shared file system")


def run(plan: NodePlan, timeout_s: float, poll_s: float, report: Path | None) -> int:
    """Submit, wait, cancel what is left, check, report. The scripts are in RUN/scripts already."""
    check_login_node(plan)
    run_dir = Path(plan.run_dir)
    for job in plan.jobs:
        (run_dir / job.results).mkdir(parents=True, exist_ok=True)
    ids: dict[SlurmJob, str] = {}
    for job in plan.jobs:
        ids[job] = _run(job.sbatch(str(run_dir))).strip().split(";")[0]
        print(f"submitted {job.kind} {job.group}: job {ids[job]}", flush=True)
    states = wait_for({v: f"{k.kind} {k.group}" for k, v in ids.items()}, timeout_s, poll_s)
    for job_id, state in states.items():
        if state not in DONE_STATES:
            subprocess.run(["scancel", job_id], check=False)
    checks = evaluate(plan, states, ids)
    about = {"environment": plan.environment, "run_dir": str(run_dir), "fminfra_version": plan.fminfra_version}
    return report_checks(checks, report or run_dir / "accept.json", about)


def main(argv: Sequence[str]) -> int:
    """PLAN.json [--timeout-s S] [--poll-s S] [--report PATH]: what `fminfra accept-remote` starts."""
    import argparse

    parser = argparse.ArgumentParser(prog="fminfra_accept_node", description="run fminfra's acceptance jobs on this login node")
    parser.add_argument("plan", type=Path)
    parser.add_argument("--timeout-s", type=float, required=True)
    parser.add_argument("--poll-s", type=float, required=True)
    parser.add_argument("--report", type=Path)
    ns = parser.parse_args(argv)
    try:
        try:
            text = ns.plan.read_text(encoding="utf-8")
        except OSError as exc:
            raise NodeError(f"{ns.plan}: {exc.strerror}") from None
        return run(NodePlan.from_json(text, str(ns.plan)), ns.timeout_s, ns.poll_s, ns.report)
    except NodeError as exc:
        print(exc, file=sys.stderr)
        return EXIT_BAD_INPUT
