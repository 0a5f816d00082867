#!/usr/bin/env bash
# enroot and pyxis on a Slurm node, at the manifest's pins, only where the AMI lacks them.
#   bash setup_containers.sh VERSIONS_FILE
# enroot: the release's .deb packages, checked against ENROOT_DEB_SHA256_<ARCH> and
#   ENROOT_CAPS_DEB_SHA256_<ARCH> (docs/facts/node-software.md#pin-enroot-deb-sha256); an empty
#   checksum stops here rather than install an unverified package.
# pyxis: tag v$PYXIS_VERSION, checked to be commit PYXIS_COMMIT
#   (docs/facts/node-software.md#pin-pyxis-commit), built against Slurm's headers in /opt/slurm/include
#   (CPPFLAGS from the environment: the Makefile appends it to its own flags), and enabled by an
#   explicit `include` of its plugstack file in /opt/slurm/etc/plugstack.conf (configless Slurm does
#   not expand globs there), as AWS's reference lifecycle scripts do
#   (docs/facts/hyperpod.md#hyperpod-reference-pyxis-build).
# FMINFRA_ROOT prefixes every system path (tests run it in a folder). Idempotent.
set -o errexit -o nounset -o pipefail

ROOT=${FMINFRA_ROOT:-}
SLURM_DIR=/opt/slurm
WORK_DIR=${WORK_DIR:-$ROOT/tmp/fminfra-containers}
RETRIES=${RETRIES:-5}

log() { echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) setup_containers: $*" >&2; }
die() {
    log "$*"
    exit 1
}

(($# == 1)) || {
    log "usage: setup_containers.sh VERSIONS_FILE"
    exit 2
}
VERSIONS_FILE=$1

# pin KEY: the manifest's value; missing or empty stops with the key named.
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

install_enroot() {
    if command -v enroot >/dev/null 2>&1; then
        log "enroot present: $(command -v enroot)"
        return 0
    fi
    local version arch key deb base url
    version=$(pin ENROOT_VERSION "the enroot release to install")
    arch=$(dpkg --print-architecture)
    mkdir -p "$WORK_DIR"
    local -a debs=()
    for base in enroot enroot+caps; do
        key=ENROOT_DEB_SHA256_${arch^^}
        [[ $base == enroot+caps ]] && key=ENROOT_CAPS_DEB_SHA256_${arch^^}
        deb=$WORK_DIR/${base}_${version}-1_${arch}.deb
        url=https://github.com/NVIDIA/enroot/releases/download/v${version}/${base}_${version}-1_${arch}.deb
        local sum
        sum=$(pin "$key" "fill it with the sha256 of $url before installing enroot on an AMI without it")
        retry curl --fail --silent --show-error --location -o "$deb" "$url" || die "could not download $url"
        echo "$sum  $deb" | sha256sum --check --status || die "$deb: sha256 is not $key=$sum"
        debs+=("$deb")
    done
    apt-get -o DPkg::Lock::Timeout=120 install -y "${debs[@]}"
    log "enroot $version installed (sha256 checked)"
}

install_pyxis() {
    local plugin=$ROOT/usr/local/lib/slurm/spank_pyxis.so
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
    local conf_dir=$SLURM_DIR/etc/plugstack.conf.d plugstack=$ROOT$SLURM_DIR/etc/plugstack.conf
    mkdir -p "$ROOT$conf_dir"
    [[ -f $ROOT/usr/local/share/pyxis/pyxis.conf ]] || die "$ROOT/usr/local/share/pyxis/pyxis.conf missing after the pyxis install"
    cp "$ROOT/usr/local/share/pyxis/pyxis.conf" "$ROOT$conf_dir/pyxis.conf"
    touch "$plugstack"
    if ! grep -qxF "include $conf_dir/pyxis.conf" "$plugstack"; then
        echo "include $conf_dir/pyxis.conf" >>"$plugstack"
        log "pyxis enabled in $SLURM_DIR/etc/plugstack.conf"
    fi
}

install_enroot
install_pyxis
