"""A HyperPod cluster in a folder: how HyperPod delivers and starts the lifecycle scripts, and the
node software they touch. Each fake models the real thing; what it models and where that comes from:

Delivery (`publish`, `download`)
- The scripts are the real `LifecycleScripts` construct's assets from the synthesized app: the
  `Custom::CDKBucketDeployment` resource's `SourceObjectKeys` name the asset zips; CDK's deployment
  handler unzips them into `DestinationBucketKeyPrefix` of the lifecycle bucket, replacing the
  `<<marker:0xbaba:N>>` markers of `Source.json_data` with the resolved tokens (`SourceMarkers`; here
  the FSx DNS/mount name and the AMP URL get literal values). The bucket is moto's S3 (in process).
  Source: aws-cdk-lib `aws-s3-deployment` (BucketDeployment, Source.jsonData markers).
- HyperPod copies `SourceS3Uri` to the node and runs `bash <OnCreate>` as root from that folder
  (docs/facts/hyperpod.md#hyperpod-lifecycle-config, #hyperpod-reference-entry-point). S3 keeps no
  mode bits, so every downloaded file is 0644: nothing may rely on the executable bit.
- HyperPod writes resource_config.json (ClusterConfig, InstanceGroups[].Name/InstanceType/
  Instances[].InstanceName/AgentIpAddress/CustomerIpAddress/InstanceId) and exports
  SAGEMAKER_RESOURCE_CONFIG_PATH (docs/facts/hyperpod.md#hyperpod-resource-config-path).

Node (one folder per node = FMINFRA_ROOT; commands on PATH are the AMI's, hence executable)
- `hostname -I`: the node's addresses, the CustomerIpAddress first, then docker0's 172.17.0.1.
- `systemctl`: units are read from /etc/systemd/system and /lib/systemd/system when systemd starts
  (first call) and on `daemon-reload` only; `start` uses the loaded copy and prints systemd's
  "changed on disk. Run 'systemctl daemon-reload'" warning when the file changed since. `enable`
  of a missing unit file fails ("Unit file X does not exist.", exit 1); `start` of an unknown unit
  exits 5. The AMI's Slurm units are Type=simple (inferred: AWS's reference starts slurmd on login
  nodes, where slurmd cannot run, under `set -e`), so `start` returns 0 once the daemon is
  forked; whether it stays up is recorded for `is-active` and for the cluster.
- slurmctld (started by systemctl): stays up only when /opt/slurm/etc/slurm.conf names this node's
  address (SlurmctldHost=<name>(<ip>)); slurmd: with `--conf-server` (configless) it fetches its
  configuration from that controller, and stays up and registers when that address runs slurmctld
  and the node is in a worker group (systemd restarts it until the controller answers, so start
  order does not matter); without `--conf-server` and without a local slurm.conf it exits.
  $SLURMD_OPTIONS in ExecStart is empty unless the unit was edited (systemd expands unset
  variables to nothing). Source: docs/facts/hyperpod.md#slurmd-conf-server (slurmd(8)) and AWS's
  reference start_slurm.sh (docs/facts/hyperpod.md#hyperpod-reference-slurm-start); the restart
  until the controller answers is an assumption (unverified, see the first entry).
- HyperPod's agent writes slurm.conf on the controller `slurm_conf_delay` seconds after the
  lifecycle starts (the reference waits for it: lifecycle_script.py `wait_for_slurm_conf`).
- `mount -t lustre -o OPTS SRC TARGET`: fails (exit 32, "mount point does not exist") without the
  target folder; records SRC TARGET in the node's /proc/mounts. `mountpoint -q`: 0 when recorded,
  non-zero otherwise (util-linux). `reboot(node)` empties /proc/mounts and remounts each fstab
  entry the way systemd's fstab generator does: an `x-systemd.requires=UNIT` on a unit the OS does
  not have fails the mount (Ubuntu has network-online.target and no network.service;
  docs/facts/hyperpod.md#systemd-fstab-requires).
- `curl -o FILE URL`: writes `fake:<URL>` to FILE (so a checksum can be computed and pinned in a
  test manifest). `apt-get install DEB...`: installs `enroot` on PATH from enroot debs.
  `dpkg --print-architecture`: amd64.
- `git clone --branch TAG URL DIR`: makes DIR, whose `rev-parse HEAD` is the tag's real commit for
  NVIDIA/pyxis v0.20.0 (docs/facts/node-software.md#pin-pyxis-commit), a made-up one otherwise.
- `make -C DIR [install] [DESTDIR=D]` for pyxis: the build needs <slurm/spank.h> on the include
  path (CPPFLAGS from the environment, then /usr/include); HyperPod's Slurm headers are in
  /opt/slurm/include only. install writes D/usr/local/lib/slurm/spank_pyxis.so and
  D/usr/local/share/pyxis/pyxis.conf (`required /usr/local/lib/slurm/spank_pyxis.so`), as pyxis's
  Makefile at v0.20.0 does.
- GPU nodes boot a modelled HyperPod AMI (tests/fakes/node_fakes.py IMAGES, each from its release notes;
  DEFAULT_GPU_IMAGE unless a test names one): its files under the node's root and its read-only
  commands (nvidia-smi, dpkg-query/rpm, ldconfig -p) on PATH, so the real node/bootstrap.sh --verify
  runs. CPU nodes carry none of it.
- `enroot version` prints the AMI's enroot version (Cluster(enroot=...), "" for none). `make -C DIR
  install|setcap DESTDIR=D` in an enroot clone installs D/usr/local/bin/enroot (enroot's Makefile,
  prefix /usr/local). `getent hosts NAME` fails for the first FAKE_DNS_DOWN_CALLS calls.
- observability/install_exporters.sh (tested in test_exporter_scripts.py) is replaced after the
  download by a 0644 recorder of its arguments and environment.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakes.node_fakes import BASH_SHEBANG, GPU_TYPES, dress

# Tag -> commit, per repository: NVIDIA/pyxis v0.20.0 (docs/facts/node-software.md#pin-pyxis-commit),
# NVIDIA/enroot v4.1.2 (docs/facts/node-software.md#pin-enroot-commit).
TAG_COMMITS = {
    "https://github.com/NVIDIA/pyxis.git": {"v0.20.0": "424563865a491f2d8f3c396a095d18db81f1fb07"},
    "https://github.com/NVIDIA/enroot.git": {"v4.1.2": "bd51f53b6fa954805ae3e1985c5dc7594ff66d05"},
}
UBUNTU_UNITS = {"network-online.target", "network.target", "remote-fs.target", "local-fs.target", "systemd-networkd.service"}
MARKER = re.compile(r"<<marker:0xbaba:(\d+)>>")
# The image a GPU group boots unless a test names another (tests/fakes/node_fakes.py IMAGES): the
# current x86_64 release as its entry lists it, without host NCCL.
DEFAULT_GPU_IMAGE = "hyperpod-slurm-x86_64-2026-01-25/nccl-none/ofi-lib"

_FAKES: dict[str, str] = {
    "hostname": 'echo "$FAKE_NODE_IP 172.17.0.1"',
    "dpkg": "echo amd64",
    # getent hosts NAME: fails (exit 2, as for an unknown name) for the first FAKE_DNS_DOWN_CALLS calls,
    # as while systemd-resolved is being restarted (docs/facts/hyperpod.md#hyperpod-reference-resolved-wait).
    "getent": r"""
count_file=$FMINFRA_ROOT/run/fake-dns-calls; n=$(($(cat "$count_file" 2>/dev/null || echo 0) + 1)); mkdir -p "${count_file%/*}"; echo "$n" >"$count_file"
((n > ${FAKE_DNS_DOWN_CALLS:-0})) || exit 2
echo "10.1.255.10     $2"
""",
    "mount": r"""
[[ $1 == -t && $2 == lustre && $3 == -o ]] || { echo "mount: unsupported $*" >&2; exit 1; }
src=$5 target=$6
[[ -d $target ]] || { echo "mount: $target: mount point does not exist." >&2; exit 32; }
mkdir -p "$FMINFRA_ROOT/proc" && echo "$src $target lustre $4 0 0" >>"$FMINFRA_ROOT/proc/mounts"
""",
    "mountpoint": r"""
[[ $1 == -q ]] && shift
awk -v t="$1" '$2 == t { found = 1 } END { exit found ? 0 : 32 }' "$FMINFRA_ROOT/proc/mounts" 2>/dev/null || exit 32
""",
    "curl": r"""
out="" url=""
while (($#)); do case $1 in -o) out=$2; shift 2 ;; -H | -X | --connect-timeout | --max-time) shift 2 ;; -*) shift ;; *) url=$1; shift ;; esac; done
# IMDSv2: a token for PUT /latest/api/token, then the instance type (assumed: HyperPod's type name, ml. prefix included).
case $url in
    http://169.254.169.254/latest/api/token) echo fake-token; exit 0 ;;
    http://169.254.169.254/latest/meta-data/instance-type) echo "$FAKE_INSTANCE_TYPE"; exit 0 ;;
esac
printf 'fake:%s' "$url" >"$out"
""",
    "apt-get": r"""
for a; do [[ $a == *enroot_*.deb ]] && { printf '#!/usr/bin/env bash\necho enroot\n' >"$FAKE_BIN/enroot"; chmod +x "$FAKE_BIN/enroot"; }; done
exit 0
""",
    "git": r"""
if [[ $1 == clone ]]; then
    tag="" ; dir="" ; url=""
    shift; while (($#)); do case $1 in --branch) tag=$2; shift 2 ;; --depth) shift 2 ;; -*) shift ;; *) [[ -z $url ]] && url=$1 || dir=$1; shift ;; esac; done
    mkdir -p "$dir"; commit=ffffffffffffffffffffffffffffffffffffffff
    while read -r u t c; do [[ $u == "$url" && $t == "$tag" ]] && commit=$c; done <<<"$FAKE_TAGS"
    echo "$commit" >"$dir/.fake-head"; echo "$url" >"$dir/.fake-url"; echo "${tag#v}" >"$dir/.fake-tag"
elif [[ $1 == -C && $3 == rev-parse ]]; then
    cat "$2/.fake-head"
else
    echo "git: unsupported $*" >&2; exit 1
fi
""",
    "make": r"""
dir=. target=all destdir=""
while (($#)); do case $1 in -C) dir=$2; shift 2 ;; DESTDIR=*) destdir=${1#DESTDIR=}; shift ;; install) target=install; shift ;; setcap) target=setcap; shift ;; *) shift ;; esac; done
if [[ $(cat "$dir/.fake-url" 2>/dev/null) == *enroot* ]]; then
    # enroot's Makefile (prefix /usr/local): install puts bin/enroot there; setcap needs it installed.
    if [[ $target == install ]]; then
        mkdir -p "$destdir/usr/local/bin"
        printf '#!/usr/bin/env bash\n[[ $1 == version ]] && echo %s\n[[ $1 == info ]] && echo "Config file: /usr/local/etc/enroot/enroot.conf"\nexit 0\n' "$(cat "$dir/.fake-tag")" >"$destdir/usr/local/bin/enroot"
        chmod +x "$destdir/usr/local/bin/enroot"
    elif [[ $target == setcap ]]; then
        [[ -x $destdir/usr/local/bin/enroot ]] || { echo "setcap: $destdir/usr/local/bin/enroot-mksquashovlfs: No such file" >&2; exit 1; }
    fi
    exit 0
fi
found=""
for inc in $(grep -oE -- '-I *[^ ]+' <<<"${CPPFLAGS:-}" | sed 's/^-I *//') /usr/include; do
    [[ -f $inc/slurm/spank.h ]] && found=$inc
done
[[ -n $found ]] || { echo "$dir/pyxis_slurmd.c:1: fatal error: slurm/spank.h: No such file or directory" >&2; exit 2; }
if [[ $target == install ]]; then
    mkdir -p "$destdir/usr/local/lib/slurm" "$destdir/usr/local/share/pyxis"
    echo so >"$destdir/usr/local/lib/slurm/spank_pyxis.so"
    echo 'required /usr/local/lib/slurm/spank_pyxis.so' >"$destdir/usr/local/share/pyxis/pyxis.conf"
fi
""",
    "systemctl": r"""
root=$FMINFRA_ROOT st=$FMINFRA_ROOT/run/fake-systemd
[[ -d $st/active ]] || mkdir -p "$st/loaded" "$st/enabled" "$st/active"
norm() { if [[ $1 == *.* ]]; then echo "$1"; else echo "$1.service"; fi; }
unit_file() { local d; for d in etc/systemd/system lib/systemd/system; do [[ -f $root/$d/$1 ]] && { echo "$root/$d/$1"; return 0; }; done; return 1; }
# load_all: the unit files as systemd loads them, /etc/systemd/system's over /lib/systemd/system's.
load_all() { local d f files; rm -f "$st"/loaded/*; for d in lib etc; do files=(); for f in "$root/$d"/systemd/system/*; do [[ -f $f ]] && files+=("$f"); done; ((${#files[@]} == 0)) || cp "${files[@]}" "$st/loaded/"; done; return 0; }
[[ -e $st/booted ]] || { load_all; touch "$st/booted"; }
start() {
    local u=$1 file
    [[ -f $st/loaded/$u ]] || { echo "Failed to start $u: Unit $u not found." >&2; exit 5; }
    file=$(unit_file "$u") && ! cmp -s "$file" "$st/loaded/$u" &&
        echo "Warning: The unit file, source configuration file or drop-ins of $u changed on disk. Run 'systemctl daemon-reload' to reload units." >&2
    local exec; exec=$(sed -n 's/^ExecStart=//p' "$st/loaded/$u" | sed -e 's/\${SLURMD_OPTIONS}//g' -e 's/\$SLURMD_OPTIONS//g')
    if python3 "$FAKE_DAEMONS" "$u" $exec; then touch "$st/active/$u"; else rm -f "$st/active/$u"; fi
    return 0
}
cmd=$1; shift
now=0; if [[ ${1:-} == --now ]]; then now=1; shift; fi
case $cmd in
    daemon-reload) load_all ;;
    enable) for u; do u=$(norm "$u"); unit_file "$u" >/dev/null || { echo "Failed to enable unit: Unit file $u does not exist." >&2; exit 1; }
            touch "$st/enabled/$u"; ((now)) && start "$u"; done ;;
    start | restart) for u; do start "$(norm "$u")"; done ;;
    disable) for u; do u=$(norm "$u"); rm -f "$st/enabled/$u"; ((now)) && rm -f "$st/active/$u"; done ;;
    stop) for u; do rm -f "$st/active/$(norm "$u")"; done ;;
    is-active) [[ $1 == --quiet ]] && shift; [[ -e $st/active/$(norm "$1") ]] ;;
    *) echo "systemctl: unsupported in the fake: $cmd" >&2; exit 1 ;;
esac
""",
}

# The fake Slurm daemons systemctl starts: exit 0 = the daemon stays up.
_DAEMONS = r"""
import json, os, sys
unit, argv = sys.argv[1], sys.argv[2:]
root, cluster, ip = os.environ["FMINFRA_ROOT"], os.environ["FAKE_CLUSTER"], os.environ["FAKE_NODE_IP"]
conf = os.path.join(root, "opt/slurm/etc/slurm.conf")
def record(kind, **data):
    with open(os.path.join(cluster, "events.jsonl"), "a") as f:
        f.write(json.dumps({"daemon": kind, "ip": ip, **data}) + "\n")
if unit == "slurmctld.service":
    text = open(conf).read() if os.path.exists(conf) else ""
    up = f"({ip})" in text
    plugstack = os.path.join(root, "opt/slurm/etc/plugstack.conf")
    record("slurmctld", up=up, plugstack=open(plugstack).read() if os.path.exists(plugstack) else "")
    sys.exit(0 if up else 1)
if unit == "slurmd.service":
    server = argv[argv.index("--conf-server") + 1] if "--conf-server" in argv else ""
    record("slurmd", conf_server=server, local_conf=os.path.exists(conf))
    sys.exit(0 if server or os.path.exists(conf) else 1)
sys.exit(0)
"""

SLURMD_UNIT = """[Unit]
Description=Slurm node daemon
After=munge.service network-online.target remote-fs.target
[Service]
Type=simple
EnvironmentFile=-/etc/default/slurmd
ExecStart=/opt/slurm/sbin/slurmd -D -s $SLURMD_OPTIONS
ExecReload=/bin/kill -HUP $MAINPID
[Install]
WantedBy=multi-user.target
"""
SLURMCTLD_UNIT = """[Unit]
Description=Slurm controller daemon
After=network-online.target munge.service
[Service]
Type=simple
ExecStart=/opt/slurm/sbin/slurmctld -D -s $SLURMCTLD_OPTIONS
ExecReload=/bin/kill -HUP $MAINPID
[Install]
WantedBy=multi-user.target
"""


def publish(outdir: Path, template: dict[str, Any], s3: Any, imports: dict[str, str]) -> tuple[str, str]:
    """Do what CDK's BucketDeployment handler does with the synthesized template's
    Custom::CDKBucketDeployment: unzip its source assets (from the assembly in `outdir`) into the
    lifecycle bucket under its prefix, each marker replaced by its resolved value (`imports`: a
    fragment of an export name -> the value CloudFormation would import). Returns (bucket, prefix)."""
    (deployment,) = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "Custom::CDKBucketDeployment"]
    bucket = _literal(deployment["DestinationBucketName"], template)
    prefix = deployment["DestinationBucketKeyPrefix"]
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    keys = deployment["SourceObjectKeys"]
    for index, key in enumerate(keys):
        asset_hash = key.removesuffix(".zip")
        (folder,) = [p for p in outdir.rglob(f"asset.{asset_hash}") if p.is_dir()]
        markers = (deployment.get("SourceMarkers") or [{}] * len(keys))[index]
        data = io.BytesIO()
        with zipfile.ZipFile(data, "w") as z:  # the asset as CDK uploads it
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                z.write(path, path.relative_to(folder).as_posix())
        with zipfile.ZipFile(io.BytesIO(data.getvalue())) as z:
            for name in z.namelist():
                body = z.read(name)
                for marker, value in markers.items():
                    body = body.replace(marker.encode(), _resolve(value, imports).encode())
                assert not MARKER.search(body.decode(errors="replace")), f"{name}: unresolved marker"
                s3.put_object(Bucket=bucket, Key=prefix + name, Body=body)
    return bucket, prefix


def _resolve(value: Any, imports: dict[str, str]) -> str:
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(_resolve(p, imports) for p in parts)
    if "Fn::ImportValue" in value:
        (found,) = [v for k, v in imports.items() if k in value["Fn::ImportValue"]]
        return found
    if value == {"Ref": "AWS::URLSuffix"}:  # what CloudFormation resolves it to in the aws partition
        return "amazonaws.com"
    raise AssertionError(f"cannot resolve {value}")


def _literal(value: Any, template: dict[str, Any]) -> str:
    """A bucket name: literal, or a Ref to the bucket resource's BucketName."""
    if isinstance(value, str):
        return value
    return template["Resources"][value["Ref"]]["Properties"]["BucketName"]


def download(s3: Any, bucket: str, prefix: str, dest: Path) -> Path:
    """HyperPod's copy of SourceS3Uri onto the node: every object, no mode bits (0644)."""
    dest.mkdir(parents=True)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    for page in pages:
        for obj in page.get("Contents", []):
            path = dest / obj["Key"][len(prefix) :]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
            path.chmod(0o644)
    return dest


RECORDER = 'printf "%s\\n" "${0##*/} $* kind=${FMINFRA_NODE_KIND:-} url=${FMINFRA_REMOTE_WRITE_URL:-}" >>"$FAKE_CALLS"\n'


@dataclass
class Node:
    """One HyperPod instance: its folder (FMINFRA_ROOT), group, type and address."""

    root: Path
    group: str
    instance_type: str
    ip: str
    enroot: str = ""
    image: str = ""
    env: dict[str, str] = field(default_factory=dict)
    env_extra: dict[str, str] = field(default_factory=dict)
    result: subprocess.CompletedProcess[str] | None = None

    @property
    def calls(self) -> list[str]:
        path = self.root / "calls.log"
        return path.read_text().splitlines() if path.exists() else []


class Cluster:
    """Nodes of one HyperPod cluster, its resource_config.json, and HyperPod's agent."""

    def __init__(
        self,
        base: Path,
        groups: list[tuple[str, str, int]],
        *,
        enroot: str = "4.1.2",
        slurm_conf_delay: float = 0.5,
        images: dict[str, str] | None = None,
    ) -> None:
        self.base = base
        self.cluster_dir = base / "cluster"
        self.cluster_dir.mkdir(parents=True)
        self.daemons = base / "fake_daemons.py"
        self.daemons.write_text(_DAEMONS)
        self.slurm_conf_delay = slurm_conf_delay
        self.nodes: list[Node] = []
        for g, (name, instance_type, count) in enumerate(groups):
            for i in range(count):
                image = (images or {}).get(name) or (DEFAULT_GPU_IMAGE if instance_type.removeprefix("ml.") in GPU_TYPES else "")
                self.nodes.append(Node(base / f"{name}-{i + 1}", name, instance_type, f"10.1.{g}.{i + 10}", enroot, image))
        self.resource_config = {
            "ClusterConfig": {"ClusterArn": "arn:aws:sagemaker:us-west-2:111111111111:cluster/abcde01234yz", "ClusterName": "sim"},
            "InstanceGroups": [
                {
                    "Name": name,
                    "InstanceType": instance_type,
                    "Instances": [
                        {
                            "InstanceName": f"{name}-{i + 1}",
                            "AgentIpAddress": n.ip,
                            "CustomerIpAddress": n.ip,
                            "InstanceId": f"i-{abs(hash(n.ip)) % 10**17:017x}",
                        }
                        for i, n in enumerate(n for n in self.nodes if n.group == name)
                    ],
                }
                for name, instance_type, _ in groups
            ],
        }
        for node in self.nodes:
            self._image(node)

    def node(self, group: str, index: int = 0) -> Node:
        return [n for n in self.nodes if n.group == group][index]

    def _image(self, node: Node) -> None:
        """The AMI's files and commands, and HyperPod's resource_config.json."""
        root = node.root
        for d in ("etc/systemd/system", "lib/systemd/system", "opt/slurm/etc", "opt/slurm/include/slurm", "opt/ml/config", "proc", "bin"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "etc/fstab").write_text("LABEL=cloudimg-rootfs / ext4 defaults 0 1\n")
        (root / "etc/systemd/system/slurmd.service").write_text(SLURMD_UNIT)
        (root / "etc/systemd/system/slurmctld.service").write_text(SLURMCTLD_UNIT)
        (root / "opt/slurm/include/slurm/spank.h").write_text("/* Slurm SPANK API */\n")
        for unit in UBUNTU_UNITS:
            (root / "lib/systemd/system" / unit).write_text("[Unit]\n")
        # Where SAGEMAKER_RESOURCE_CONFIG_PATH points; not the default path, so that a script that
        # ignores the variable fails here.
        (root / "run/hyperpod").mkdir(parents=True)
        (root / "run/hyperpod/resource_config.json").write_text(json.dumps(self.resource_config))
        for name, body in _FAKES.items():
            path = root / "bin" / name
            path.write_text(f'{BASH_SHEBANG}echo "{name} $*" >>"$FAKE_CALLS"\n{body}')
            path.chmod(0o755)
        if node.enroot:  # the AMI's enroot (a package: configuration in /etc/enroot)
            (root / "bin/enroot").write_text(f"#!/usr/bin/env bash\n[[ $1 == version ]] && echo {node.enroot}\nexit 0\n")
            (root / "bin/enroot").chmod(0o755)
        if node.image:
            dressed = dress(root, node.image)
            node.env_extra = dressed
        node.env = {
            # Ubuntu's default PATH puts /usr/local/bin (what source builds install) before the packages' folders.
            "PATH": f"{root / 'usr/local/bin'}:{root / 'bin'}:/usr/bin:/bin",
            "HOME": str(root),
            "FMINFRA_ROOT": str(root),
            "SAGEMAKER_RESOURCE_CONFIG_PATH": str(root / "run/hyperpod/resource_config.json"),
            "FAKE_NODE_IP": node.ip,
            "FAKE_INSTANCE_TYPE": node.instance_type,
            "FAKE_CALLS": str(root / "calls.log"),
            "FAKE_BIN": str(root / "bin"),
            "FAKE_CLUSTER": str(self.cluster_dir),
            "FAKE_DAEMONS": str(self.daemons),
            # "URL TAG COMMIT" lines, for the fake git
            "FAKE_TAGS": "\n".join(f"{url} {tag} {commit}" for url, tags in TAG_COMMITS.items() for tag, commit in tags.items()),
            "NVME_WAIT_S": "0",
            "POLL_INTERVAL": "0.2",
            "SLURM_CONF_TIMEOUT": "20",
            "RETRIES": "2",
            "RETRY_DELAY": "0",
        }
        if node.env_extra:  # the GPU image's read-only commands (nvidia-smi, dpkg-query, ldconfig) after the node's own
            extra = dict(node.env_extra)
            node.env["PATH"] = f"{root / 'usr/local/bin'}:{root / 'bin'}:{extra.pop('FAKE_IMAGE_BIN')}:/usr/bin:/bin"
            node.env.update(extra)

    def write_slurm_conf(self) -> None:
        """HyperPod's agent: slurm.conf naming the controller, on the controller."""
        controllers = [n for n in self.nodes if n.group == "controller"]
        for c in controllers:
            text = f"ClusterName=sim\nSlurmctldHost=ip-{c.ip.replace('.', '-')}({c.ip})\n"
            (c.root / "opt/slurm/etc/slurm.conf").write_text(text)

    def run_each(self, copies: dict[str, Path], extra_env: dict[str, str]) -> None:
        """The nodes in `copies` (address -> their downloaded folder) run `bash on_create.sh` from
        it, all at once; HyperPod's agent writes slurm.conf after `slurm_conf_delay`."""
        timer = threading.Timer(self.slurm_conf_delay, self.write_slurm_conf)
        timer.daemon = True
        timer.start()
        nodes = [n for n in self.nodes if n.ip in copies]
        threads = [threading.Thread(target=self._run_node, args=(n, copies[n.ip], extra_env)) for n in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        timer.cancel()

    def _run_node(self, node: Node, scripts: Path, extra_env: dict[str, str]) -> None:
        node.result = subprocess.run(
            ["bash", "on_create.sh"], cwd=scripts, env={**node.env, **extra_env}, capture_output=True, text=True, check=False, timeout=120
        )

    def events(self) -> list[dict[str, Any]]:
        path = self.cluster_dir / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def registered(self, worker_groups: list[str]) -> set[str]:
        """Addresses of the compute nodes registered with slurmctld: slurmd configless at a
        running controller, in a worker group."""
        events = self.events()
        controllers = {e["ip"] for e in events if e["daemon"] == "slurmctld" and e["up"]}
        groups = {n.ip: n.group for n in self.nodes}
        return {
            e["ip"]
            for e in events
            if e["daemon"] == "slurmd" and controllers & set(e["conf_server"].split(",")) and groups[e["ip"]] in worker_groups
        }


def reboot(node: Node) -> list[str]:
    """What comes back mounted after a reboot: systemd's fstab generator, per fstab entry."""
    (node.root / "proc/mounts").write_text("")
    units = {p.name for p in (node.root / "lib/systemd/system").iterdir()} | {p.name for p in (node.root / "etc/systemd/system").iterdir()}
    mounted = []
    for line in (node.root / "etc/fstab").read_text().splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[0].startswith("#") or fields[2] != "lustre":
            continue
        requires = [o.split("=", 1)[1] for o in fields[3].split(",") if o.startswith("x-systemd.requires=")]
        if all(r in units for r in requires):
            mounted.append(fields[1])
    return mounted


def prepare_download(scripts: Path) -> None:
    """Replace the exporter installer with a 0644 recorder (see the module docstring); the node
    scripts run for real on the GPU nodes' modelled images."""
    for rel in ("observability/install_exporters.sh",):
        path = scripts / rel
        assert path.exists(), f"{rel} was not published"
        path.write_text("#!/usr/bin/env bash\n" + RECORDER)
        path.chmod(0o644)
