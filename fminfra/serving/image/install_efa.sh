#!/usr/bin/env bash
# The EFA userspace for the serving image, run once at image build time (Dockerfile RUN): libfabric,
# rdma-core and the aws-ofi-nccl plugin the EFA installer bundles, installed in container mode
# (docs/facts/serving-image.md#efa-installer-container-flags). The installer tarball is verified by
# its detached GPG signature against the AWS key pinned by fingerprint, and by sha256 when one is
# pinned, before anything in it runs: the same check the node scripts make
# (docs/facts/node-software.md#pin-efa-installer-key-fingerprint, #pin-efa-installer-sha256).
#
# Inputs are the Dockerfile's build args, which RUN sees as environment variables, with the names and
# values of scripts/node/versions.env: EFA_INSTALLER_VERSION, EFA_INSTALLER_KEY_FINGERPRINT,
# EFA_INSTALLER_SHA256 (may be empty), AWS_OFI_NCCL_VERSION, AWS_OFI_NCCL_SOURCE_COMMIT (must be
# empty: a source build is not implemented here). FMINFRA_ROOT (tests only) prefixes every path the
# script reads or writes on the image; FMINFRA_EFA_BASE_URL replaces the download location.
set -o errexit -o nounset -o pipefail -o errtrace

EFA_BASE_URL=${FMINFRA_EFA_BASE_URL:-https://efa-installer.amazonaws.com}
ROOT=${FMINFRA_ROOT:-}
WORK_DIR=${FMINFRA_WORK_DIR:-$ROOT/tmp/fminfra-efa}
# Where the Debian packages of the installer put libfabric and the plugin; the Dockerfile's ENV
# names the same folders (docs/facts/node-software.md#efa-install-paths, #ofi-nccl-library-layout).
LIBFABRIC_DIR=/opt/amazon/efa/lib
OFI_NCCL_DIR=/opt/amazon/ofi-nccl/lib

log() {
    local line
    TZ=UTC0 printf -v line '%(%Y-%m-%dT%H:%M:%SZ)T' -1
    printf '%s install_efa.sh: %s\n' "$line" "$*" >&2
}

die() {
    log "ERROR: $*"
    exit 1
}

usage_error() {
    log "ERROR: $*"
    exit 2
}

trap 'log "ERROR: line $LINENO: $BASH_COMMAND failed"' ERR

# require_arg NAME PATTERN ALLOWED: the build arg NAME, set and matching PATTERN (an extended glob).
require_arg() {
    local name=$1 pattern=$2 allowed=$3 value=${!1:-}
    [[ -n $value ]] || usage_error "build arg $name is missing: pass --build-arg $name=<$allowed> (its value in scripts/node/versions.env)"
    # shellcheck disable=SC2053 # the pattern is meant to match as a glob
    [[ $value == $pattern ]] || usage_error "build arg $name is '$value', expected $allowed"
}

# optional_arg NAME PATTERN ALLOWED: the build arg NAME, empty or matching PATTERN.
optional_arg() {
    local name=$1 pattern=$2 allowed=$3 value=${!1:-}
    # shellcheck disable=SC2053 # the pattern is meant to match as a glob
    [[ -z $value || $value == $pattern ]] || usage_error "build arg $name is '$value', expected empty or $allowed"
}

read_args() {
    shopt -s extglob
    local hex40='+([0-9A-F])' version='+([0-9]).+([0-9]).+([0-9])'
    require_arg EFA_INSTALLER_VERSION "$version" "a version such as 1.2.3"
    require_arg EFA_INSTALLER_KEY_FINGERPRINT "$hex40" "40 upper-case hex digits, no spaces"
    [[ ${#EFA_INSTALLER_KEY_FINGERPRINT} == 40 ]] ||
        usage_error "build arg EFA_INSTALLER_KEY_FINGERPRINT has ${#EFA_INSTALLER_KEY_FINGERPRINT} digits, expected 40"
    optional_arg EFA_INSTALLER_SHA256 '+([0-9a-f])' "64 lower-case hex digits"
    [[ -z ${EFA_INSTALLER_SHA256:-} || ${#EFA_INSTALLER_SHA256} == 64 ]] ||
        usage_error "build arg EFA_INSTALLER_SHA256 has ${#EFA_INSTALLER_SHA256} digits, expected 64"
    require_arg AWS_OFI_NCCL_VERSION "$version" "a version such as 1.2.3"
    if [[ -n ${AWS_OFI_NCCL_SOURCE_COMMIT:-} ]]; then
        usage_error "build arg AWS_OFI_NCCL_SOURCE_COMMIT is '$AWS_OFI_NCCL_SOURCE_COMMIT': the serving image uses the aws-ofi-nccl the EFA installer bundles and builds none from source; leave it empty"
    fi
}

# The installer is apt-based on Debian and Ubuntu; the vLLM image is Ubuntu
# (docs/facts/serving-image.md#vllm-image-base-os). Another base is refused, not guessed at.
require_apt_image() {
    local id
    id=$(sed -n 's/^ID=//p' "$ROOT/etc/os-release" 2>/dev/null | tr -d '"')
    [[ $id == ubuntu || $id == debian ]] ||
        usage_error "$ROOT/etc/os-release: ID is '${id:-none}'; the serving image installs the EFA installer's Debian packages, so the base image must be Ubuntu or Debian"
    command -v apt-get >/dev/null || die "apt-get not found on an image whose os-release says $id"
}

apt_install_missing() {
    local -a missing=()
    command -v curl >/dev/null || missing+=(curl ca-certificates)
    command -v gpg >/dev/null || missing+=(gnupg)
    # Not `apt-get upgrade` as AWS's container steps show: that would move the base image's own
    # CUDA packages, which this image must keep (docs/facts/serving-image.md#efa-installer-container-flags).
    apt-get -o DPkg::Lock::Timeout=120 update
    if ((${#missing[@]})); then
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y --no-install-recommends "${missing[@]}"
    fi
}

download() {
    local url=$1 dest=$2
    log "download $url"
    curl --fail --silent --show-error --location --retry 5 --retry-delay 2 --connect-timeout 10 --output "$dest" "$url"
}

# A temporary keyring, its agent stopped first.
drop_keyring() {
    gpgconf --homedir "$1" --kill gpg-agent 2>/dev/null || true
    rm -rf "$1"
}

# The key is trusted only because its fingerprint equals the pinned one; then the signature must be
# a VALIDSIG by that key.
verify_signature() {
    local file=$1 sig=$2 key=$3 fingerprint=$4 home got status
    # A keyring of its own in the temporary folder (short: gpg's agent socket lives in it, and a
    # socket path is limited to about 100 characters).
    home=$(mktemp -d "${TMPDIR:-/tmp}/gnupg.XXXXXX")
    chmod 700 "$home"
    # A file gpg cannot read as a key has no fingerprint: refused below with the same message.
    got=$(gpg --homedir "$home" --batch --with-colons --show-keys "$key" 2>/dev/null | awk -F: '$1 == "fpr" { print toupper($10); exit }') || got=""
    if [[ $got != "$fingerprint" ]]; then
        drop_keyring "$home"
        die "verification failed: $(basename "$key") has fingerprint '${got:-none}', but EFA_INSTALLER_KEY_FINGERPRINT pins $fingerprint; nothing was installed"
    fi
    gpg --homedir "$home" --batch --quiet --import "$key" 2>/dev/null || {
        drop_keyring "$home"
        die "verification failed: gpg could not import $(basename "$key"); nothing was installed"
    }
    status=$(gpg --homedir "$home" --batch --status-fd 1 --verify "$sig" "$file" 2>/dev/null) || true
    drop_keyring "$home"
    awk -v fpr="$fingerprint" '$2 == "VALIDSIG" && ($3 == fpr || $NF == fpr) { found = 1 } END { exit !found }' <<<"$status" ||
        die "verification failed: no good signature on $(basename "$file") by $fingerprint; nothing was installed"
    log "good signature on $(basename "$file") by $fingerprint"
}

verify_sha256() {
    local file=$1 expected=$2 got
    [[ -n $expected ]] || return 0
    got=$(sha256sum "$file" | awk '{ print $1 }')
    [[ $got == "$expected" ]] ||
        die "verification failed: sha256 of $(basename "$file") is $got, but EFA_INSTALLER_SHA256 pins $expected; nothing was installed"
    log "sha256 of $(basename "$file") matches EFA_INSTALLER_SHA256"
}

install_efa() {
    local tarball=aws-efa-installer-$EFA_INSTALLER_VERSION.tar.gz
    rm -rf "$WORK_DIR"
    mkdir -p "$WORK_DIR"
    download "$EFA_BASE_URL/$tarball" "$WORK_DIR/$tarball"
    download "$EFA_BASE_URL/$tarball.sig" "$WORK_DIR/$tarball.sig"
    download "$EFA_BASE_URL/aws-efa-installer.key" "$WORK_DIR/aws-efa-installer.key"
    verify_signature "$WORK_DIR/$tarball" "$WORK_DIR/$tarball.sig" "$WORK_DIR/aws-efa-installer.key" "$EFA_INSTALLER_KEY_FINGERPRINT"
    verify_sha256 "$WORK_DIR/$tarball" "${EFA_INSTALLER_SHA256:-}"
    tar -xzf "$WORK_DIR/$tarball" -C "$WORK_DIR"
    # Container mode: no kernel module, no ulimit file, no EFA device probe
    # (docs/facts/serving-image.md#efa-installer-container-flags).
    log "EFA installer $EFA_INSTALLER_VERSION in container mode"
    (cd "$WORK_DIR/aws-efa-installer" && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify)
}

# What the image's ENV relies on, checked before the image is kept: the bundled plugin at the pinned
# version (package libnccl-ofi, docs/facts/node-software.md#pin-aws-ofi-nccl-version) and both
# libraries in the folders the Dockerfile puts on LD_LIBRARY_PATH.
check_installed() {
    local out version
    out=$(dpkg-query -W -f='${db:Status-Abbrev} ${Version}' libnccl-ofi 2>/dev/null) || out=""
    [[ $out == ii* ]] || die "the EFA installer left no libnccl-ofi package (aws-ofi-nccl); expected version $AWS_OFI_NCCL_VERSION"
    version=${out##* }
    [[ $version == "$AWS_OFI_NCCL_VERSION" || $version == "$AWS_OFI_NCCL_VERSION"-* ]] ||
        die "EFA installer $EFA_INSTALLER_VERSION bundles aws-ofi-nccl $version, but AWS_OFI_NCCL_VERSION pins $AWS_OFI_NCCL_VERSION"
    [[ -e $ROOT$LIBFABRIC_DIR/libfabric.so.1 ]] || die "libfabric.so.1 is not in $LIBFABRIC_DIR, which the image's LD_LIBRARY_PATH names"
    [[ -e $ROOT$OFI_NCCL_DIR/libnccl-net-ofi.so ]] ||
        die "libnccl-net-ofi.so is not in $OFI_NCCL_DIR, which the image's LD_LIBRARY_PATH and NCCL_NET_PLUGIN=ofi expect"
    log "aws-ofi-nccl $version and libfabric installed"
}

main() {
    read_args
    require_apt_image
    apt_install_missing
    install_efa
    check_installed
    rm -rf "$WORK_DIR" "$ROOT"/var/lib/apt/lists/*
}

main "$@"
