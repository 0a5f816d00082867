#!/usr/bin/env bash
# enroot and pyxis on a Slurm node: the AMI's where they meet the manifest, else built at the pins.
#   bash setup_containers.sh VERSIONS_FILE
# enroot: an enroot the AMI ships (the current HyperPod DLAMI does:
#   docs/facts/node-software.md#pyxis-loaded-twice) is adopted when `enroot version` is at least
#   ENROOT_MIN_VERSION, the oldest that pulls the acceptance image by digest
#   (docs/facts/node-software.md#pin-enroot-commit); otherwise enroot ENROOT_VERSION is built from
#   source at tag v$ENROOT_VERSION, checked to be commit ENROOT_COMMIT, its submodules at the commits
#   that tag's tree records, as NVIDIA's "From source" installation does (`make install`, `make
#   setcap`; docs/facts/node-software.md#enroot-build-from-source). Why a source build and not the
#   release .debs: docs/node-bootstrap.md ("enroot").
# enroot's folders: a drop-in enroot.conf.d/fminfra-paths.conf puts the runtime, data, cache and
#   temporary folders on the instance's NVMe (/opt/dlami/nvme, else /opt/sagemaker), world-writable
#   with the sticky bit, as AWS's reference does (docs/facts/hyperpod.md#hyperpod-reference-enroot-config);
#   enroot's defaults (${XDG_RUNTIME_DIR}/enroot) fail for users without /run/user/<uid>
#   (docs/facts/node-software.md#enroot-runtime-paths). A key the image's enroot.conf sets itself is
#   kept: enroot takes the first value it reads, the main file before its drop-ins.
# pyxis: when plugstack.conf, or a file it includes, already loads a spank_pyxis.so (the HyperPod
#   DLAMI's), nothing is built and no include is added: a second one makes every srun print "option
#   ... provided by both" (docs/facts/node-software.md#pyxis-loaded-twice). Otherwise tag
#   v$PYXIS_VERSION, checked to be commit PYXIS_COMMIT (docs/facts/node-software.md#pin-pyxis-commit),
#   built against Slurm's headers in /opt/slurm/include (CPPFLAGS from the environment: the Makefile
#   appends it to its own flags), and enabled by an explicit `include` of its plugstack file in
#   /opt/slurm/etc/plugstack.conf (configless Slurm does not expand globs there), as AWS's reference
#   lifecycle scripts do (docs/facts/hyperpod.md#hyperpod-reference-pyxis-build).
# FMINFRA_ROOT prefixes every system path (tests run it in a folder). Idempotent.
set -o errexit -o nounset -o pipefail

ROOT=${FMINFRA_ROOT:-}
SLURM_DIR=/opt/slurm
WORK_DIR=${WORK_DIR:-$ROOT/tmp/fminfra-containers}
RETRIES=${RETRIES:-5}
NVME_WAIT_S=${NVME_WAIT_S:-120}
POLL_INTERVAL=${POLL_INTERVAL:-5}

# bash's own clock in UTC, no `date` process per line (docs/facts/node-software.md#bash-printf-time-format)
log() { TZ=UTC0 printf '%(%Y-%m-%dT%H:%M:%SZ)T setup_containers: %s\n' -1 "$*" >&2; }
die() {
    log "$*"
    exit 1
}

(($# == 1)) || {
    log "usage: setup_containers.sh VERSIONS_FILE"
    exit 2
}
VERSIONS_FILE=$1

# pin KEY WHY: the manifest's value; missing or empty stops with the key named.
pin() {
    local value
    value=$(grep -E "^$1=" "$VERSIONS_FILE" | cut -d= -f2- || true)
    [[ -n $value ]] || die "$VERSIONS_FILE: $1 is empty or missing; $2"
    echo "$value"
}

retry() {
    local attempt=1
    until "$@"; do
        ((attempt >= RETRIES)) && return 1
        sleep $((attempt * 2))
        attempt=$((attempt + 1))
    done
}

# version_at_least A B: A >= B (sort -V).
version_at_least() {
    [[ $(printf '%s\n' "$1" "$2" | sort -V | head -n 1) == "$2" ]]
}

# The enroot a user's job runs: the one on PATH, else the one fminfra built (/usr/local/bin).
enroot_bin() {
    if command -v enroot >/dev/null 2>&1; then
        command -v enroot
    elif [[ -x $ROOT/usr/local/bin/enroot ]]; then
        echo "$ROOT/usr/local/bin/enroot"
    else
        return 1
    fi
}

enroot_version() {
    local bin
    bin=$(enroot_bin) || return 1
    "$bin" version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n 1
}

build_enroot() {
    local version=$1 commit=$2 src head
    src=$WORK_DIR/enroot
    rm -rf "$src"
    mkdir -p "$WORK_DIR"
    # Build and runtime dependencies from NVIDIA's installation guide (Debian), from package lists
    # refreshed first: an AMI's lists can be older than the archive's packages (apt then fetches
    # files that are gone).
    retry apt-get -o DPkg::Lock::Timeout=120 -q update || die "apt-get update failed; cannot install enroot's build dependencies"
    retry apt-get -o DPkg::Lock::Timeout=120 install -y git gcc make libcap2-bin libtool automake libmd-dev \
        curl gawk jq squashfs-tools parallel fuse-overlayfs pigz squashfuse ||
        die "could not install enroot's build and runtime dependencies"
    # The submodules come at the commits the tag's tree records; musl's is fetched over git://.
    retry git clone --quiet --branch "v$version" --recurse-submodules https://github.com/NVIDIA/enroot.git "$src" ||
        die "could not clone enroot v$version with its submodules (github.com, and git://git.musl-libc.org for deps/musl)"
    head=$(git -C "$src" rev-parse HEAD)
    [[ $head == "$commit" ]] || die "enroot v$version is commit $head, not ENROOT_COMMIT=$commit"
    make -C "$src" install DESTDIR="$ROOT"
    make -C "$src" setcap DESTDIR="$ROOT"
    log "enroot $version built at $commit"
}

install_enroot() {
    local version commit minimum found
    version=$(pin ENROOT_VERSION "the enroot release to build")
    commit=$(pin ENROOT_COMMIT "the commit of enroot tag v$version")
    minimum=$(pin ENROOT_MIN_VERSION "the oldest enroot the acceptance jobs can use")
    version_at_least "$version" "$minimum" || die "$VERSIONS_FILE: ENROOT_VERSION=$version is older than ENROOT_MIN_VERSION=$minimum"
    found=$(enroot_version || true)
    if [[ -n $found ]] && version_at_least "$found" "$minimum"; then
        log "enroot $found present ($(enroot_bin)); it meets ENROOT_MIN_VERSION=$minimum: adopted"
        return 0
    fi
    [[ -z $found ]] || log "enroot $found present ($(enroot_bin)) is older than ENROOT_MIN_VERSION=$minimum; building $version"
    build_enroot "$version" "$commit"
    found=$(enroot_version || true)
    [[ $found == "$version" ]] ||
        die "after building enroot $version, the enroot jobs run ($(enroot_bin || echo none)) reports '${found:-nothing}'"
}

# The configuration file of the enroot in use (`enroot info`, else the packages' /etc/enroot).
enroot_conf() {
    local bin file
    bin=$(enroot_bin)
    file=$("$bin" info 2>/dev/null | sed -n 's/^Config file: //p' | head -n 1 || true)
    echo "${file:-/etc/enroot/enroot.conf}"
}

# The instance's NVMe, as AWS's reference finds it; waits NVME_WAIT_S for the DLAMI to mount it.
local_storage() {
    local waited=0 dir
    while true; do
        for dir in /opt/dlami/nvme /opt/sagemaker; do
            if mountpoint -q "$ROOT$dir"; then
                echo "$dir"
                return 0
            fi
        done
        ((waited >= NVME_WAIT_S)) && break
        sleep "$POLL_INTERVAL"
        waited=$((waited + POLL_INTERVAL))
    done
    return 1
}

configure_enroot() {
    local conf base dropin key value content="" folder
    conf=$(enroot_conf)
    conf=${conf#"$ROOT"}
    if ! base=$(local_storage); then
        base=/tmp
        log "WARN: neither /opt/dlami/nvme nor /opt/sagemaker is mounted after ${NVME_WAIT_S}s; enroot's folders go under /tmp on the root volume"
    fi
    dropin=$ROOT$conf.d/fminfra-paths.conf
    # shellcheck disable=SC2016 # $(id -u) is expanded by enroot for each user, not here
    # ENROOT_ROOTFS_WRITABLE yes as AWS's reference enroot.conf sets it (docs/facts/hyperpod.md#hyperpod-reference-enroot-config):
    # enroot's own default is false (docs/facts/node-software.md#enroot-rootfs-writable-default), which an
    # enroot fminfra builds would keep, and pyxis follows it when a job asks for neither.
    for key in ENROOT_RUNTIME_PATH ENROOT_DATA_PATH ENROOT_CACHE_PATH ENROOT_TEMP_PATH ENROOT_ROOTFS_WRITABLE; do
        if [[ -f $ROOT$conf ]] && grep -qE "^[[:space:]]*${key}[[:space:]=]" "$ROOT$conf"; then
            log "enroot: $key is set in the image's $conf; kept"
            continue
        fi
        case $key in
        ENROOT_RUNTIME_PATH) value="$base/tmp/enroot/user-\$(id -u)" ;;
        ENROOT_DATA_PATH) value="$base/tmp/enroot/data/user-\$(id -u)" ;;
        ENROOT_CACHE_PATH) value="$base/enroot" ;;
        ENROOT_TEMP_PATH) value="$base/tmp" ;;
        ENROOT_ROOTFS_WRITABLE) value=yes ;;
        esac
        content+="$key $value"$'\n'
    done
    for folder in "$base/tmp" "$base/tmp/enroot" "$base/tmp/enroot/data" "$base/enroot"; do
        mkdir -p "$ROOT$folder"
        chmod 1777 "$ROOT$folder"
    done
    mkdir -p "$(dirname "$dropin")"
    printf '# Written by fminfra setup_containers.sh; do not edit.\n%s' "$content" >"$dropin"
    log "enroot: folders on $base ($dropin)"
}

# Whether plugstack.conf, or a file it includes (globs expanded), loads spank_pyxis.so; fminfra's
# own include line is not counted. Prints the file and line that load it. A last line without its
# newline is read too (HyperPod's plugstack.conf may lack one: docs/facts/hyperpod.md#hyperpod-plugstack-no-final-newline).
pyxis_loaded() {
    local file=$1 depth=${2:-0} kind rest line included
    [[ -f $ROOT$file ]] && ((depth < 4)) || return 1
    while read -r kind rest || [[ -n $kind ]]; do
        case $kind in
        required | optional)
            line=${rest%% *}
            if [[ ${line##*/} == spank_pyxis.so ]]; then
                echo "$file: $kind $rest"
                return 0
            fi
            ;;
        include)
            rest=${rest//\"/}
            [[ $rest == "$SLURM_DIR/etc/plugstack.conf.d/pyxis.conf" && $depth == 0 ]] && continue
            # shellcheck disable=SC2086 # the include is a glob, expanded as Slurm expands it
            for included in $ROOT$rest; do
                [[ -f $included ]] && pyxis_loaded "${included#"$ROOT"}" $((depth + 1)) && return 0
            done
            ;;
        esac
    done <"$ROOT$file"
    return 1
}

install_pyxis() {
    local plugin=$ROOT/usr/local/lib/slurm/spank_pyxis.so loaded
    local conf_dir=$SLURM_DIR/etc/plugstack.conf.d plugstack=$ROOT$SLURM_DIR/etc/plugstack.conf
    if loaded=$(pyxis_loaded "$SLURM_DIR/etc/plugstack.conf"); then
        log "pyxis already loaded by the image ($loaded); not building or including another"
        if grep -qxF "include $conf_dir/pyxis.conf" "$plugstack"; then
            grep -vxF "include $conf_dir/pyxis.conf" "$plugstack" >"$plugstack.fminfra-tmp" || true
            mv "$plugstack.fminfra-tmp" "$plugstack"
            log "removed fminfra's earlier include of $conf_dir/pyxis.conf"
        fi
        return 0
    fi
    if [[ ! -f $plugin ]]; then
        local version commit src head
        version=$(pin PYXIS_VERSION "the pyxis release to build")
        commit=$(pin PYXIS_COMMIT "the commit of pyxis tag v$version")
        src=$WORK_DIR/pyxis
        rm -rf "$src"
        mkdir -p "$WORK_DIR"
        retry git clone --quiet --depth 1 --branch "v$version" https://github.com/NVIDIA/pyxis.git "$src" ||
            die "could not clone pyxis v$version"
        head=$(git -C "$src" rev-parse HEAD)
        [[ $head == "$commit" ]] || die "pyxis v$version is commit $head, not PYXIS_COMMIT=$commit"
        CPPFLAGS="-I $ROOT$SLURM_DIR/include" make -C "$src"
        CPPFLAGS="-I $ROOT$SLURM_DIR/include" make -C "$src" install DESTDIR="$ROOT"
        log "pyxis $version built at $commit"
    else
        log "pyxis present: $plugin"
    fi
    mkdir -p "$ROOT$conf_dir"
    [[ -f $ROOT/usr/local/share/pyxis/pyxis.conf ]] || die "$ROOT/usr/local/share/pyxis/pyxis.conf missing after the pyxis install"
    cp "$ROOT/usr/local/share/pyxis/pyxis.conf" "$ROOT$conf_dir/pyxis.conf"
    touch "$plugstack"
    if ! grep -qxF "include $conf_dir/pyxis.conf" "$plugstack"; then
        # the include on a line of its own, also after a last line without its newline
        [[ ! -s $plugstack || -z $(tail -c 1 "$plugstack") ]] || echo >>"$plugstack"
        echo "include $conf_dir/pyxis.conf" >>"$plugstack"
        log "pyxis enabled in $SLURM_DIR/etc/plugstack.conf"
    fi
}

install_enroot
configure_enroot
install_pyxis
