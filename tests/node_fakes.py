"""A fake node for the node-script tests: a fake root, fake commands on PATH that log their calls,
and fake downloads. Nothing here touches the real machine."""

from __future__ import annotations

import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from fminfra.core.versions import parse_manifest
from tests.conftest import ROOT

NODE = ROOT / "scripts" / "node"
MANIFEST = parse_manifest((NODE / "versions.env").read_text())
FAKE_GDRCOPY_COMMIT = "1" * 40
FAKE_NCCL_TESTS_COMMIT = "2" * 40

# Each fake logs "name args..." to $FAKE_LOG, then does its part.
_PRELUDE = '#!/usr/bin/env bash\nprintf "%s\\n" "$(basename "$0") $*" >>"$FAKE_LOG"\n'

FAKES: dict[str, str] = {
    "apt-get": r"""
if [[ -f $FAKE_STATE/apt-fail-once ]]; then rm -f "$FAKE_STATE/apt-fail-once"; exit 100; fi
install=0
for a in "$@"; do
  if [[ $a == install ]]; then install=1; continue; fi
  [[ $install == 1 && $a != -* ]] || continue
  name=${a%%=*}; version=1.0-fake
  [[ $a == *=* ]] && version=${a#*=}
  [[ $name =~ ^nvidia-(driver|fabricmanager)-([0-9]+) ]] && version=${BASH_REMATCH[2]}.95.05-1
  mkdir -p "$FAKE_STATE/pkgs"; printf '%s' "$version" >"$FAKE_STATE/pkgs/$name"
done
""",
    "dnf": r"""
install=0
for a in "$@"; do
  if [[ $a == install ]]; then install=1; continue; fi
  [[ $install == 1 && $a != -* ]] || continue
  name=$a; version=1.0-fake
  if [[ $a =~ ^(libnccl|libnccl-devel)-([0-9].*)$ ]]; then name=${BASH_REMATCH[1]}; version=${BASH_REMATCH[2]}; fi
  if [[ $a =~ ^nvidia-driver:([0-9]+) ]]; then name=nvidia-driver; version=${BASH_REMATCH[1]}.95.05-1; fi
  [[ $a == nvidia-fabric-manager ]] && version=580.95.05-1
  mkdir -p "$FAKE_STATE/pkgs"; printf '%s' "$version" >"$FAKE_STATE/pkgs/$name"
done
""",
    "dpkg-query": r"""
name=${!#}
[[ -f $FAKE_STATE/pkgs/$name ]] || exit 1
printf 'ii  %s' "$(<"$FAKE_STATE/pkgs/$name")"
""",
    "rpm": r"""
name=${!#}
[[ -f $FAKE_STATE/pkgs/$name ]] || { echo "package $name is not installed"; exit 1; }
printf '%s' "$(<"$FAKE_STATE/pkgs/$name")"
""",
    "curl": r"""
dest=""; url=""
while (($#)); do
  case $1 in --output|-o) dest=$2; shift ;; http*) url=$1 ;; esac
  shift
done
[[ $url == *169.254.169.254* ]] && exit 7
name=$(basename "$url")
if [[ -n ${FAKE_CURL_FAIL_ONCE:-} && $name == "$FAKE_CURL_FAIL_ONCE" && ! -f $FAKE_STATE/curl-failed-$name ]]; then
  touch "$FAKE_STATE/curl-failed-$name"; echo "curl: (56) Recv failure: Connection reset by peer" >&2; exit 56
fi
[[ -f $FAKE_DOWNLOADS/$name ]] || { echo "curl: (22) The requested URL returned error: 404" >&2; exit 22; }
cp "$FAKE_DOWNLOADS/$name" "$dest"
""",
    "gpg": r"""
mode=""; files=()
while (($#)); do
  case $1 in
    --homedir) shift ;;
    --show-keys|--import|--export|--verify) mode=$1 ;;
    --status-fd) shift ;;
    -*) ;;
    *) files+=("$1") ;;
  esac
  shift
done
case $mode in
  --show-keys) printf 'pub:-:4096:1:0000000000000000:0:::-:::scESC::::::23::0:\nfpr:::::::::%s:\n' "$(head -n 1 "${files[0]}")" ;;
  --import) ;;
  --export) printf 'FAKE-KEYRING\n' ;;
  --verify)
    read -r word fpr <"${files[0]}"
    if [[ $word == GOOD ]]; then printf '[GNUPG:] GOODSIG 0 x\n[GNUPG:] VALIDSIG %s 2026-01-01 0 0 4 0 1 10 00 %s\n' "$fpr" "$fpr"; exit 0; fi
    printf '[GNUPG:] BADSIG 0 x\n'; exit 1 ;;
esac
""",
    "git": r"""
dir=.
if [[ $1 == -C ]]; then dir=$2; shift 2; fi
while [[ $1 == -c ]]; do shift 2; done
case $1 in
  init) mkdir -p "${!#}" ;;
  fetch) printf '%s' "${!#}" >"$dir/.fetched" ;;
  checkout)
    cp "$dir/.fetched" "$dir/.head"
    for s in insmod.sh autogen.sh configure; do printf '#!/usr/bin/env bash\nprintf "%%s\\n" "%s $*" >>"$FAKE_LOG"\n' "$s" >"$dir/$s"; chmod +x "$dir/$s"; done ;;
  rev-parse) if [[ -n ${FAKE_GIT_HEAD:-} ]]; then printf '%s\n' "$FAKE_GIT_HEAD"; else cat "$dir/.head"; echo; fi ;;
esac
""",
    "nvidia-smi": r"""
version=${FAKE_DRIVER_VERSION:-}
if [[ -z $version ]]; then
  for f in "$FAKE_STATE"/pkgs/nvidia-driver*; do [[ -f $f ]] && version=$(<"$f") && version=${version%-*}; done
fi
[[ -n $version ]] || { echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." ; exit 9; }
if [[ $1 == nvlink ]]; then
  for ((g = 0; g < ${FAKE_GPUS:-8}; g++)); do echo "GPU $g: NVIDIA H100 80GB HBM3"; for l in 0 1; do echo "	 Link $l: 26.562 GB/s"; done; done
  [[ -n ${FAKE_NVLINK_INACTIVE:-} ]] && echo "	 Link 2: <inactive>"
  exit 0
fi
for ((g = 0; g < ${FAKE_GPUS:-8}; g++)); do echo "$version"; done
""",
    "lspci": r"""
echo "00:05.0 Ethernet controller: Amazon.com, Inc. Elastic Network Adapter (ENA)"
for ((i = 0; i < ${FAKE_EFA_COUNT:-0}; i++)); do echo "00:1$i.0 Ethernet controller: Amazon.com, Inc. Elastic Fabric Adapter (EFA)"; done
""",
    "fi_info": r"""
[[ ${FAKE_FI_INFO_OK:-1} == 1 ]] || { echo "fi_getinfo: -61 (No data available)"; exit 1; }
printf 'provider: efa\n    fabric: efa\n    domain: rdmap16s27-rdm\n'
""",
    "mpirun": 'cat "$FAKE_ALLREDUCE_OUTPUT"\n',
    "srun": 'cat "$FAKE_ALLREDUCE_OUTPUT"\n',
    "make": "",
    "apt-mark": "",
    "systemctl": "",
    "modprobe": "",
    "ldconfig": "",
}

# Commands that only read the node's state; a second bootstrap run may call these and nothing else.
READ_ONLY = {"dpkg-query", "rpm", "nvidia-smi"}

EFA_INSTALLER = r"""#!/usr/bin/env bash
printf '%s\n' "efa_installer.sh $*" >>"$FAKE_LOG"
mkdir -p "$FMINFRA_ROOT/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu" "$FAKE_STATE/pkgs"
printf '# EFA installer version: @EFA@\n' >"$FMINFRA_ROOT/opt/amazon/efa_installed_packages"
touch "$FMINFRA_ROOT/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net-ofi.so"
printf '@OFI@-1' >"$FAKE_STATE/pkgs/libnccl-ofi"
"""


@dataclass
class FakeNode:
    """A fake root with fake commands; `run(script, *args)` runs a node script against it."""

    base: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def log(self) -> Path:
        return self.base / "calls.log"

    @property
    def state(self) -> Path:
        return self.base / "fake-state"

    @property
    def downloads(self) -> Path:
        return self.base / "downloads"

    @property
    def markers(self) -> Path:
        return self.root / "var" / "lib" / "fminfra"

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def run(self, script: str, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
        env = {**self.env, **extra_env}
        return subprocess.run(["bash", str(NODE / script), *args], env=env, capture_output=True, text=True, timeout=60, check=False)

    def snapshot(self) -> dict[str, bytes]:
        """Every file under the fake root except logs, with its content."""
        return {
            str(p.relative_to(self.root)): p.read_bytes()
            for p in sorted(self.root.rglob("*"))
            if p.is_file() and "var/log" not in str(p.relative_to(self.root))
        }


def make_node(base: Path, *, os_id: str = "ubuntu", os_version: str = "22.04", pinned_commits: bool = True) -> FakeNode:
    node = FakeNode(base)
    bin_dir = base / "bin"
    for d in (bin_dir, node.root / "etc", node.state, node.downloads):
        d.mkdir(parents=True, exist_ok=True)
    for name, body in FAKES.items():
        path = bin_dir / name
        path.write_text(_PRELUDE + body)
        path.chmod(0o755)
    (node.root / "etc" / "os-release").write_text(f'NAME="test"\nID={os_id}\nVERSION_ID="{os_version}"\n')

    manifest = (NODE / "versions.env").read_text()
    if pinned_commits:
        manifest = manifest.replace("\nGDRCOPY_COMMIT=\n", f"\nGDRCOPY_COMMIT={FAKE_GDRCOPY_COMMIT}\n")
        manifest = manifest.replace("\nNCCL_TESTS_COMMIT=\n", f"\nNCCL_TESTS_COMMIT={FAKE_NCCL_TESTS_COMMIT}\n")
    (base / "versions.env").write_text(manifest)

    # Downloads: the NVIDIA repository keys and the EFA installer with its key and signature. A
    # fake key file holds its fingerprint; a fake signature says GOOD or BAD and by which key.
    apt_fpr, rpm_fpr = MANIFEST["NVIDIA_APT_KEY_FINGERPRINT"], MANIFEST["NVIDIA_RPM_KEY_FINGERPRINT"]
    (node.downloads / f"{apt_fpr[-8:].lower()}.pub").write_text(apt_fpr + "\n")
    (node.downloads / f"{rpm_fpr[-8:]}.pub").write_text(rpm_fpr + "\n")
    efa_version = MANIFEST["EFA_INSTALLER_VERSION"]
    installer_dir = base / "efa-src" / "aws-efa-installer"
    installer_dir.mkdir(parents=True)
    installer = installer_dir / "efa_installer.sh"
    installer.write_text(EFA_INSTALLER.replace("@EFA@", efa_version).replace("@OFI@", MANIFEST["AWS_OFI_NCCL_VERSION"]))
    installer.chmod(0o755)
    tarball = node.downloads / f"aws-efa-installer-{efa_version}.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(installer_dir, arcname="aws-efa-installer")
    (node.downloads / "aws-efa-installer.key").write_text(MANIFEST["EFA_INSTALLER_KEY_FINGERPRINT"] + "\n")
    sign(node, good=True)

    node.env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(base),
        "FMINFRA_ROOT": str(node.root),
        "FMINFRA_VERSIONS": str(base / "versions.env"),
        "FMINFRA_RETRY_DELAY_S": "0",
        "FMINFRA_KERNEL_RELEASE": "6.8.0-1000-aws",
        "FAKE_LOG": str(node.log),
        "FAKE_STATE": str(node.state),
        "FAKE_DOWNLOADS": str(node.downloads),
    }
    return node


def sign(node: FakeNode, *, good: bool, fingerprint: str | None = None) -> None:
    fpr = fingerprint or MANIFEST["EFA_INSTALLER_KEY_FINGERPRINT"]
    sig = node.downloads / f"aws-efa-installer-{MANIFEST['EFA_INSTALLER_VERSION']}.tar.gz.sig"
    sig.write_text(f"{'GOOD' if good else 'BAD'} {fpr}\n")


def install_ami(node: FakeNode, **versions: str) -> None:
    """What a DLAMI/HyperPod AMI carries: packages at the given (or the manifest's) versions."""
    pkgs = node.state / "pkgs"
    pkgs.mkdir(parents=True, exist_ok=True)
    nccl = f"{MANIFEST['NCCL_VERSION']}+cuda{MANIFEST['CUDA_VERSION']}"
    defaults = {
        f"nvidia-driver-{MANIFEST['NVIDIA_DRIVER_BRANCH']}-open": f"{MANIFEST['NVIDIA_DRIVER_BRANCH']}.95.05-1",
        f"nvidia-fabricmanager-{MANIFEST['NVIDIA_DRIVER_BRANCH']}": f"{MANIFEST['NVIDIA_DRIVER_BRANCH']}.95.05-1",
        f"cuda-toolkit-{MANIFEST['CUDA_VERSION'].replace('.', '-')}": "1.0",
        "libnccl2": nccl,
        "libnccl-ofi": f"{MANIFEST['AWS_OFI_NCCL_VERSION']}-1",
        "gdrcopy": f"{MANIFEST['GDRCOPY_VERSION']}-1",
    }
    for name, version in {**defaults, **versions}.items():
        (pkgs / name).write_text(version)
    amazon = node.root / "opt" / "amazon"
    amazon.mkdir(parents=True, exist_ok=True)
    (amazon / "efa_installed_packages").write_text(f"# EFA installer version: {MANIFEST['EFA_INSTALLER_VERSION']}\n")
