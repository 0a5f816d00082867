"""A fake node for the node-script tests: a fake root, fake commands on PATH that log their calls,
a fake package repository and fake downloads. Nothing here touches the real machine.

What the fakes model, and from where:
- apt: `apt-get install NAME=VERSION` fails unless the repository offers that exact version, and
  refuses to change a held package without `--allow-change-held-packages` (apt's own messages);
  `apt-get update` fails when two entries for one URL name different `signed-by` keyrings
  (docs/facts/node-software.md#apt-signed-by-conflict); `apt-cache madison` prints
  "name | version | source" rows and dnf `list --showduplicates` "name.arch version repo"
  (docs/facts/node-software.md#package-version-queries).
- The repository offers what NVIDIA's CUDA repository offers for the versions used here: the
  NCCL builds of docs/facts/node-software.md#nccl-package-cuda-suffix (2.30.4-1 for CUDA 13.2 and
  12.9 only), the driver, Fabric Manager and nvidia-imex at each modelled driver version, nvlsm.
- The EFA installer writes the layout of docs/facts/node-software.md#efa-install-paths and
  #ofi-nccl-library-layout: libfabric and Open MPI under lib64 on AL2023 and lib on Ubuntu, the
  aws-ofi-nccl plugin under /opt/amazon/ofi-nccl/lib (deb) or lib64 (rpm).
- The loaded driver is /sys/module/nvidia/version, which nvidia-smi reports.
- Images (IMAGES below) are described one by one with their sources.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from fminfra.core.versions import parse_manifest
from tests.conftest import ROOT

NODE = ROOT / "scripts" / "node"
MANIFEST = parse_manifest((NODE / "versions.env").read_text())
NCCL_PKG = f"{MANIFEST['NCCL_VERSION']}+cuda{MANIFEST['NCCL_PACKAGE_CUDA']}"
KERNEL = "6.8.0-1066-aws"

# The fakes' interpreter: the bash that `#!/usr/bin/env bash` finds on the fakes' PATH (the fake
# folders, then /usr/bin:/bin), named by its path, which spares an exec of env on every fake call.
BASH_SHEBANG = f"#!{shutil.which('bash', path='/usr/bin:/bin') or '/bin/bash'}\n"

# Each fake logs "name args..." to $FAKE_LOG, then does its part. cuda_dirs: the toolkit package
# cuda-toolkit-X-Y installs /usr/local/cuda-X.Y.
_PRELUDE = (
    BASH_SHEBANG + 'printf "%s\\n" "${0##*/} $*" >>"$FAKE_LOG"\n'
    # nccl_lib PACKAGE VERSION: NVIDIA's libnccl2 (deb) / libnccl (rpm) install libnccl.so.X.Y.Z and the
    # libnccl.so.2 link in the loader's directory; the library holds "NCCL version X.Y.Z+cudaA.B".
    "nccl_lib() { [[ $1 == libnccl2 || $1 == libnccl ]] || return 0; local dir=/usr/lib64 v=${2%%-*} c=${2##*+cuda}; "
    '[[ $1 == libnccl2 ]] && dir=/usr/lib/${FAKE_ARCH:-x86_64}-linux-gnu; mkdir -p "$FMINFRA_ROOT$dir"; rm -f "$FMINFRA_ROOT$dir"/libnccl.so.2*; '
    'printf "\\0NCCL version %s+cuda%s\\0" "$v" "$c" >"$FMINFRA_ROOT$dir/libnccl.so.$v"; ln -sf "libnccl.so.$v" "$FMINFRA_ROOT$dir/libnccl.so.2"; }\n'
    # companion_bin PACKAGE: Fabric Manager's packages install /usr/bin/nv-fabricmanager, nvidia-imex's
    # /usr/bin/nvidia-imex (docs/facts/node-software.md#fabric-manager-imex-binaries).
    "companion_bin() { local b=; case $1 in nvidia-fabricmanager* | nvidia-fabric-manager*) b=nv-fabricmanager ;; "
    'nvidia-imex*) b=nvidia-imex ;; *) return 0 ;; esac; mkdir -p "$FMINFRA_ROOT/usr/bin"; '
    'touch "$FMINFRA_ROOT/usr/bin/$b"; chmod +x "$FMINFRA_ROOT/usr/bin/$b"; }\n'
    "cuda_dirs() { [[ $1 =~ ^cuda-toolkit-([0-9]+)-([0-9]+)$ ]] || return 0; "
    'mkdir -p "$FMINFRA_ROOT/usr/local/cuda-${BASH_REMATCH[1]}.${BASH_REMATCH[2]}/bin"; '
    'touch "$FMINFRA_ROOT/usr/local/cuda-${BASH_REMATCH[1]}.${BASH_REMATCH[2]}/bin/nvcc"; '
    'chmod +x "$FMINFRA_ROOT/usr/local/cuda-${BASH_REMATCH[1]}.${BASH_REMATCH[2]}/bin/nvcc"; }\n'
)

FAKES: dict[str, str] = {
    "apt-get": r"""
if [[ -f $FAKE_STATE/apt-fail-once ]]; then rm -f "$FAKE_STATE/apt-fail-once"; exit 100; fi
if [[ " $* " == *" update "* ]]; then
  declare -A seen=()
  for f in "$FMINFRA_ROOT"/etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    while read -r line; do
      [[ $line =~ ^deb\ \[signed-by=([^]]+)\]\ ([^ ]+) ]] || continue
      url=${BASH_REMATCH[2]%/}; key=${BASH_REMATCH[1]}
      if [[ -n ${seen[$url]:-} && ${seen[$url]} != "$key" ]]; then
        echo "E: Conflicting values set for option Signed-By regarding source $url/ /: ${seen[$url]} != $key" >&2; exit 100
      fi
      seen[$url]=$key
    done <"$f"
  done
  exit 0
fi
install=0; allow_held=0; names=(); versions=()
for a in "$@"; do
  [[ $a == --allow-change-held-packages ]] && allow_held=1
  if [[ $a == install ]]; then install=1; continue; fi
  [[ $install == 1 && $a != -* ]] || continue
  name=${a%%=*}; version=""
  [[ $a == *=* ]] && version=${a#*=}
  if [[ -n $version ]]; then
    if [[ ! -f $FAKE_STATE/repo/$name ]] || ! grep -qxF -- "$version" "$FAKE_STATE/repo/$name"; then
      echo "E: Version '$version' for '$name' was not found" >&2; exit 100
    fi
  elif [[ -f $FAKE_STATE/repo/$name ]]; then version=$(tail -n 1 "$FAKE_STATE/repo/$name")
  else version=1.0-fake; fi
  if [[ -f $FAKE_STATE/held/$name && $allow_held == 0 && -f $FAKE_STATE/pkgs/$name && $(<"$FAKE_STATE/pkgs/$name") != "$version" ]]; then
    echo "E: Held packages were changed and -y was used without --allow-change-held-packages." >&2; exit 100
  fi
  names+=("$name"); versions+=("$version")
done
mkdir -p "$FAKE_STATE/pkgs"
for i in "${!names[@]}"; do printf '%s' "${versions[$i]}" >"$FAKE_STATE/pkgs/${names[$i]}"; cuda_dirs "${names[$i]}"; companion_bin "${names[$i]}"; nccl_lib "${names[$i]}" "${versions[$i]}"; done
""",
    "apt-cache": r"""
[[ $1 == madison ]] || exit 0
[[ -f $FAKE_STATE/repo/$2 ]] || exit 0
while read -r v; do printf '%10s | %s | https://developer.download.nvidia.com/compute/cuda/repos/fake  Packages\n' "$2" "$v"; done <"$FAKE_STATE/repo/$2"
""",
    "apt-mark": r"""
mkdir -p "$FAKE_STATE/held"; op=$1; shift
for n in "$@"; do if [[ $op == hold ]]; then touch "$FAKE_STATE/held/$n"; else rm -f "$FAKE_STATE/held/$n"; fi; done
""",
    "dnf": r"""
if [[ " $* " == *" list "* ]]; then
  name=${!#}; [[ -f $FAKE_STATE/repo/$name ]] || exit 1
  while read -r v; do printf '%s.x86_64  %s  fminfra-cuda\n' "$name" "$v"; done <"$FAKE_STATE/repo/$name"; exit 0
fi
if [[ " $* " == *" versionlock "* ]]; then
  mkdir -p "$FAKE_STATE/held"; add=0; [[ " $* " == *" add "* ]] && add=1
  for n in "$@"; do [[ $n == -* || $n == versionlock || $n == add || $n == delete ]] && continue
    if [[ $add == 1 ]]; then touch "$FAKE_STATE/held/$n"; else rm -f "$FAKE_STATE/held/$n"; fi; done
  exit 0
fi
install=0
for a in "$@"; do
  if [[ $a == install ]]; then install=1; continue; fi
  [[ $install == 1 && $a != -* && $a != *'('* ]] || continue
  name=$a; version=""; versioned=0
  for r in "$FAKE_STATE"/repo/*; do
    n=${r##*/}
    [[ $a == "$n"-[0-9]* ]] && versioned=1
    if [[ $a == "$n"-* ]] && grep -qxF -- "${a#"$n"-}" "$r"; then name=$n; version=${a#"$n"-}; fi
  done
  if [[ -z $version && $versioned == 1 ]]; then echo "Error: Unable to find a match: $a" >&2; exit 1; fi
  if [[ $a =~ ^nvidia-driver:([0-9]+) ]]; then name=nvidia-driver; version=$(tail -n 1 "$FAKE_STATE/repo/nvidia-driver-${BASH_REMATCH[1]}-open"); fi
  [[ -n $version ]] || { if [[ -f $FAKE_STATE/repo/$name ]]; then version=$(tail -n 1 "$FAKE_STATE/repo/$name"); else version=1.0-fake; fi; }
  mkdir -p "$FAKE_STATE/pkgs"; printf '%s' "$version" >"$FAKE_STATE/pkgs/$name"; cuda_dirs "$name"; companion_bin "$name"; nccl_lib "$name" "$version"
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
name=${url##*/}
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
version=${FAKE_DRIVER_VERSION-}
[[ -n ${FAKE_DRIVER_VERSION+set} || ! -f $FMINFRA_ROOT/sys/module/nvidia/version ]] || version=$(<"$FMINFRA_ROOT/sys/module/nvidia/version")
[[ -n ${FAKE_SMI_VERSION:-} ]] && version=$FAKE_SMI_VERSION
[[ -n $version ]] || { echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." ; exit 9; }
if [[ $1 == nvlink ]]; then
  for ((g = 0; g < ${FAKE_GPUS:-8}; g++)); do echo "GPU $g: NVIDIA H100 80GB HBM3"; for l in 0 1; do echo "	 Link $l: 26.562 GB/s"; done; done
  [[ -n ${FAKE_NVLINK_INACTIVE:-} ]] && echo "	 Link 2: <inactive>"
  exit 0
fi
for ((g = 0; g < ${FAKE_GPUS:-8}; g++)); do echo "$version"; done
""",
    "modprobe": r"""
if [[ $1 == nvidia ]]; then
  for f in "$FAKE_STATE"/pkgs/nvidia-driver*; do
    [[ -f $f ]] || continue
    mkdir -p "$FMINFRA_ROOT/sys/module/nvidia"; v=$(<"$f"); printf '%s\n' "${v%-*}" >"$FMINFRA_ROOT/sys/module/nvidia/version"
  done
fi
""",
    "make": r"""
prefix=""; build=""
for a in "$@"; do case $a in prefix=*) prefix=${a#prefix=} ;; BUILDDIR=*) build=${a#BUILDDIR=} ;; esac; done
if [[ " $* " == *" lib_install "* ]]; then mkdir -p "$prefix/lib"; touch "$prefix/lib/libgdrapi.so.2.5" "$prefix/lib/libgdrapi.so.2" "$prefix/lib/libgdrapi.so"; fi
if [[ " $* " == *" drv_install "* ]]; then mkdir -p "$FMINFRA_ROOT/lib/modules/$FMINFRA_KERNEL_RELEASE/extra"; touch "$FMINFRA_ROOT/lib/modules/$FMINFRA_KERNEL_RELEASE/extra/gdrdrv.ko"; fi
if [[ -n $build ]]; then mkdir -p "$build"; touch "$build/all_reduce_perf"; fi
""",
    "g++": r"""
[[ $1 == -dumpversion ]] && { echo "${FAKE_GXX_VERSION:-11}"; exit 0; }
[[ " $* " == *" -std=c++20 "* && ${FAKE_GXX_VERSION:-11} -lt 10 ]] && { echo "g++: error: unrecognized command-line option '-std=c++20'" >&2; exit 1; }
cat >/dev/null; exit 0
""",
    "ssh": r"""
[[ ${FAKE_SSH_OK:-0} == 1 ]] && exit 0
echo "$3: Permission denied (publickey)." >&2; exit 255
""",
    "hostname": "echo ip-10-0-0-1\n",
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
    "systemctl": "",
    # ldconfig -p: the loader's cache, built as ldconfig builds it: the default directories and those
    # listed in /etc/ld.so.conf.d/*.conf, one "NAME (flags) => PATH" line per library
    # (docs/facts/node-software.md#loader-search-order). Plain `ldconfig` (rebuild) does nothing here.
    "ldconfig": r"""
[[ ${1:-} == -p ]] || exit 0
dirs=(/lib/${FAKE_ARCH:-x86_64}-linux-gnu /usr/lib/${FAKE_ARCH:-x86_64}-linux-gnu /lib64 /usr/lib64 /lib /usr/lib /usr/local/lib)
for conf in "$FMINFRA_ROOT"/etc/ld.so.conf.d/*.conf; do
  [[ -f $conf ]] || continue
  while read -r d; do [[ -z $d || $d == \#* ]] || dirs+=("$d"); done <"$conf"
done
for d in "${dirs[@]}"; do
  for f in "$FMINFRA_ROOT$d"/lib*.so*; do [[ -e $f ]] && printf '\t%s (libc6,x86-64) => %s\n' "${f##*/}" "$d/${f##*/}"; done
done
exit 0
""",
}

# Commands that only read the node's state; a second bootstrap run may call these and nothing else.
READ_ONLY = {"dpkg-query", "rpm", "nvidia-smi", "ldconfig -p"}


def read_only(calls: list[str]) -> bool:
    """Whether every call only read the node's state (`ldconfig -p` reads the cache; `ldconfig` rebuilds it)."""
    return all(c.split()[0] in READ_ONLY or c.startswith("ldconfig -p") for c in calls)


# The EFA installer: the layout of the OS family it runs on (FAKE_OS_FAMILY: deb or rpm).
EFA_INSTALLER = r"""#!/usr/bin/env bash
printf '%s\n' "efa_installer.sh $*" >>"$FAKE_LOG"
lib=lib; [[ $FAKE_OS_FAMILY == rpm ]] && lib=lib64
mkdir -p "$FMINFRA_ROOT/opt/amazon/efa/$lib" "$FMINFRA_ROOT/opt/amazon/openmpi/$lib" "$FMINFRA_ROOT/opt/amazon/ofi-nccl/$lib" "$FAKE_STATE/pkgs"
printf '# EFA installer version: @EFA@\n' >"$FMINFRA_ROOT/opt/amazon/efa_installed_packages"
touch "$FMINFRA_ROOT/opt/amazon/efa/$lib/libfabric.so.1" "$FMINFRA_ROOT/opt/amazon/openmpi/$lib/libmpi.so.40"
touch "$FMINFRA_ROOT/opt/amazon/ofi-nccl/$lib/libnccl-net-ofi.so" "$FMINFRA_ROOT/opt/amazon/ofi-nccl/$lib/libnccl-ofi-tuner.so"
printf '@OFI@-1' >"$FAKE_STATE/pkgs/libnccl-ofi"
"""

# What the fake repository offers (NVIDIA's CUDA repository for the versions modelled here).
REPOSITORY: dict[str, list[str]] = {
    "libnccl2": ["2.28.9-1+cuda13.0", "2.30.4-1+cuda12.9", "2.30.4-1+cuda13.2"],
    "libnccl-dev": ["2.28.9-1+cuda13.0", "2.30.4-1+cuda12.9", "2.30.4-1+cuda13.2"],
    "libnccl": ["2.28.9-1+cuda13.0", "2.30.4-1+cuda12.9", "2.30.4-1+cuda13.2"],
    "libnccl-devel": ["2.28.9-1+cuda13.0", "2.30.4-1+cuda12.9", "2.30.4-1+cuda13.2"],
    "nvidia-driver-580-open": ["580.95.05-1"],
    "nvidia-fabricmanager-580": ["580.95.05-1"],
    # From branch 590 NVIDIA's Ubuntu packages drop the branch from the name
    # (docs/facts/node-software.md#nvidia-ubuntu-590-package-names).
    "nvidia-fabricmanager": ["580.95.05-1", "595.91.07-1"],
    "nvidia-fabricmanager-570": ["570.172.08-1"],
    # Amazon Linux: nvidia-fabric-manager before branch 580, nvidia-fabricmanager from 580 on
    # (docs/facts/node-software.md#nvidia-fabric-manager-rpm-name).
    "nvidia-fabric-manager": ["570.172.08-1"],
    "nvidia-imex-580": ["580.95.05-1"],
    "nvidia-imex-595": ["595.91.07-1"],
    "nvidia-imex": ["580.95.05-1", "595.91.07-1"],
    "nvlsm": ["2025.06.10-1"],
    "cuda-toolkit-13-0": ["13.0.2-1"],
}


@dataclass
class FakeNode:
    """A fake root with fake commands; `run(script, *args)` runs a node script against it."""

    base: Path
    env: dict[str, str] = field(default_factory=dict)
    root_dir: Path | None = None  # another node's root (the HyperPod simulation's), else base/root

    @property
    def root(self) -> Path:
        return self.root_dir or self.base / "root"

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

    @property
    def manifest(self) -> Path:
        return Path(self.env["FMINFRA_VERSIONS"])

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def installs(self) -> list[str]:
        return [c for c in self.calls() if (c.startswith(("apt-get", "dnf")) and " install " in c) or c.startswith("efa_installer")]

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

    def package(self, name: str) -> str | None:
        path = self.state / "pkgs" / name
        return path.read_text() if path.exists() else None

    def put(self, path: str, content: str = "") -> None:
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)

    def set_manifest(self, **values: str) -> None:
        """Change pins in this node's copy of the manifest (a pin bump)."""
        lines = []
        for line in self.manifest.read_text().splitlines():
            key = line.split("=", 1)[0]
            lines.append(f"{key}={values.pop(key)}" if key in values and not line.startswith("#") else line)
        assert not values, values
        self.manifest.write_text("\n".join(lines) + "\n")

    def offer(self, name: str, *versions: str) -> None:
        path = self.state / "repo" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        existing = path.read_text().splitlines() if path.exists() else []
        path.write_text("\n".join([*existing, *versions]) + "\n")

    def install_packages(self, **packages: str) -> None:
        pkgs = self.state / "pkgs"
        pkgs.mkdir(parents=True, exist_ok=True)
        for name, version in packages.items():
            name = name.replace("_", "-")
            (pkgs / name).write_text(version)
            # What the package puts on the node (the fake apt and dnf do the same: companion_bin).
            binary = {"nvidia-fabricmanager": "nv-fabricmanager", "nvidia-fabric-manager": "nv-fabricmanager", "nvidia-imex": "nvidia-imex"}
            for prefix, program in binary.items():
                if name.startswith(prefix):
                    self.put(f"/usr/bin/{program}")
                    (self.root / "usr/bin" / program).chmod(0o755)

    def load_driver(self, version: str) -> None:
        self.put("/sys/module/nvidia/version", version + "\n")


def make_node(base: Path, *, os_id: str = "ubuntu", os_version: str = "22.04") -> FakeNode:
    """A plain image of the OS (nothing of the GPU stack), with the real manifest."""
    node = FakeNode(base)
    bin_dir = base / "bin"
    for d in (bin_dir, node.root / "etc", node.state, node.downloads):
        d.mkdir(parents=True, exist_ok=True)
    for name, body in FAKES.items():
        path = bin_dir / name
        path.write_text(_PRELUDE + body)
        path.chmod(0o755)
    (node.root / "etc" / "os-release").write_text(f'NAME="test"\nID={os_id}\nVERSION_ID="{os_version}"\n')
    (base / "versions.env").write_text((NODE / "versions.env").read_text())
    for name, versions in REPOSITORY.items():
        node.offer(name, *versions)

    # Downloads: the NVIDIA repository keys and the EFA installer with its key and signature. A
    # fake key file holds its fingerprint; a fake signature says GOOD or BAD and by which key.
    apt_fpr, rpm_fpr = MANIFEST["NVIDIA_APT_KEY_FINGERPRINT"], MANIFEST["NVIDIA_RPM_KEY_FINGERPRINT"]
    (node.downloads / f"{apt_fpr[-8:].lower()}.pub").write_text(apt_fpr + "\n")
    (node.downloads / f"{rpm_fpr[-8:]}.pub").write_text(rpm_fpr + "\n")
    write_efa_installer(node, MANIFEST["EFA_INSTALLER_VERSION"], MANIFEST["AWS_OFI_NCCL_VERSION"])
    (node.downloads / "aws-efa-installer.key").write_text(MANIFEST["EFA_INSTALLER_KEY_FINGERPRINT"] + "\n")

    node.env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(base),
        "FMINFRA_ROOT": str(node.root),
        "FMINFRA_VERSIONS": str(base / "versions.env"),
        "FMINFRA_RETRY_DELAY_S": "0",
        "FMINFRA_KERNEL_RELEASE": KERNEL,
        "FAKE_LOG": str(node.log),
        "FAKE_STATE": str(node.state),
        "FAKE_DOWNLOADS": str(node.downloads),
        "FAKE_OS_FAMILY": "rpm" if os_id == "amzn" else "deb",
    }
    return node


def write_efa_installer(node: FakeNode, efa_version: str, ofi_version: str) -> None:
    installer_dir = node.base / f"efa-src-{efa_version}" / "aws-efa-installer"
    installer_dir.mkdir(parents=True, exist_ok=True)
    installer = installer_dir / "efa_installer.sh"
    installer.write_text(EFA_INSTALLER.replace("@EFA@", efa_version).replace("@OFI@", ofi_version))
    installer.chmod(0o755)
    tarball = node.downloads / f"aws-efa-installer-{efa_version}.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(installer_dir, arcname="aws-efa-installer")
    sign(node, good=True, version=efa_version)


def sign(node: FakeNode, *, good: bool, fingerprint: str | None = None, version: str | None = None) -> None:
    fpr = fingerprint or MANIFEST["EFA_INSTALLER_KEY_FINGERPRINT"]
    sig = node.downloads / f"aws-efa-installer-{version or MANIFEST['EFA_INSTALLER_VERSION']}.tar.gz.sig"
    sig.write_text(f"{'GOOD' if good else 'BAD'} {fpr}\n")


# --- named images -------------------------------------------------------------------------------


def _cuda(node: FakeNode, *versions: str, default: str) -> None:
    for version in versions:
        node.put(f"/usr/local/cuda-{version}/bin/nvcc", "")
        (node.root / f"usr/local/cuda-{version}/bin/nvcc").chmod(0o755)
        node.put(f"/usr/local/cuda-{version}/lib64/libcudart.so", "")
    (node.root / "usr/local/cuda").symlink_to(f"cuda-{default}")


def _efa(node: FakeNode, *, efa: str, ofi: str, plugin_dir: str, lib: str, tuner: bool = True) -> None:
    node.put("/opt/amazon/efa_installed_packages", f"# EFA installer version: {efa}\n")
    node.put(f"/opt/amazon/efa/{lib}/libfabric.so.1")
    node.put(f"/opt/amazon/openmpi/{lib}/libmpi.so.40")
    node.put(f"{plugin_dir}/libnccl-net-ofi.so")
    if tuner:
        node.put(f"{plugin_dir}/libnccl-ofi-tuner.so")
    node.install_packages(libnccl_ofi=f"{ofi}-1")


def _nvidia_apt_entry(node: FakeNode, distro: str, arch: str) -> None:
    """NVIDIA's cuda-keyring package: its own list file and keyring (not fminfra's)."""
    url = f"https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}"
    node.put(
        f"/etc/apt/sources.list.d/cuda-{distro}-{arch}.list", f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {url}/ /\n"
    )
    node.put("/usr/share/keyrings/cuda-archive-keyring.gpg", MANIFEST["NVIDIA_APT_KEY_FINGERPRINT"] + "\n")


def dlami_base_oss_ubuntu_2204(node: FakeNode) -> None:
    """Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04), x86_64, release of 2026-10.

    Versions from the release notes of the same AMI for ARM64 of 2026-10-06
    (https://docs.aws.amazon.com/dlami/latest/devguide/aws-deep-learning-ami-gpubaseossarm64-ul2204-2026-10-08.html):
    driver 595.91.07, CUDA 12.8/12.9/13.0/13.2 under /usr/local (default 13.2), gdr_copy 2.5.2,
    EFA installer 1.50.0, ofi_nccl 1.21.1. docs/facts/node-software.md#dlami-base-oss-contents.
    Assumed, not in the notes: the x86_64 AMI carries the same versions; Fabric Manager
    nvidia-fabricmanager-595 at the driver's version; GDRCopy as packages with the DKMS module and
    the unversioned libgdrapi.so; NVIDIA's apt repository through cuda-keyring; no NCCL package.
    """
    node.load_driver("595.91.07")
    node.install_packages(**{"nvidia-driver-595-open": "595.91.07-1", "nvidia-fabricmanager-595": "595.91.07-1"})
    _cuda(node, "12.8", "12.9", "13.0", "13.2", default="13.2")
    _efa(node, efa="1.50.0", ofi="1.21.1", plugin_dir="/opt/amazon/ofi-nccl/lib", lib="lib")
    node.install_packages(gdrcopy="2.5.2-1", libgdrapi="2.5.2-1", gdrdrv_dkms="2.5.2-1")
    node.put("/usr/lib/x86_64-linux-gnu/libgdrapi.so")
    node.put(f"/lib/modules/{KERNEL}/updates/dkms/gdrdrv.ko")
    _nvidia_apt_entry(node, "ubuntu2204", "x86_64")


def dlami_base_oss_ubuntu_2404_arm64(node: FakeNode) -> None:
    """Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04), release 20261009.

    From its release notes
    (https://docs.aws.amazon.com/dlami/latest/devguide/aws-deep-learning-ami-gpubaseossarm64-ul2404-2026-10-09.html):
    supported on G5g, P6e-GB200, P6e-GB300; driver 595.91.07; CUDA 12.8/12.9/13.0/13.2 (default
    13.2); EFA installer 1.50.0; ofi_nccl 1.21.1; no gdr_copy row. docs/facts/node-software.md#dlami-base-oss-contents.
    Assumed: no nvidia-imex package, NVIDIA's apt repository through cuda-keyring, no NCCL package.
    """
    node.load_driver("595.91.07")
    node.install_packages(**{"nvidia-driver-595-open": "595.91.07-1"})
    _cuda(node, "12.8", "12.9", "13.0", "13.2", default="13.2")
    _efa(node, efa="1.50.0", ofi="1.21.1", plugin_dir="/opt/amazon/ofi-nccl/lib", lib="lib")
    _nvidia_apt_entry(node, "ubuntu2404", "sbsa")


def _nccl_in_cuda(node: FakeNode, compiled: dict[str, str]) -> None:
    """NCCL compiled into CUDA folders: /usr/local/cuda-X.Y/lib/libnccl.so.<version> with the
    libnccl.so.2 link, the library holding "NCCL version <version>+cudaX.Y" (NCCL's own version string)."""
    for cuda, version in compiled.items():
        node.put(f"/usr/local/cuda-{cuda}/lib/libnccl.so.{version}", f"\0NCCL version {version}+cuda{cuda}\0")
        (node.root / f"usr/local/cuda-{cuda}/lib/libnccl.so.2").symlink_to(f"libnccl.so.{version}")


def nccl_package(node: FakeNode, package: str, version: str, lib_dir: str) -> None:
    """NVIDIA's NCCL package: the package record and the library it installs in the loader's directory."""
    upstream, cuda = version.split("-")[0], version.rsplit("+cuda", 1)[1]
    node.install_packages(**{package: version})
    link = node.root / lib_dir.lstrip("/") / "libnccl.so.2"
    if link.is_symlink():  # an upgrade: the package's files replace the old ones
        (link.parent / link.readlink()).unlink()
        link.unlink()
    node.put(f"{lib_dir}/libnccl.so.{upstream}", f"\0NCCL version {upstream}+cuda{cuda}\0")
    link.symlink_to(f"libnccl.so.{upstream}")


def hyperpod_slurm_x86_64_20260125(node: FakeNode, *, nccl: str, ofi: str) -> None:
    """SageMaker HyperPod AMI for Slurm, x86_64, release of January 25, 2026.

    docs/facts/hyperpod.md#hyperpod-slurm-ami-contents; each line of the published entry and what
    the fake makes of it is listed in docs/node-bootstrap.md ("Modelled images"). Named: driver
    580.126.09, CUDA 12.6, 12.8, 12.9, 13.0, "EFA Installer version: 2.3.1amzn2.0" (libfabric's
    version, most likely; the installer's own version is not published, so the installer's record
    exists with no version line, which check_efa reads as an unknown version, as it would read any
    other version than the pin), kernel 6.8,
    built on the Deep Learning Base GPU AMI (Ubuntu 22.04). No x86_64 entry names NCCL, and the base
    DLAMI's notes list none (docs/facts/hyperpod.md#hyperpod-nccl-from-container), so NCCL runs in
    the forms the sources leave open (`nccl`): "none", no host NCCL at all (what the entries list),
    or "cuda", compiled into the CUDA folders in the layout and at the version the ARM64 entry of
    2025-08-12 names (2.27.5 for CUDA 12.8); no NCCL package (no source names one). The
    aws-ofi-nccl folder (`ofi`: "lib" since 1.17, "lib/x86_64-linux-gnu" as the 2025-08-12 entry
    gives for ARM64) with no version recorded. Fabric Manager: the base DLAMI ships it
    (docs/facts/node-software.md#nvidia-fabric-manager-packages) at the driver's version, under the
    branch-580 name, with its binary /usr/bin/nv-fabricmanager. No GDRCopy (not named in this entry)."""
    node.load_driver("580.126.09")
    node.install_packages(**{"nvidia-fabricmanager-580": "580.126.09-1"})
    _cuda(node, "12.6", "12.8", "12.9", "13.0", default="13.0")
    if nccl == "cuda":
        _nccl_in_cuda(node, {"12.8": "2.27.5"})
    plugin = "/opt/amazon/ofi-nccl/lib" if ofi == "lib" else "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"
    node.put("/opt/amazon/efa_installed_packages", "")
    node.put("/opt/amazon/efa/lib/libfabric.so.1")
    node.put("/opt/amazon/openmpi/lib/libmpi.so.40")
    node.put(f"{plugin}/libnccl-net-ofi.so")


def hyperpod_slurm_arm64_20250812(node: FakeNode, *, gdrcopy: str) -> None:
    """SageMaker HyperPod AMI for Slurm, ARM64 (Ubuntu 22.04), release of August 12, 2025.

    docs/facts/hyperpod.md#hyperpod-slurm-ami-contents, line by line in docs/node-bootstrap.md.
    Named: driver 570.158.01, Nvidia-IMEX v570.172.08-1, CUDA 12.4, 12.5, 12.6, 12.8 (default 12.8),
    "CUDA, NCCL and cuDDN installation directories: /usr/local/cuda-xx.x/" with compiled NCCL
    2.22.3 (12.4, 12.5), 2.24.3 (12.6), 2.27.5 (12.8); EFA installer 1.42.0 with aws-ofi-nccl in
    /opt/amazon/ofi-nccl/lib/aarch64-linux-gnu; GDRCopy 2.5.1, in a form the entry leaves open
    (`gdrcopy`: "dkms", NVIDIA's packages with the DKMS module, or "source", a build under
    /opt/gdrcopy that nothing puts on the loader path)."""
    node.load_driver("570.158.01")
    node.install_packages(**{"nvidia-imex-570": "570.172.08-1"})
    _cuda(node, "12.4", "12.5", "12.6", "12.8", default="12.8")
    _nccl_in_cuda(node, {"12.4": "2.22.3", "12.5": "2.22.3", "12.6": "2.24.3", "12.8": "2.27.5"})
    node.put("/opt/amazon/efa_installed_packages", "# EFA installer version: 1.42.0\n")
    node.put("/opt/amazon/efa/lib/libfabric.so.1")
    node.put("/opt/amazon/openmpi/lib/libmpi.so.40")
    node.put("/opt/amazon/ofi-nccl/lib/aarch64-linux-gnu/libnccl-net-ofi.so")
    if gdrcopy == "dkms":
        node.install_packages(gdrcopy="2.5.1-1", libgdrapi="2.5.1-1", gdrdrv_dkms="2.5.1-1")
        node.put("/usr/lib/aarch64-linux-gnu/libgdrapi.so")
        node.put(f"/lib/modules/{KERNEL}/updates/dkms/gdrdrv.ko")
    else:
        node.put("/opt/gdrcopy/lib/libgdrapi.so")
        node.put(f"/lib/modules/{KERNEL}/extra/gdrdrv.ko")


def hyperpod_eks_al2023_x86_64_20251022(node: FakeNode, *, nccl: str) -> None:
    """SageMaker HyperPod AMI for Amazon EKS, AL2023 x86_64, release of October 22, 2025.

    docs/facts/hyperpod.md#hyperpod-eks-ami-contents, line by line in docs/node-bootstrap.md.
    Named: driver 580.95.05, CUDA 12.6, 12.8, 12.9, 13.0 (default 12.9), efa_version 1.43.3,
    ofi_nccl_version 1.16.3, gdr_copy 2.5.1 with packages gdrcopy 2.5.1-1, gdrcopy-devel 2.5.1-1,
    gdrcopy-kmod 2.5.1-1dkms. No NCCL line, so NCCL in the forms the sources leave open (`nccl`):
    "none", no host NCCL (docs/facts/hyperpod.md#hyperpod-nccl-from-container), or "cuda", 2.27.5
    in the CUDA 12.8 folder as the ARM64 EKS entry of 2025-08-12 describes; no NCCL package.
    Fabric Manager: the base DLAMI's (docs/facts/node-software.md#nvidia-fabric-manager-packages),
    under Amazon Linux's name for branch 580 and later, nvidia-fabricmanager
    (docs/facts/node-software.md#nvidia-fabric-manager-rpm-name), at the driver's version, with its
    binary. The aws-ofi-nccl plugin in the rpm's lib64 (docs/facts/node-software.md#ofi-nccl-library-layout)."""
    node.load_driver("580.95.05")
    node.install_packages(**{"nvidia-fabricmanager": "580.95.05-1"})
    _cuda(node, "12.6", "12.8", "12.9", "13.0", default="12.9")
    if nccl == "cuda":
        _nccl_in_cuda(node, {"12.8": "2.27.5"})
    _efa(node, efa="1.43.3", ofi="1.16.3", plugin_dir="/opt/amazon/ofi-nccl/lib64", lib="lib64", tuner=False)
    node.install_packages(gdrcopy="2.5.1-1", gdrcopy_devel="2.5.1-1", gdrcopy_kmod="2.5.1-1dkms")
    node.put("/usr/lib64/libgdrapi.so")
    node.put(f"/lib/modules/{KERNEL}/extra/gdrdrv.ko")


def plain(node: FakeNode) -> None:
    """Canonical's Ubuntu server image or Amazon Linux 2023: none of the GPU stack."""


# name: (os-release ID, VERSION_ID, image function, a catalog type the image serves)
IMAGES = {
    "dlami-base-oss-ubuntu-22.04": ("ubuntu", "22.04", dlami_base_oss_ubuntu_2204, "p5.48xlarge"),
    "dlami-base-oss-ubuntu-24.04-arm64": ("ubuntu", "24.04", dlami_base_oss_ubuntu_2404_arm64, "p6e-gb200.36xlarge"),
    "hyperpod-slurm-x86_64-2026-01-25/nccl-none/ofi-lib": (
        "ubuntu",
        "22.04",
        partial(hyperpod_slurm_x86_64_20260125, nccl="none", ofi="lib"),
        "ml.p5.48xlarge",
    ),
    "hyperpod-slurm-x86_64-2026-01-25/nccl-none/ofi-lib-arch": (
        "ubuntu",
        "22.04",
        partial(hyperpod_slurm_x86_64_20260125, nccl="none", ofi="lib-arch"),
        "ml.p5.48xlarge",
    ),
    "hyperpod-slurm-x86_64-2026-01-25/nccl-cuda/ofi-lib": (
        "ubuntu",
        "22.04",
        partial(hyperpod_slurm_x86_64_20260125, nccl="cuda", ofi="lib"),
        "ml.p5.48xlarge",
    ),
    "hyperpod-slurm-arm64-2025-08-12/gdrcopy-dkms": (
        "ubuntu",
        "22.04",
        partial(hyperpod_slurm_arm64_20250812, gdrcopy="dkms"),
        "ml.p6e-gb200.36xlarge",
    ),
    "hyperpod-slurm-arm64-2025-08-12/gdrcopy-source": (
        "ubuntu",
        "22.04",
        partial(hyperpod_slurm_arm64_20250812, gdrcopy="source"),
        "ml.p6e-gb200.36xlarge",
    ),
    "hyperpod-eks-al2023-x86_64-2025-10-22/nccl-cuda": (
        "amzn",
        "2023",
        partial(hyperpod_eks_al2023_x86_64_20251022, nccl="cuda"),
        "ml.p5en.48xlarge",
    ),
    "hyperpod-eks-al2023-x86_64-2025-10-22/nccl-none": (
        "amzn",
        "2023",
        partial(hyperpod_eks_al2023_x86_64_20251022, nccl="none"),
        "ml.p5en.48xlarge",
    ),
    "ubuntu-22.04": ("ubuntu", "22.04", plain, "p5.48xlarge"),
    "ubuntu-24.04": ("ubuntu", "24.04", plain, "p6-b200.48xlarge"),
    "al2023-x86_64": ("amzn", "2023", plain, "p5en.48xlarge"),
    "al2023-arm64": ("amzn", "2023", plain, "p6e-gb200.36xlarge"),
}


# What `bootstrap.sh --verify` on the untouched image must answer: None for a pass (WARN lines
# allowed), else the FAIL lines it must print (the components the image's published contents lack).
VERIFY_UNTOUCHED: dict[str, tuple[str, ...] | None] = {
    **{name: None for name in IMAGES if name.startswith("hyperpod-")},
    "dlami-base-oss-ubuntu-22.04": ("FAIL nccl: no NCCL",),
    "dlami-base-oss-ubuntu-24.04-arm64": ("FAIL nvidia-imex: no nvidia-imex", "FAIL nccl: no NCCL"),
    **{
        name: ("FAIL nvidia-driver: no NVIDIA driver responds", "FAIL cuda-toolkit: no CUDA toolkit", "FAIL efa:", "FAIL nccl: no NCCL")
        for name in ("ubuntu-22.04", "ubuntu-24.04", "al2023-x86_64", "al2023-arm64")
    },
}


def make_image(base: Path, image: str) -> tuple[FakeNode, str]:
    os_id, os_version, build, instance_type = IMAGES[image]
    node = make_node(base, os_id=os_id, os_version=os_version)
    node.env["FAKE_ARCH"] = "aarch64" if "gb200" in instance_type else "x86_64"
    build(node)
    return node, instance_type


# The GPU types of instance_types.tsv (the ones bootstrap.sh knows).
GPU_TYPES = frozenset(
    line.split()[0] for line in (NODE / "instance_types.tsv").read_text().splitlines() if line.strip() and not line.startswith("#")
)


def dress(root: Path, image: str) -> dict[str, str]:
    """Put a modelled image (IMAGES) on another fake's node root, as the HyperPod simulation's GPU
    nodes boot it: its files under `root`, /etc/os-release, and its read-only commands in a folder of
    their own. Returns the environment those commands need, with that folder as FAKE_IMAGE_BIN."""
    os_id, os_version, build, instance_type = IMAGES[image]
    node = FakeNode(root.parent / f"{root.name}.image", root_dir=root)
    bin_dir = node.base / "bin"
    for d in (bin_dir, node.state, root / "etc"):
        d.mkdir(parents=True, exist_ok=True)
    for name in ("dpkg-query", "rpm", "nvidia-smi", "ldconfig"):
        (bin_dir / name).write_text(_PRELUDE + FAKES[name])
        (bin_dir / name).chmod(0o755)
    (root / "etc" / "os-release").write_text(f'NAME="test"\nID={os_id}\nVERSION_ID="{os_version}"\n')
    build(node)
    return {
        "FAKE_IMAGE_BIN": str(bin_dir),
        "FAKE_STATE": str(node.state),
        "FAKE_LOG": str(node.log),
        "FAKE_ARCH": "aarch64" if "gb200" in instance_type else "x86_64",
        "FMINFRA_KERNEL_RELEASE": KERNEL,
    }
