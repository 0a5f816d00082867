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
from .placement import Level, Placement, busbw_by_placement, placement_check
from .results import ResultError

# The plugins under which `scontrol show topology` and `--switches` mean something: HyperPod writes a tree
# for most topology-capable types and a block topology for UltraServers (docs/facts/hyperpod.md#hyperpod-slurm-topology);
# topology/default (24.11) or topology/flat (25.11) print no topology (docs/facts/jobs.md#slurm-show-topology).
TOPOLOGY_PLUGINS = ("topology/tree", "topology/block")
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


def evaluate(
    plan: NodePlan, states: dict[str, str], ids: dict[SlurmJob, str], placements: dict[SlurmJob, Placement] | None = None
) -> list[Check]:
    checks: list[Check] = []
    placements = placements or {}
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
        placement = placements.get(job)
        if placement is not None:
            why = job.no_topology or "the type has no EC2 network topology"
            asked = f"sbatch --switches={job.switches}" if job.switches else f"nothing ({why})"
            checks.append(placement_check(job.kind, job.group, placement, asked))
        try:
            if job.kind == "nccl":
                label = placement.label() if placement is not None else ""
                checks.extend(nccl_checks(job, folder, plan.nccl[job.group], job.efa, label))
            elif job.kind == "ddp":
                checks.append(ddp_check(job, folder))
            else:
                checks.extend(fsx_checks(job, folder, plan.fsx_baseline_gb_per_s))
        except ResultError as exc:
            checks.append(Check(name, "FAIL", "-", str(exc)))
    return checks


def slurm_version() -> tuple[int, int]:
    """(major, minor) from `scontrol --version` ("slurm 24.11.7"; docs/facts/jobs.md#slurm-show-topology)."""
    out = _run(["scontrol", "--version"]).split()
    try:
        major, minor = out[-1].split(".")[:2]
        return int(major), int(minor)
    except (IndexError, ValueError):
        raise NodeError(f"scontrol --version: expected 'slurm MAJOR.MINOR.PATCH', got {' '.join(out)!r}") from None


def slurm_config() -> dict[str, str]:
    """`scontrol show config` as NAME -> VALUE (`NAME = VALUE` lines; docs/facts/jobs.md#slurm-show-config-topology)."""
    config: dict[str, str] = {}
    for line in _run(["scontrol", "show", "config"]).splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            config[key.strip()] = value.strip()
    return config


def topology_plugin(config: dict[str, str] | None = None) -> str:
    """TopologyPlugin of `scontrol show config`."""
    return (slurm_config() if config is None else config).get("TopologyPlugin", "(not set)")


def topology_yaml(config: dict[str, str], version: tuple[int, int]) -> str:
    """On 25.05 and later, where Slurm's topology comes from a topology.yaml (Slurm then never reads
    TopologyPlugin, which `scontrol show config` prints as its default, topology/flat:
    docs/facts/jobs.md#slurm-topology-yaml): the file beside slurm.conf (SLURM_CONF) on this node, else
    what slurmctld runs (`scontrol show topoconf`, printed as topology.yaml, when it holds a tree or a
    block: a configless login node has no copy on disk); "" where neither."""
    if version < (25, 5):
        return ""
    conf = config.get("SLURM_CONF", "")
    if conf and (Path(conf).parent / "topology.yaml").is_file():
        return str(Path(conf).parent / "topology.yaml")
    shown = subprocess.run(["scontrol", "show", "topoconf"], capture_output=True, text=True, check=False)
    if shown.returncode == 0 and any(line.strip().startswith(("tree:", "block:")) for line in shown.stdout.splitlines()):
        return "topology.yaml of slurmctld (scontrol show topoconf)"
    return ""


def partition_topology(partition: str, version: tuple[int, int]) -> str:
    """The named topology a partition uses (25.05 and later: `scontrol show partition P` prints
    `Topology=NAME` when topology.yaml gives it one; docs/facts/jobs.md#slurm-show-topology); "" otherwise."""
    if version < (25, 5):
        return ""
    fields = _fields(_run(["scontrol", "show", "partition", partition]))
    return fields.get("Topology", "")


def topology_check(plugin: str, partitions: dict[str, str] | None = None, yaml_file: str = "") -> Check:
    """A warning, not a failure, where Slurm has no topology to schedule in: the jobs run, placed blindly.
    On 25.05+ a topology.yaml (its cluster default, or a partition's own topology) counts, whatever
    TopologyPlugin prints."""
    named = {p: t for p, t in (partitions or {}).items() if t}
    if plugin in TOPOLOGY_PLUGINS or named or yaml_file:
        where = ", ".join([*(f"partition {p}: topology {t}" for p, t in sorted(named.items())), *([yaml_file] if yaml_file else [])])
        detail = "HyperPod's topology is in use" + (f" ({where})" if where else "") + "; the NCCL job asks for one leaf switch"
        return Check("topology slurm", "PASS", plugin, detail)
    return Check(
        "topology slurm",
        "WARN",
        plugin,
        "no tree or block topology: --switches has no effect and the placement cannot be read; HyperPod writes the "
        "topology for topology-capable types itself (docs/compute.md, Topology-aware placement)",
    )


def job_nodes(job_id: str) -> list[str]:
    """The nodes a job ran on: sacct's NodeList (a Slurm hostlist), expanded by `scontrol show hostnames`."""
    lines = [line for line in _run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "NodeList"]).splitlines() if line.strip()]
    if not lines:
        return []
    return [h for h in _run(["scontrol", "show", "hostnames", lines[0].strip()]).split() if h]


def _fields(line: str) -> dict[str, str]:
    return dict(token.split("=", 1) for token in line.split() if "=" in token)


def node_units(node: str, version: tuple[int, int], topology: str = "") -> dict[str, str]:
    """The switches (tree: `SwitchName=... Level=N ...`) or block (`BlockName=...`) above one node, from
    `scontrol show topology NODE` (24.11) / `scontrol show topology [TOPOLOGY] node=NODE` (25.05 and
    later: a bare word names a topology); level key -> unit name (docs/facts/jobs.md#slurm-show-topology)."""
    args = [*([topology] if topology else []), f"node={node}"] if version >= (25, 5) else [node]
    units: dict[str, str] = {}
    for line in _run(["scontrol", "show", "topology", *args]).splitlines():
        f = _fields(line)
        if "SwitchName" in f and f.get("Level", "").isdigit():
            units[f"switch-level-{f['Level']}"] = f["SwitchName"]
        elif "BlockName" in f:
            units["block"] = f["BlockName"]
    return units


def slurm_placement(nodes: list[str], plugin: str, version: tuple[int, int], topology: str = "", yaml_file: str = "") -> Placement:
    """The leaf switch (and the switches above it), or the block, each node of a job sits under;
    `topology`: the partition's named topology (25.05+), read instead of the cluster default;
    `yaml_file`: a topology.yaml (25.05+), whose cluster default `scontrol show topology node=N` reads."""
    if plugin not in TOPOLOGY_PLUGINS and not topology and not yaml_file:
        return Placement((), {n: {} for n in nodes}, unknown=f"TopologyPlugin {plugin}: no topology to read")
    if not nodes:
        return Placement((), unknown="sacct gave no NodeList for the job")
    found = {node: node_units(node, version, topology) for node in nodes}
    keys = {k for units in found.values() for k in units}
    if not keys:
        return Placement((), {n: {} for n in nodes}, unknown="scontrol show topology printed no switch or block above its nodes")
    levels: list[Level] = []
    for level in sorted((int(k.rsplit("-", 1)[1]) for k in keys if k.startswith("switch-level-")), reverse=True):
        noun = "leaf switch" if level == 0 else f"level-{level} switch"
        levels.append(Level(f"switch-level-{level}", noun, noun + "es"))
    if "block" in keys:
        levels.append(Level("block", "block", "blocks"))
    return Placement(tuple(levels), found)


def job_placement(
    job: SlurmJob, nodes: list[str], plugin: str, version: tuple[int, int], topology: str = "", yaml_file: str = ""
) -> Placement:
    """A job's placement; none to read where the plan says why (a region where EC2 describes no instance topology)."""
    if job.no_topology:
        return Placement((), {n: {} for n in nodes}, absent=job.no_topology)
    return slurm_placement(nodes, plugin, version, topology, yaml_file)


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
    config = slurm_config()
    plugin = topology_plugin(config)
    version = slurm_version()
    yaml_file = topology_yaml(config, version)
    ids: dict[SlurmJob, str] = {}
    for job in plan.jobs:
        ids[job] = _run(job.sbatch(str(run_dir))).strip().split(";")[0]
        print(f"submitted {job.kind} {job.group}: job {ids[job]}", flush=True)
    states = wait_for({v: f"{k.kind} {k.group}" for k, v in ids.items()}, timeout_s, poll_s)
    for job_id, state in states.items():
        if state not in DONE_STATES:
            subprocess.run(["scancel", job_id], check=False)
    # where each finished NCCL job ran, read after it ended (HyperPod regenerates the topology only on
    # scale-up, scale-down and replacement: docs/facts/hyperpod.md#hyperpod-slurm-topology)
    partitions = {job.group: partition_topology(job.group, version) for job in plan.jobs if job.kind == "nccl"}
    placements = {
        job: job_placement(job, job_nodes(ids[job]), plugin, version, partitions[job.group], yaml_file)
        for job in plan.jobs
        if job.kind == "nccl" and states.get(ids[job]) in DONE_STATES
    }
    checks = [topology_check(plugin, partitions, yaml_file), *evaluate(plan, states, ids, placements)]
    about: dict[str, object] = {
        "environment": plan.environment,
        "run_dir": str(run_dir),
        "fminfra_version": plan.fminfra_version,
        "topology_plugin": plugin,
        "topology_yaml": yaml_file,
        "placement": {f"{j.kind} {j.group}": p.to_json() for j, p in placements.items()},
        "nccl_busbw_by_placement": busbw_by_placement(checks, {j.group: p for j, p in placements.items()}),
    }
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
