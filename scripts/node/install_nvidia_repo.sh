#!/usr/bin/env bash
# NVIDIA's CUDA package repository, trusted through its signing key pinned by fingerprint in
# versions.env (NVIDIA_APT_KEY_FINGERPRINT / NVIDIA_RPM_KEY_FINGERPRINT). Every NVIDIA package
# (driver, Fabric Manager, NVLSM, IMEX, CUDA, NCCL) is then verified by apt/dnf against that key.
#
# Images that already list the repository (the Deep Learning AMIs, through NVIDIA's cuda-keyring
# package) keep their entry: a second entry for the same URL with another `signed-by` keyring makes
# apt refuse every source (docs/facts/node-software.md#apt-signed-by-conflict). On apt, a pin
# (/etc/apt/preferences.d) makes NVIDIA's packages come from NVIDIA's repository only, so the driver
# and Fabric Manager cannot come from different repositories.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PIN_FILE=/etc/apt/preferences.d/fminfra-nvidia

repo_files() {
    if [[ $PKG == apt ]]; then
        FINGERPRINT=$(ver NVIDIA_APT_KEY_FINGERPRINT)
        KEY_NAME=${FINGERPRINT: -8}
        KEY_NAME=${KEY_NAME,,}.pub
        KEYRING=/usr/share/keyrings/fminfra-cuda-archive-keyring.gpg
        REPO_FILE=/etc/apt/sources.list.d/fminfra-cuda.list
        REPO_CONTENT="deb [signed-by=$KEYRING] $NVIDIA_REPO_URL/ /"
        # docs/facts/node-software.md#apt-preferences-origin-pin
        PIN_CONTENT="# Written by fminfra install_nvidia_repo.sh; do not edit.
# NVIDIA's driver, Fabric Manager, NVLSM, IMEX, CUDA and NCCL packages come from NVIDIA's repository only.
Package: nvidia-* libnvidia-* nvlsm cuda-* libnccl2 libnccl-dev
Pin: origin developer.download.nvidia.com
Pin-Priority: 600"
    else
        FINGERPRINT=$(ver NVIDIA_RPM_KEY_FINGERPRINT)
        KEY_NAME=${FINGERPRINT: -8}.pub
        KEYRING=/etc/pki/rpm-gpg/fminfra-NVIDIA-${FINGERPRINT: -8}
        REPO_FILE=/etc/yum.repos.d/fminfra-cuda.repo
        REPO_CONTENT="[fminfra-cuda]
name=NVIDIA CUDA $REPO_DISTRO $REPO_ARCH (fminfra)
baseurl=$NVIDIA_REPO_URL
enabled=1
gpgcheck=1
gpgkey=file://$KEYRING"
        PIN_CONTENT=""
    fi
}

# A source file other than fminfra's that already lists NVIDIA's repository for this distro/arch.
existing_entry() {
    local file
    if [[ $PKG == apt ]]; then
        for file in "$FMINFRA_ROOT"/etc/apt/sources.list "$FMINFRA_ROOT"/etc/apt/sources.list.d/*.list "$FMINFRA_ROOT"/etc/apt/sources.list.d/*.sources; do
            [[ -f $file && $file != "$FMINFRA_ROOT$REPO_FILE" ]] || continue
            if grep -v '^[[:space:]]*#' "$file" | grep -qF "$NVIDIA_REPO_URL"; then
                printf '%s' "${file#"$FMINFRA_ROOT"}"
                return 0
            fi
        done
    else
        for file in "$FMINFRA_ROOT"/etc/yum.repos.d/*.repo; do
            [[ -f $file && $file != "$FMINFRA_ROOT$REPO_FILE" ]] || continue
            if grep -qE "^[[:space:]]*baseurl[[:space:]]*=[[:space:]]*${NVIDIA_REPO_URL//./\\.}/?[[:space:]]*$" "$file"; then
                printf '%s' "${file#"$FMINFRA_ROOT"}"
                return 0
            fi
        done
    fi
    return 1
}

# The keyring an existing apt entry trusts must hold the pinned key.
check_existing_keyring() {
    local file=$1 keyring home got
    keyring=$(grep -v '^[[:space:]]*#' "$FMINFRA_ROOT$file" | grep -F "$NVIDIA_REPO_URL" | sed -n 's/.*signed-by=\([^] ]*\).*/\1/p' | head -n 1)
    [[ -n $keyring ]] || keyring=$(sed -n 's/^Signed-By:[[:space:]]*//p' "$FMINFRA_ROOT$file" | head -n 1)
    if [[ -z $keyring || ! -r $FMINFRA_ROOT$keyring ]]; then
        log WARN "nvidia-repo: $file names no readable signed-by keyring; apt's own trusted keys verify it"
        return 0
    fi
    mkdir -p "$FMINFRA_WORK_DIR"
    home=$(mktemp -d "$FMINFRA_WORK_DIR/gnupg.XXXXXX")
    chmod 700 "$home"
    got=$(key_fingerprint "$FMINFRA_ROOT$keyring" "$home")
    rm -rf "$home"
    [[ $got == "$FINGERPRINT" ]] || unverified "$keyring (trusted by $file) has fingerprint '${got:-none}', but the manifest pins $FINGERPRINT"
}

check_repo() {
    local existing
    if existing=$(existing_entry); then
        CHECK_DETAIL="the image's entry $existing for $NVIDIA_REPO_URL"
        [[ ! -e $FMINFRA_ROOT$REPO_FILE ]] || return 1
    else
        CHECK_DETAIL="repository $NVIDIA_REPO_URL"
        [[ -s $FMINFRA_ROOT$KEYRING && -f $FMINFRA_ROOT$REPO_FILE ]] || return 1
        [[ $(<"$FMINFRA_ROOT$REPO_FILE") == "$REPO_CONTENT" ]] || return 1
        CHECK_DETAIL="repository $NVIDIA_REPO_URL, key $FINGERPRINT"
    fi
    if [[ -n $PIN_CONTENT ]]; then
        [[ -f $FMINFRA_ROOT$PIN_FILE && $(<"$FMINFRA_ROOT$PIN_FILE") == "$PIN_CONTENT" ]] || return 1
        CHECK_DETAIL+=", pinned by $PIN_FILE"
    fi
}

apply_repo() {
    local existing
    if [[ $DRY_RUN == 1 ]]; then
        printf '      = an entry the image already has for %s is kept (no second entry); otherwise:\n' "$NVIDIA_REPO_URL"
    elif existing=$(existing_entry); then
        log INFO "nvidia-repo: the image lists $NVIDIA_REPO_URL in $existing; reusing it"
        [[ $PKG == apt ]] && check_existing_keyring "$existing"
        [[ ! -e $FMINFRA_ROOT$REPO_FILE ]] || run rm -f "$FMINFRA_ROOT$REPO_FILE"
    fi
    if [[ $DRY_RUN == 1 || -z ${existing:-} ]]; then
        install_repo_key "$NVIDIA_REPO_URL/$KEY_NAME" "$FINGERPRINT" "$FMINFRA_ROOT$KEYRING"
        write_file "$FMINFRA_ROOT$REPO_FILE" "$REPO_CONTENT"
    fi
    [[ -z $PIN_CONTENT ]] || write_file "$FMINFRA_ROOT$PIN_FILE" "$PIN_CONTENT"
    pkg_refresh
}

main() {
    node_script_init "$@"
    repo_files
    step nvidia-repo "NVIDIA CUDA repository $REPO_DISTRO/$REPO_ARCH, key $FINGERPRINT" check_repo apply_repo skip
    finish_steps
}

main "$@"
