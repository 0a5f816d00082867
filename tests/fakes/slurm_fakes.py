"""A fake Slurm cluster for the acceptance jobs (scripts/jobs/): `sbatch`, `srun` and `scontrol` on
PATH, plus the programs the jobs start (nccl-tests binaries, torchrun, fio) replaying real outputs.

What the fakes model, and where that comes from (docs/facts/jobs.md):

- sbatch (#sbatch-directives-before-commands, #sbatch-runs-a-copy, #sbatch-output-environment):
  options on the command line win over `#SBATCH` lines; `#SBATCH` lines count only before the
  first line that is neither a comment nor blank; the script runs from a copy in a spool folder
  (so `dirname $0` is not the jobs folder), in the submit directory, with SLURM_JOB_ID,
  SLURM_JOB_NUM_NODES, SLURM_JOB_NODELIST, SLURM_SUBMIT_DIR set; `--export=ALL,NAME=value` adds to
  the submitting environment, `--export=NONE` drops it; stdout and stderr go to `--output`
  (default `slurm-%j.out`, `%j` = job id); `--parsable` prints the job id alone. Unknown options
  and more nodes than the cluster has are refused. Unlike Slurm, the job runs at once, and a
  record of it is kept in $FAKE_STATE/jobs/<id>.json.
- srun (#srun-task-environment, #pyxis-container-image-syntax, #enroot-digest-references): runs
  inside the allocation only (SLURM_JOB_ID set), at most the allocation's nodes; one process per
  task with SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS and SLURMD_NODENAME;
  `--label` prefixes each output line with `TASK: `; `--mpi` takes pmix, pmi2 or none. The
  `--container-*` options exist only with pyxis (FAKE_PYXIS=1): the image is
  `[USER@][REGISTRY#]IMAGE[:TAG]`, and a digest (`@sha256:...`) only with enroot 4.0.0 or later
  (FAKE_ENROOT_VERSION); `--container-mounts` is `SRC:DST[:FLAGS]` with an existing SRC, flags
  joined by `+`; paths under a mount's DST are read from its SRC.
- scontrol: `show hostnames LIST` expands `prefix-[a-b,c]` (and lists of them). `--version` prints
  `slurm FAKE_SLURM_VERSION` (default 24.11.7); `show config` a few `NAME = VALUE` lines with
  `TopologyPlugin` (FAKE_TOPOLOGY_PLUGIN, default topology/tree; #slurm-show-config-topology) and
  `SLURM_CONF` (FAKE_SLURM_CONF); on 25.x a topology.yaml beside SLURM_CONF is the cluster default's
  topology whatever the plugin prints (#slurm-topology-yaml), as is what `show topoconf` prints
  (FAKE_TOPOCONF, slurmctld's running topology.yaml) when it holds a tree;
  `show partition P` its lines, with `Topology=FAKE_PARTITION_TOPOLOGY` on 25.x when set;
  `show topology` (#slurm-show-topology) prints the lines of FAKE_TOPOLOGY whose `Nodes` hold the
  node: on 24.x for `show topology NODE` (a `node=` word matches nothing), on 25.x for
  `show topology [NAME] node=NODE` (NAME: the partition's topology; without it the cluster
  default); nothing under topology/default or topology/flat.
- sbatch also takes `--switches=<count>[@max-time]` (#sbatch-switches; a malformed value is
  refused) and records the allocation's node list, which `sacct -o NodeList` prints (#sacct-nodelist).
- sacct (#sacct-parsable-state): `-j ID -X -n -P -o State` prints the job's state alone
  (COMPLETED when the batch script exited 0, else FAILED; FAKE_SACCT_STATE forces one, e.g.
  RUNNING for a job that never ends); scancel records the ids it is given.

The fake programs check their arguments and replay recorded outputs (tests/data/jobs/SOURCES.md);
the nccl-tests fake logs the EC2 guide's "NET/OFI Selected Provider is efa" line from every rank
when NCCL_DEBUG=INFO (FAKE_NCCL_DEBUG_OUTPUT, empty for a run that fell back to sockets).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

JOBS = ROOT / "scripts" / "jobs"
DATA = ROOT / "tests" / "data" / "jobs"


def ddp_result_line(median_ms: float, loss_first: float, loss_last: float, world_size: int = 16) -> str:
    """A result line in the format scripts/jobs/ddp_smoke.py prints (200 steps)."""
    summary = {
        "world_size": world_size,
        "steps": 200,
        "step_time_ms": {"median": median_ms, "p90": median_ms + 1.5},
        "loss_first": loss_first,
        "loss_last": loss_last,
        "loss_fell": loss_last < 0.5 * loss_first,
        "device": "cuda",
    }
    return "fminfra-ddp result " + json.dumps(summary, sort_keys=True)


_SBATCH = r"""
import json, os, re, shutil, subprocess, sys
from pathlib import Path

state = Path(os.environ["FAKE_STATE"])
KNOWN = {"--job-name", "--nodes", "--ntasks-per-node", "--exclusive", "--time", "--output", "--export", "--parsable", "--partition", "--switches"}
FLAGS = {"--exclusive", "--parsable"}

def parse(args, where):
    opts = {}
    for a in args:
        name, _, value = a.partition("=")
        if name not in KNOWN:
            sys.exit(f"sbatch: unrecognized option '{a}' ({where})")
        if name in FLAGS:
            opts[name] = ""
        elif not value:
            sys.exit(f"sbatch: option '{name}' requires a value ({where})")
        else:
            opts[name] = value
    return opts

argv = sys.argv[1:]
i = 0
while i < len(argv) and argv[i].startswith("--"):
    i += 1
cli, rest = argv[:i], argv[i:]
if not rest:
    sys.exit("sbatch: error: no batch script given")
script = Path(rest[0])
text = script.read_text()
if not text.startswith("#!"):
    sys.exit("sbatch: error: This does not look like a batch script.  The first line must start with #! followed by the path to an interpreter.")
directives = []
for line in text.splitlines()[1:]:
    s = line.strip()
    if not s:
        continue
    if not s.startswith("#"):
        break
    if line.startswith("#SBATCH"):
        directives.extend(line.split()[1:])
opts = parse(directives, "script")
opts.update(parse(cli, "command line"))
# --switches=<count>[@max-time], time as minutes, minutes:seconds, hours:minutes:seconds, days-hours... (sbatch.1)
if "--switches" in opts and not re.fullmatch(r"[0-9]+(@([0-9]+-)?[0-9]+(:[0-9]+){0,2})?", opts["--switches"]):
    sys.exit(f"sbatch: error: Invalid --switches specification: {opts['--switches']}")
nodes = int(opts.get("--nodes", "1"))
cluster = int(os.environ.get("FAKE_NODES", "2"))
if nodes > cluster:
    sys.exit("sbatch: error: Batch job submission failed: Requested node configuration is not available")
counter = state / "next-job-id"
job = int(counter.read_text()) if counter.exists() else 1001
counter.write_text(str(job + 1))
spool = state / "spool" / f"job{job}"
spool.mkdir(parents=True)
shutil.copy(script, spool / "slurm_script")
export = opts.get("--export", "ALL").split(",")
env = dict(os.environ) if export[0] == "ALL" else {k: v for k, v in os.environ.items() if k in ("PATH", "HOME") or k.startswith("FAKE_")}
for item in export[1:] if export[0] in ("ALL", "NONE") else export:
    k, _, v = item.partition("=")
    if not _:
        sys.exit(f"sbatch: error: --export: expected NAME=value, got '{item}'")
    env[k] = v
env.update(
    SLURM_JOB_ID=str(job),
    SLURM_JOB_NAME=opts.get("--job-name", script.name),
    SLURM_JOB_NUM_NODES=str(nodes),
    SLURM_JOB_NODELIST=f"node-[1-{nodes}]" if nodes > 1 else "node-1",
    SLURM_SUBMIT_DIR=os.getcwd(),
)
out = Path(opts.get("--output", "slurm-%j.out").replace("%j", str(job)))
with out.open("w") as fh:
    rc = subprocess.run(["bash", str(spool / "slurm_script"), *rest[1:]], env=env, stdout=fh, stderr=subprocess.STDOUT).returncode
(state / "jobs").mkdir(exist_ok=True)
nodelist = env["SLURM_JOB_NODELIST"]
(state / "jobs" / f"{job}.json").write_text(json.dumps({"argv": argv, "options": opts, "exit_code": rc, "output": str(out.resolve()), "nodelist": nodelist}))
print(job if "--parsable" in opts else f"Submitted batch job {job}")
"""

_SRUN = r"""
import os, re, subprocess, sys
from pathlib import Path

if not os.environ.get("SLURM_JOB_ID"):
    sys.exit("srun: fake: run inside an sbatch allocation")
PYXIS = {"--container-image", "--container-mounts", "--container-workdir", "--no-container-mount-home", "--container-name"}
KNOWN = {"--mpi", "--label", "--kill-on-bad-exit", "--nodes", "--ntasks-per-node", "--export"} | PYXIS
FLAGS = {"--label", "--no-container-mount-home", "--kill-on-bad-exit"}
argv = sys.argv[1:]
opts = {}
while argv and argv[0].startswith("--"):
    name, _, value = argv.pop(0).partition("=")
    if name not in KNOWN or (name in PYXIS and os.environ.get("FAKE_PYXIS") != "1"):
        sys.exit(f"srun: unrecognized option '{name}'")
    if name not in FLAGS and not value:
        sys.exit(f"srun: option '{name}' requires a value")
    opts[name] = value
if not argv:
    sys.exit("srun: fatal: No command given to execute.")
if opts.get("--mpi", "none") not in ("pmix", "pmi2", "none"):
    sys.exit(f"srun: error: MPI plugin '{opts['--mpi']}' not found")
alloc = int(os.environ["SLURM_JOB_NUM_NODES"])
nodes = int(opts.get("--nodes", alloc))
if nodes > alloc:
    sys.exit(f"srun: error: Only allocated {alloc} nodes asked for {nodes}")
per_node = int(opts.get("--ntasks-per-node", "1"))
mounts = []
image = opts.get("--container-image")
if image is not None:
    ref = r"([^@#/]+@)?([^#]+#)?[a-z0-9/._-]+(:[A-Za-z0-9._-]+)?(@sha256:[0-9a-f]{64})?"
    if not re.fullmatch(ref, image):
        sys.exit(f"pyxis: invalid image reference '{image}'")
    if "@sha256:" in image and int(os.environ.get("FAKE_ENROOT_VERSION", "3.5.0").split(".")[0]) < 4:
        sys.exit(f"[ERROR] Invalid image reference: docker://{image}")
    for spec in filter(None, opts.get("--container-mounts", "").split(",")):
        parts = spec.split(":")
        if len(parts) not in (2, 3) or not parts[0].startswith("/") or not parts[1].startswith("/"):
            sys.exit(f"pyxis: invalid mount '{spec}': expected SRC:DST[:FLAGS]")
        if not Path(parts[0]).exists():
            sys.exit(f"pyxis: mount source {parts[0]} does not exist")
        if len(parts) == 3 and not set(parts[2].split("+")) <= {"ro", "rw", "rprivate", "private", "rbind", "bind", "nosuid", "nodev", "noexec"}:
            sys.exit(f"pyxis: invalid mount flags '{parts[2]}'")
        mounts.append((parts[0], parts[1]))
def host_path(a):
    for src, dst in mounts:
        if a == dst or a.startswith(dst + "/"):
            return src + a[len(dst):]
    return a
cmd = [host_path(a) for a in argv]
env = dict(os.environ)
for item in opts.get("--export", "ALL").split(",")[1:]:
    k, _, v = item.partition("=")
    env[k] = v
worst = 0
log = Path(os.environ["FAKE_STATE"]) / "srun.log"
with log.open("a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\n")
for node in range(nodes):
    for local in range(per_node):
        task = node * per_node + local
        env.update(SLURM_PROCID=str(task), SLURM_LOCALID=str(local), SLURM_NODEID=str(node), SLURM_NTASKS=str(nodes * per_node), SLURMD_NODENAME=f"node-{node + 1}")
        if image is not None:
            env["FAKE_CONTAINER_IMAGE"] = image
            env["FAKE_CONTAINER_MOUNTS"] = ",".join(f"{s}:{d}" for s, d in mounts)
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        for line in (p.stdout + p.stderr).splitlines():
            print(f"{task}: {line}" if "--label" in opts else line)
        worst = max(worst, p.returncode)
sys.exit(worst)
"""

_SCONTROL = r"""
import os, re, sys
from pathlib import Path

def hostnames(hostlist):
    out = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", hostlist):
        m = re.fullmatch(r"(.*)\[(.*)\]", item)
        if not m:
            out.append(item)
            continue
        for part in m[2].split(","):
            a, _, b = part.partition("-")
            out += [f"{m[1]}{n}" for n in range(int(a), int(b or a) + 1)]
    return out

args = sys.argv[1:]
version = os.environ.get("FAKE_SLURM_VERSION", "24.11.7")
plugin = os.environ.get("FAKE_TOPOLOGY_PLUGIN", "topology/tree")
if args == ["--version"]:
    print(f"slurm {version}")
elif args[:2] == ["show", "hostnames"] and len(args) == 3:
    print("\n".join(hostnames(args[2])))
elif args == ["show", "config"]:
    conf = os.environ.get("FAKE_SLURM_CONF", "/opt/slurm/etc/slurm.conf")
    print(
        f"Configuration data as of 2026-12-04T02:00:00\nSelectType              = select/cons_tres\nSLURM_CONF              = {conf}\n"
        f"TopologyParam           = (null)\nTopologyPlugin          = {plugin}"
    )
elif args == ["show", "topoconf"]:
    # 25.05+: slurmctld's running topology, in topology.yaml's format (FAKE_TOPOCONF: a file; none: nothing)
    if os.environ.get("FAKE_TOPOCONF"):
        print(Path(os.environ["FAKE_TOPOCONF"]).read_text(), end="")
elif args[:2] == ["show", "partition"] and len(args) == 3:
    # 25.05+: a partition with a topology of topology.yaml prints Topology=NAME on a line of its own
    named = os.environ.get("FAKE_PARTITION_TOPOLOGY", "") if version.split(".")[0] >= "25" else ""
    print(f"PartitionName={args[2]}\n   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL\n" + (f"   Topology={named}\n" if named else "") + "   State=UP TotalCPUs=384 TotalNodes=2")
elif args[:2] == ["show", "topology"] and len(args) in (3, 4):
    named = os.environ.get("FAKE_PARTITION_TOPOLOGY", "")
    if version.split(".")[0] >= "25":
        *name, arg = args[2:]
        if not arg.startswith("node=") or (name and name != [named]):
            sys.exit(0)  # a bare word names a topology: only the partition's exists here
        conf = Path(os.environ.get("FAKE_SLURM_CONF", "/opt/slurm/etc/slurm.conf"))
        served = os.environ.get("FAKE_TOPOCONF") and "tree:" in Path(os.environ["FAKE_TOPOCONF"]).read_text()
        if not name and plugin not in ("topology/tree", "topology/block") and not (conf.parent / "topology.yaml").is_file() and not served:
            sys.exit(0)  # no topology.yaml and a flat cluster default: nothing to print
        node = arg.split("=", 1)[1]
    elif plugin not in ("topology/tree", "topology/block") or len(args) != 3:
        sys.exit(0)  # topology/default prints nothing
    elif "=" in args[2]:
        sys.exit(0)  # 24.11 takes a switch or node name; `node=X` matches neither
    else:
        node = args[2]
    lines = [line for line in Path(os.environ["FAKE_TOPOLOGY"]).read_text().splitlines() if line.strip()]
    fields = [dict(t.split("=", 1) for t in line.split()) for line in lines]
    shown = {i for i, f in enumerate(fields) if node in hostnames(f.get("Nodes", ""))}
    for i, f in enumerate(fields):
        if i in shown:
            print(lines[i])
else:
    sys.exit(f"scontrol: fake: unmodelled {args}")
"""

# Bash, not Python: srun starts one per GPU, and the suite must stay fast.
_NCCL_PERF = r"""
for flag in -b -e -f -g; do
  [[ " $* " == *" $flag "* ]] || { echo "$(basename "$0"): fake: expected $flag" >&2; exit 2; }
done
[[ -n ${SLURM_PROCID:-} ]] || { echo "fake nccl-tests: not started by srun" >&2; exit 2; }
if [[ ${NCCL_DEBUG:-} == INFO && -n ${FAKE_NCCL_DEBUG_OUTPUT:-} ]]; then cat "$FAKE_NCCL_DEBUG_OUTPUT"; fi  # every rank logs its network
if [[ $SLURM_PROCID == 0 ]]; then  # rank 0 prints the table, without the recording's launcher prefix
  sed -E 's/^([0-9]+: |\[[0-9]+,[0-9]+\]<stdout>:)//' "$FAKE_NCCL_OUTPUT"
fi
"""

_TORCHRUN = r"""
import os, re, sys
from pathlib import Path
args = sys.argv[1:]
need = {"--nnodes", "--nproc-per-node", "--rdzv-id", "--rdzv-backend", "--rdzv-endpoint"}
given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
if not need <= given:
    sys.exit(f"torchrun: fake: missing {sorted(need - given)}")
if "FAKE_CONTAINER_IMAGE" not in os.environ:
    sys.exit("torchrun: fake: not inside the container (torchrun comes from the image)")
endpoint = next(a.split("=", 1)[1] for a in args if a.startswith("--rdzv-endpoint="))
if not re.fullmatch(r"node-\d+:\d+", endpoint):
    sys.exit(f"torchrun: fake: rendezvous endpoint {endpoint} is not a node of the allocation")
script = next(a for a in args if not a.startswith("--"))
if not Path(script).is_file():
    sys.exit(f"torchrun: can't open file '{script}'")
result = args[args.index("--result") + 1]
if not Path(result).parent.is_dir():
    sys.exit(f"torchrun: fake: result folder of {result} does not exist")
if os.environ["SLURM_NODEID"] == "0":
    sys.stdout.write(Path(os.environ["FAKE_TORCHRUN_OUTPUT"]).read_text())
sys.exit(int(os.environ.get("FAKE_TORCHRUN_EXIT", "0")))
"""

_FIO = r"""
import os, shutil, sys
from pathlib import Path
opts = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
for key in ("directory", "rw", "output", "output-format"):
    if key not in opts:
        sys.exit(f"fio: fake: missing --{key}")
if not Path(opts["directory"]).is_dir():
    sys.exit(f"fio: {opts['directory']}: No such file or directory")
shutil.copy(os.environ[f"FAKE_FIO_{opts['rw'].upper()}"], opts["output"])
"""


_SACCT = r"""
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
field = args[args.index("-o") + 1] if "-o" in args else ""
if args[:1] != ["-j"] or not {"-X", "-n", "-P"} <= set(args) or field not in ("State", "NodeList"):
    sys.exit(f"sacct: fake: expected -j ID -X -n -P -o State|NodeList, got {args}")
if field == "NodeList":
    record = Path(os.environ["FAKE_STATE"]) / "jobs" / f"{args[1]}.json"
    print(json.loads(record.read_text())["nodelist"] if record.exists() else "None assigned")
    sys.exit(0)
if os.environ.get("FAKE_SACCT_STATE"):
    print(os.environ["FAKE_SACCT_STATE"])
    sys.exit(0)
record = Path(os.environ["FAKE_STATE"]) / "jobs" / f"{args[1]}.json"
if record.exists():
    print("COMPLETED" if json.loads(record.read_text())["exit_code"] == 0 else "FAILED")
"""

_SCANCEL = r"""
import os, sys
from pathlib import Path
with (Path(os.environ["FAKE_STATE"]) / "scancel.log").open("a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\n")
"""


@dataclass
class FakeCluster:
    root: Path
    bin: Path
    state: Path
    submit_dir: Path
    env: dict[str, str]

    def sbatch(self, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["sbatch", *args], cwd=self.submit_dir, env={**self.env, **(extra_env or {})}, capture_output=True, text=True, check=False
        )

    def job(self, job_id: int) -> dict[str, object]:
        return json.loads((self.state / "jobs" / f"{job_id}.json").read_text())

    def srun_calls(self) -> list[str]:
        log = self.state / "srun.log"
        return log.read_text().splitlines() if log.exists() else []


def make_cluster(tmp_path: Path, *, nodes: int = 2) -> FakeCluster:
    """A fake cluster: the scripts tree copied to a 'shared file system', fakes on PATH."""
    root = tmp_path / "fsx"
    scripts = root / "run" / "scripts"
    shutil.copytree(ROOT / "scripts" / "jobs", scripts / "jobs")
    (scripts / "node").mkdir(parents=True)
    for name in ("versions.env", "manifest.sh"):
        shutil.copy(ROOT / "scripts" / "node" / name, scripts / "node" / name)
    bin_dir = tmp_path / "bin"
    nccl_dir = tmp_path / "opt" / "nccl-tests" / "build"
    for d in (bin_dir, nccl_dir, tmp_path / "state", tmp_path / "submit"):
        d.mkdir(parents=True, exist_ok=True)
    fakes = {
        "sbatch": _SBATCH,
        "srun": _SRUN,
        "scontrol": _SCONTROL,
        "sacct": _SACCT,
        "scancel": _SCANCEL,
        "torchrun": _TORCHRUN,
        "fio": _FIO,
    }
    for name, body in fakes.items():
        _write_exe(bin_dir / name, body)
    for collective in ("all_reduce", "all_gather", "reduce_scatter"):
        _write_exe(nccl_dir / f"{collective}_perf", _NCCL_PERF, interpreter="/usr/bin/env bash")
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "FAKE_STATE": str(tmp_path / "state"),
        "FAKE_NODES": str(nodes),
        "FAKE_PYXIS": "1",
        "FAKE_NCCL_OUTPUT": str(DATA / "nccl-all-reduce-2x-p5.txt"),
        "FAKE_NCCL_DEBUG_OUTPUT": str(DATA / "nccl-debug-efa-ec2-guide.txt"),
        "FAKE_FIO_READ": str(DATA / "fio-3.1-randread-32jobs.json"),
        "FAKE_FIO_WRITE": str(DATA / "fio-3.1-randwrite-32jobs.json"),
        "NCCL_TESTS_DIR": str(nccl_dir),
        "FAKE_TOPOLOGY": str(DATA / "scontrol-show-topology-one-leaf.txt"),
    }
    return FakeCluster(root=root, bin=bin_dir, state=tmp_path / "state", submit_dir=tmp_path / "submit", env=env)


def _write_exe(path: Path, body: str, interpreter: str = sys.executable) -> None:
    path.write_text(f"#!{interpreter}\n{body}")
    path.chmod(0o755)
